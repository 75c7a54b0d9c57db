"""A session's turns (the Responses API's responses) and the client's approvals of verified writes: their
state, and the behaviour that changes it (``take_turn``, ``answer_approval``, ``approved``).

Both are state of the one ``Session`` (``session.py``), which holds them; this module reaches the session
only through ``SessionSide``, and nothing it calls there calls back into it, so a turn's path goes one way:
coordinator -> turns -> session (the session enters this module on its own paths only: a commit consumes
approvals, a replay restores turns). The Responses API (``responses/translate.py``) only translates. A turn is what the
client sends between two ends of the agent's turn: turn 0 starts at ``created``, each later one at its
``turn`` record, followed by its inputs (user messages, client tool results, approval answers).

Guarantees:
- a turn continues only the latest one (409 otherwise), and takes only inputs the session waits for:
  a pending client tool call's result, an answer to an open approval request (404 otherwise);
- a turn gives a result for every client call the agent waits on and an answer to every approval request
  it waits on (400 ``missing_function_call_output`` / ``missing_approval_response`` otherwise, at once):
  the calls of a parallel action go out together, the agent goes on only once it has all their results,
  and a turn never waits on an input that no later turn could bring;
- inputs that were already taken (the same tool result or approval posted again, or a turn repeated
  with its Idempotency-Key) answer with the turn that took them and record nothing: a write runs once;
- an approval request is asked once per verified write; a restart that re-proposes the same write finds
  the same open request (and its answer, if the client gave one), so the id the client holds stays good;
- a denied write never runs: ``approved()`` answers False and the session tells the agent so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from pydantic import Field, StrictBool

from ...protocol.types import Observation, ToolCall
from ..core.api import Body, ToolResult, UserMessage
from ..core.errors import BadRequest, Conflict, NotFound, Overloaded
from ..log.records import ApprovalAnswer, ApprovalRequest, Record, ToolResultPosted, Turn, TurnMeta

ENDS_TURN = ("agent_message", "tool_call_pending", "approval_request")  # records after which the client acts


class ApprovalPost(Body):
    """The client's answer to an approval request (``approval_request`` event or ``mcp_approval_request`` item)."""

    approval_request_id: str = Field(min_length=1, max_length=200)
    approve: StrictBool
    reason: str | None = Field(None, max_length=2000)


TurnInput = Annotated[UserMessage | ToolResult | ApprovalPost, Field(union_mode="left_to_right")]


class TurnPost(Body):
    """A continuation: turn ``previous + 1`` of a session, with its inputs."""

    previous: int = Field(ge=0, description="the turn it continues: the session's latest")
    inputs: list[TurnInput] = Field(min_length=1, max_length=64)
    meta: TurnMeta


@dataclass
class ApprovalState:
    """One approval request: the write it holds, the client's answer once given, and whether the write's
    step was committed since (then a later identical write asks anew)."""

    id: str
    call_key: str
    approve: bool | None = None
    reason: str | None = None
    consumed: bool = False
    answered: asyncio.Future | None = None


@dataclass
class Approvals:
    sid: str
    items: dict[str, ApprovalState] = field(default_factory=dict)

    def open_for(self, call: ToolCall) -> ApprovalState | None:
        """The request for ``call`` that no commit has consumed yet (one asked before a restart)."""
        return next((a for a in self.items.values() if a.call_key == call.key() and not a.consumed), None)

    def new(self, call: ToolCall) -> tuple[ApprovalState, ApprovalRequest]:
        a = ApprovalState(f"apr_{self.sid}_{len(self.items)}", call.key())
        self.items[a.id] = a
        return a, ApprovalRequest(id=a.id, name=call.name, arguments=call.arguments)

    def answer(self, post: ApprovalPost) -> ApprovalAnswer | None:
        """The record of a new answer; None for one given before (409 if it differed; 404: no such request)."""
        a = self.items.get(post.approval_request_id)
        if a is None:
            raise NotFound(f"no approval request {post.approval_request_id!r} in this conversation")
        if a.approve is not None:
            if a.approve != post.approve:
                raise Conflict(f"approval request {a.id} was already {'approved' if a.approve else 'denied'}")
            return None
        a.approve, a.reason = post.approve, post.reason
        if a.answered is not None and not a.answered.done():
            a.answered.set_result(None)
        return ApprovalAnswer(id=a.id, approve=post.approve, reason=post.reason)

    def waiting(self) -> list[ApprovalState]:
        """The requests the agent waits on now: unanswered, with the agent blocked on the answer."""
        return [a for a in self.items.values() if a.approve is None and a.answered is not None
                and not a.answered.done()]

    def consumed(self) -> None:
        """A step was committed: every answered request has had its effect."""
        for a in self.items.values():
            if a.approve is not None:
                a.consumed = True

    def restore(self, rec: ApprovalRequest | ApprovalAnswer) -> None:
        if isinstance(rec, ApprovalRequest):
            self.items[rec.id] = ApprovalState(rec.id, ToolCall(rec.name, rec.arguments).key())
        elif rec.id in self.items:
            self.items[rec.id].approve, self.items[rec.id].reason = rec.approve, rec.reason


@dataclass
class Turns:
    """How many turns a session has had, and which turn took each input (for repeats)."""

    count: int = 1
    ended: bool = False  # since the latest turn began, the agent's turn ended (``ENDS_TURN``)
    starts: dict[int, int] = field(default_factory=lambda: {0: 0})  # a turn's number -> its first record's seq
    keys: dict[str, int] = field(default_factory=dict)  # a turn's Idempotency-Key -> its number
    took: dict[str, int] = field(default_factory=dict)  # "call:<id>" / "approval:<id>" -> the turn that took it
    waiting: Mapping[str, Any] = field(default_factory=dict)  # the client calls the agent waits on, by call id

    def repeat(self, post: TurnPost, key: str | None, approvals: Approvals) -> int | None:
        """The turn that already took this post (by its key, or every input it carries), or None; 409 for
        an approval answered otherwise before."""
        if key is not None and key in self.keys:
            return self.keys[key]
        taken = {self.took.get(ident) for ident in map(identity, post.inputs)}
        if len(taken) == 1 and None not in taken:
            for item in post.inputs:
                if isinstance(item, ApprovalPost):
                    approvals.answer(item)  # the same answer records nothing; another is a conflict
            return taken.pop()
        return None

    def begin(self, post: TurnPost, key: str | None, approvals: Approvals | None = None) -> int:
        if post.previous != self.count - 1:
            raise Conflict(f"turn {post.previous} is not this conversation's latest (turn {self.count - 1}); "
                           "continue from the latest", "previous_response_id", "not_latest")
        self._answers_all(post, approvals)
        n, self.count, self.ended = self.count, self.count + 1, False
        if key is not None:
            self.keys[key] = n
        return n

    def _answers_all(self, post: TurnPost, approvals: Approvals | None) -> None:
        """400 unless ``post`` answers everything the agent waits on: the output of every pending client
        call, and every open approval request. A turn that left one unanswered would wait for an input
        that no later turn can bring (the next turn is refused while this one runs)."""
        answered = {item.call_id for item in post.inputs if isinstance(item, ToolResult)}
        missing = [call_id for call_id in self.waiting if call_id not in answered]
        if missing:
            raise BadRequest(f"no output for function call{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
                             "send the output of every function call of the response together, before any new "
                             "message", "input", "missing_function_call_output")
        given = {item.approval_request_id for item in post.inputs if isinstance(item, ApprovalPost)}
        open_ = [a.id for a in (approvals.waiting() if approvals else ()) if a.id not in given]
        if open_:
            raise BadRequest(f"no answer to approval request{'s' if len(open_) > 1 else ''} {', '.join(open_)}: "
                             "send an mcp_approval_response (approve or deny) for it first", "input",
                             "missing_approval_response")

    def took_input(self, item: UserMessage | ToolResult | ApprovalPost, n: int) -> None:
        ident = identity(item)
        if ident is not None:
            self.took[ident] = n

    def restore(self, rec: Record, seq: int, approvals: Approvals) -> None:
        """Replay a record of turns or approvals (``Session.restore``); ``seq``: its place in the session's events."""
        match rec:
            case Turn(n=n, idempotency_key=key):
                self.count, self.starts[n], self.ended = n + 1, seq, False
                if key is not None:
                    self.keys[key] = n
            case ToolResultPosted(call_id=call_id):
                self.took[f"call:{call_id}"] = self.count - 1
            case ApprovalRequest() | ApprovalAnswer():
                approvals.restore(rec)
                if isinstance(rec, ApprovalAnswer):
                    self.took[f"approval:{rec.id}"] = self.count - 1


def identity(item: UserMessage | ToolResult | ApprovalPost) -> str | None:
    """What makes an input the same input when posted twice; None for messages (two may be alike)."""
    if isinstance(item, ToolResult):
        return f"call:{item.call_id}"
    if isinstance(item, ApprovalPost):
        return f"approval:{item.approval_request_id}"
    return None


class SessionSide(Protocol):
    """A session as its turns and approvals see it: ``session.Session``, which holds them (so this module does
    not import it). They read its state and write through its methods; none of those calls back into here."""

    id: str
    status: str
    recorded: int
    request: Any
    inbox: asyncio.Queue
    pending_calls: dict[str, asyncio.Future]
    turns: Turns
    approvals: Approvals

    def record(self, rec: Record) -> None: ...
    def takes_input(self) -> None: ...
    def post_message(self, text: str, stop: bool, key: str | None, inbox_limit: int) -> None: ...
    def deliver_tool_result(self, call_id: str, observation: Observation) -> None: ...
    def flush_calls(self) -> None: ...
    def outside(self) -> AbstractContextManager[None]: ...
    async def from_client(self, waited: Awaitable[Any], what: str) -> Any: ...


def take_turn(s: SessionSide, post: TurnPost, key: str | None, inbox_limit: int) -> int:
    """The turn that takes ``post``; returns its number. A repeat (its ``key``, or every input it carries, was
    taken before) answers with the turn that took it and records nothing. Otherwise ``s``'s next turn is
    recorded and takes its inputs, each checked before anything is recorded: 409 for a session that ended
    or whose agent's turn goes on, or a message to a session whose user is not the client; 404 for a tool
    call or approval request that is not open; 429 past ``inbox_limit`` unanswered messages."""
    n = s.turns.repeat(post, key, s.approvals)
    if n is not None:
        return n
    s.takes_input()
    if not s.turns.ended:  # nothing the agent did since the latest turn began has ended its turn yet
        raise Conflict(f"response {s.turns.count - 1} of this conversation is still in progress")
    messages = sum(isinstance(item, UserMessage) for item in post.inputs)
    if messages and s.request.user != "client":
        raise Conflict(f"session {s.id}'s user is {s.request.user!r}; it takes no messages")
    if s.inbox.qsize() + messages > inbox_limit:
        raise Overloaded(f"session {s.id} would hold over {inbox_limit} unanswered messages, its limit", 1)
    for item in post.inputs:
        if isinstance(item, ToolResult) and item.call_id not in s.pending_calls:
            raise NotFound(f"no pending function call {item.call_id!r} in this conversation")
        if isinstance(item, ApprovalPost) and item.approval_request_id not in s.approvals.items:
            raise NotFound(f"no approval request {item.approval_request_id!r} in this conversation")
    n = s.turns.begin(post, key, s.approvals)
    s.turns.starts[n] = s.recorded
    s.record(Turn(n=n, meta=post.meta, idempotency_key=key))
    for item in post.inputs:
        s.turns.took_input(item, n)
        if isinstance(item, UserMessage):
            s.post_message(item.text, item.stop, None, inbox_limit)
        elif isinstance(item, ToolResult):
            s.deliver_tool_result(item.call_id, Observation(item.content, error=item.error))
        else:
            answer_approval(s, item)
    return n


def answer_approval(s: SessionSide, post: ApprovalPost) -> None:
    """Record the client's answer to an open approval request of ``s`` (a repeat records nothing)."""
    answer = s.approvals.answer(post)
    if answer is not None:
        s.record(answer)


async def approved(s: SessionSide, call: ToolCall) -> tuple[bool, str | None]:
    """Ask the client to approve a write of ``s`` that the verifier accepted, once per write (also across
    a restart), and wait for the answer: (approved, the client's reason)."""
    a = s.approvals.open_for(call)
    if a is None:
        a, request = s.approvals.new(call)
        s.flush_calls()
        s.record(request)
    if a.approve is None:
        a.answered = asyncio.get_running_loop().create_future()
        s.status = "waiting_approval"
        try:
            with s.outside():
                await s.from_client(a.answered, f"answer to approval request {a.id}")
        finally:
            if s.status == "waiting_approval":
                s.status = "running"
    return bool(a.approve), a.reason
