"""One served session: its state, its journal (durable log + event stream), and the adapters that
connect the protocol's tools and user to the tool host or the client.

Every record a session writes goes to the session log first; it becomes a public event (SSE) only
once the log holds it, so a client never sees a commit that a restarted coordinator would not know.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterator, MutableSequence, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ...costs.ledger import Ledger
from ...protocol.types import Action, ActionKind, Effect, Event, Observation, Step, Task, ToolCall
from ..core.api import CreateSession
from ..core.errors import BadRequest, Conflict, NotFound, Overloaded
from ..log.records import (
    Commit,
    Deleted,
    Final,
    Intent,
    ModelCalls,
    Opening,
    ProtocolEvent,
    Record,
    Result,
    ToolCallPending,
    ToolResultPosted,
    UserMessageRecord,
    parse,
    written,
)
from ..log.wire import call_dict, call_from, event_dict, observation_dict, observation_from, step_dict, step_from
from .turns import ENDS_TURN, Approvals, Turns

Status = str  # running | waiting_user | waiting_tool | waiting_approval | done | failed | cancelled | timed_out
FINISHED = ("done", "failed", "cancelled", "timed_out")


class IdleTimeout(BaseException):  # like CancelledError, it must pass the protocol's tool error handler
    """The session waited ``idle_timeout_s`` for its client (a user message or a tool result): it ends."""


@dataclass(eq=False)  # identity: a session is a live object, hashed by id()
class Session:
    """State of one session. Guarantees: records reach ``log`` in the order they happen; each staged
    write gets an intent record with a fresh idempotency key before it runs; every commit is recorded
    with the steps, their write keys and the model calls since the previous commit."""

    id: str
    request: CreateSession
    task: Task
    log: Callable[[str, Record, dict[str, Any]], None]  # (session id, record, its JSON) -> the session log
    clock: Callable[[], float] = time.perf_counter
    domain: str = ""  # the tau2 domain, for tau2 sources
    epoch: int = 0  # the session log lease epoch of the coordinator running it; intents carry it
    owner: str = "local"  # the tenant that created it (admission.py); nobody else sees it
    idempotency_key: str | None = None  # its create's Idempotency-Key
    idle_timeout_s: float = 900.0  # the longest wait for the client before the session ends as timed_out
    message_keys: dict[str, tuple[str, bool]] = field(default_factory=dict)  # Idempotency-Key -> posted message
    status: Status = "running"
    steps: list[Step] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # published (durable) records
    unpublished: list[dict[str, Any]] = field(default_factory=list)
    recorded: int = 0  # records written so far: the next one's seq
    ledger: Ledger = field(default_factory=Ledger)
    intents: dict[str, Intent] = field(default_factory=dict)  # idempotency key -> intent record
    results: dict[str, Observation] = field(default_factory=dict)
    committed_keys: set[str] = field(default_factory=set)
    inbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    pending_calls: dict[str, asyncio.Future] = field(default_factory=dict)
    posted: dict[str, Observation] = field(default_factory=dict)  # client tool results by call id
    termination: str | None = None
    error: str | None = None
    reward: float | None = None
    deleted: bool = False  # the client deleted it (Responses API): answered as one that does not exist
    cancelled: bool = False  # its client cancelled it (``cancel``); any other cancel is its coordinator stopping
    turns: Turns = field(default_factory=Turns)
    approvals: Approvals = field(init=False)
    runner: asyncio.Task | None = None
    # Samples go to these sinks; the coordinator passes its own bounded ones, shared by all sessions.
    overheads: MutableSequence[float] = field(default_factory=list)  # coordinator time per committed step, s
    log_waits: MutableSequence[float] = field(default_factory=list)  # waits for an intent to be durable, s
    _calls_logged: int = 0
    _reads: int = 0  # client reads asked since the last commit
    _staged_calls: frozenset[str] = frozenset()  # one-call action keys of the staged action's calls
    _repair_author: tuple[str, frozenset[str]] = ("strong", frozenset())  # the latest fused repair's judge, calls
    _key_of: dict[str, str] = field(default_factory=dict)  # one-call action key -> idempotency key (uncommitted)
    _outside: float = 0.0
    _outside_mark: float = 0.0
    _mark: float = 0.0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._mark = self.clock()
        self.approvals = Approvals(self.id)
        self.turns.waiting = self.pending_calls  # a turn answers all of them or none (turns.py)

    # -- records and events -----------------------------------------------------------------------

    def record(self, rec: Record) -> None:
        self.recorded += 1
        self.turns.ended |= rec.t in ENDS_TURN
        if getattr(rec, "at", None) == 0:  # a stamped kind: its time, for usage by day
            rec = rec.model_copy(update={"at": int(time.time())})
        data = rec.data()
        self.log(self.id, rec, data)
        self.unpublished.append(data)

    def publish(self, records: Sequence[dict[str, Any]]) -> None:
        """Make durable records visible to event readers."""
        for rec in records:
            self.events.append({"seq": len(self.events), **rec})
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_events(self, after: int, wait_s: float, whole_turn: bool = False) -> dict[str, Any]:
        """The public events from ``after`` on, waiting up to ``wait_s`` for one if there are none yet
        (``whole_turn``: until one of them ends the agent's turn, ``ENDS_TURN``); ``done`` once the reader
        has seen the ``final`` event."""
        if after < 0:
            raise BadRequest(f"after must be >= 0, got {after}")
        deadline = asyncio.get_running_loop().time() + wait_s
        while not self._answered(after, whole_turn):
            changed, left = self._changed, deadline - asyncio.get_running_loop().time()
            try:
                async with asyncio.timeout(max(left, 0.0)):
                    await changed.wait()
            except TimeoutError:
                break
        return self.events_after(after)

    def events_after(self, after: int) -> dict[str, Any]:
        """The public events from ``after`` on, as they are now; ``done`` once they include ``final``."""
        events = self.events[after:]
        done = bool(self.events) and self.events[-1]["t"] == "final" and after + len(events) >= len(self.events)
        return {"events": events, "status": self.status, "done": done}

    def has_news(self, after: int) -> bool:
        """Whether a reader at ``after`` has something to read: an event, or the session's end."""
        return self._answered(after, False)

    def _answered(self, after: int, whole_turn: bool) -> bool:
        if self.events and self.events[-1]["t"] == "final":
            return True
        return any(e["t"] in ENDS_TURN for e in self.events[after:]) if whole_turn else len(self.events) > after

    async def cancel(self, grace_s: float = 5.0) -> None:
        """Stop the session's runner and wait for it to record its end. A cancel that some awaited code
        swallowed is sent again every ``grace_s`` until the runner ends."""
        self.cancelled = True
        while self.runner is not None and not self.runner.done():
            self.runner.cancel()
            await asyncio.wait({self.runner}, timeout=grace_s)  # the runner records its own end

    # -- the protocol's Journal -------------------------------------------------------------------

    def event(self, event: Event) -> None:
        if event.kind == "staged" and event.action is not None:
            self._staged_calls = frozenset(c.action_key() for c in event.action.calls)
        elif event.kind == "rejected":  # a repair that repeats a staged call is still the strong model's
            self._staged_calls = frozenset()
        elif event.kind == "fused_repair" and event.action is not None:  # its judge's step: mid or strong
            self._repair_author = (event.author or "strong", frozenset(c.action_key() for c in event.action.calls))
        data = event_dict(event)
        self.record(ProtocolEvent(t=data.pop("kind"), **data))

    def committed(self, steps: Sequence[Step]) -> None:
        keys = [self._write_keys(s) for s in steps]
        if any(s.author == "weak" and s.effect is Effect.WRITE for s in steps):
            self._staged_calls = frozenset()  # the staged calls ran: a later strong write is the strong's
        self.steps.extend(steps)
        self.committed_keys.update(written(keys))
        self.approvals.consumed()
        self._reads = 0
        calls = self.ledger.calls[self._calls_logged:]
        self._calls_logged = len(self.ledger.calls)
        self.record(Commit(steps=[step_dict(s) for s in steps], keys=keys, calls=[call_dict(c) for c in calls]))
        now = self.clock()
        inside = (now - self._mark) - (self._outside - self._outside_mark)
        self.overheads.append(max(inside, 0.0) / len(steps))
        self._mark, self._outside_mark = now, self._outside

    def _write_keys(self, step: Step) -> str | list[str | None] | None:
        """The idempotency keys a committed step settles: one per call of a parallel write, else one or None."""
        if step.effect is not Effect.WRITE or not step.action.calls:
            return None
        keys = [self._key_of.pop(c.action_key(), None) for c in step.action.calls]
        return keys if step.action.more else keys[0]

    def flush_calls(self) -> None:
        """Record the model calls since the last commit: the agent's turn ends before its next commit."""
        calls = self.ledger.calls[self._calls_logged:]
        if calls:
            self._calls_logged = len(self.ledger.calls)
            self.record(ModelCalls(calls=[call_dict(c) for c in calls]))

    # -- accounting of time spent outside the coordinator ---------------------------------------------

    @contextmanager
    def outside(self) -> Iterator[None]:
        """Time spent waiting on engines, tools or people: not coordinator overhead."""
        start = self.clock()
        try:
            yield
        finally:
            self._outside += self.clock() - start

    @contextmanager
    def waiting_for_log(self) -> Iterator[None]:
        """Waiting for the session log's disk write (group commit): outside, and reported apart."""
        start = self.clock()
        try:
            with self.outside():
                yield
        finally:
            self.log_waits.append(self.clock() - start)

    # -- staged writes ----------------------------------------------------------------------------

    def intent(self, call: ToolCall) -> str:
        """Record the intent to run an approved write and return its idempotency key."""
        key = f"{self.id}:w{len(self.intents)}"
        author = "weak" if call.action_key() in self._staged_calls else \
            self._repair_author[0] if call.action_key() in self._repair_author[1] else "strong"
        self.intents[key] = Intent(key=key, call={"name": call.name, "arguments": call.arguments}, author=author,
                                   epoch=self.epoch)
        self._key_of[call.action_key()] = key
        self.record(self.intents[key])
        return key

    def user_call_key(self, call: ToolCall) -> str:
        """The idempotency key of a call the (scripted) user runs on their own side: the call and how often
        the committed history already holds it. Steps that come and go uncommitted (a crash before the
        user's reply was stored, a re-drafted block) do not change it, so the same request asked again
        gets the key whose first result the tool host keeps; the next real occurrence gets a new one."""
        before = sum(u.call.key() == call.key()
                     for st in self.steps if st.observation for u in st.observation.user_calls)
        return f"{self.id}:u{before}-{hashlib.sha256(call.key().encode()).hexdigest()[:12]}"

    def result(self, key: str, observation: Observation) -> None:
        self.results[key] = observation
        self.record(Result(key=key, observation=observation_dict(observation)))

    def unresolved_intents(self) -> list[Intent]:
        """Writes whose intent is logged but whose step is not committed (a restart came between)."""
        return [i for k, i in self.intents.items() if k not in self.committed_keys]

    def resolved(self, intent: Intent, observation: Observation) -> None:
        """Commit a resumed intent's write with what it returned, under the intent's own key."""
        action = Action(ActionKind.TOOL, ToolCall(intent.call.name, intent.call.arguments))
        self._key_of[action.key()] = intent.key
        self.committed([Step(action, observation, intent.author, Effect.WRITE)])

    # -- replay -----------------------------------------------------------------------------------

    def restore(self, records: Sequence[dict[str, Any]]) -> None:
        """Rebuild this session from its stored records (a restarted coordinator's replay): the event
        stream, committed steps and their write keys, the ledger, intents and their results, how it
        ended, and (client users) the posted messages no agent step has answered yet, queued again.
        Raises ``ValueError`` (pydantic's ``ValidationError`` included) if a record is not a known kind."""
        typed = [parse(r) for r in records]  # the caller checked that the first is ``created``
        posted: list[tuple[str, bool]] = []
        for data, rec in zip(records, typed, strict=True):
            self.events.append({"seq": len(self.events), **data})
            self.turns.ended |= rec.t in ENDS_TURN
            match rec:
                case Commit(steps=steps, keys=keys, calls=calls):
                    self.steps.extend(step_from(x.model_dump()) for x in steps)
                    self.committed_keys.update(written(keys))
                    self.ledger.calls.extend(call_from(c.model_dump()) for c in calls)
                    self.approvals.consumed()
                case Intent(key=key):
                    self.intents[key] = rec
                case Result(key=key, observation=obs):
                    self.results[key] = observation_from(obs.model_dump())  # type: ignore[assignment]
                case Opening(text=text):
                    self.task = Task(self.task.id, text, self.task.context)
                case UserMessageRecord(text=text, stop=stop, idempotency_key=key):
                    posted.append((text, stop))
                    if key is not None:
                        self.message_keys[key] = (text, stop)
                case Final(status=status, termination=termination, error=error):
                    self.status, self.termination, self.error = status, termination, error
                case ModelCalls(calls=calls):
                    self.ledger.calls.extend(call_from(c.model_dump()) for c in calls)
                case ToolCallPending(call_id=call_id):
                    self.pending_calls[call_id] = asyncio.get_running_loop().create_future()  # asked before
                case ToolResultPosted(call_id=call_id, observation=obs):
                    self.pending_calls.pop(call_id, None)
                    self.posted[call_id] = observation_from(obs.model_dump())
                    self.turns.restore(rec, len(self.events) - 1, self.approvals)
                case Deleted():
                    self.deleted = True
                case _:  # turns and approvals
                    self.turns.restore(rec, len(self.events) - 1, self.approvals)
        self._calls_logged, self.recorded = len(self.ledger.calls), len(self.events)
        if self.request.user == "client" and self.status not in FINISHED:
            answered = sum(1 for x in self.steps if x.action.kind is ActionKind.MESSAGE)
            for message in posted[answered:]:
                self.inbox.put_nowait(message)

    # -- the client's messages and tools (its turns: ``turns.py``) -------------------------------------

    def takes_input(self) -> None:
        """409 once the session has ended: it takes no more input."""
        if self.status in FINISHED:
            raise Conflict(f"session {self.id} is {self.status}; it takes no more input")

    def repeated_message(self, key: str | None, text: str, stop: bool) -> bool:
        """True if ``key`` already posted this message (409 if it posted another)."""
        if key is None or key not in self.message_keys:
            return False
        if self.message_keys[key] != (text, stop):
            raise Conflict("this Idempotency-Key was used for a different message")
        return True

    def post_message(self, text: str, stop: bool, key: str | None, inbox_limit: int) -> None:
        """Record the user's message and queue it for the agent (409: the session's user is not the
        client; 429: ``inbox_limit`` messages wait unanswered)."""
        if self.request.user != "client":
            raise Conflict(f"session {self.id}'s user is {self.request.user!r}; only client-user sessions take "
                           "messages")
        if self.inbox.qsize() >= inbox_limit:
            raise Overloaded(f"session {self.id} holds {inbox_limit} unanswered messages, its limit", 1)
        self.record(UserMessageRecord(text=text, stop=stop, idempotency_key=key))
        if key is not None:
            self.message_keys[key] = (text, stop)
        self.inbox.put_nowait((text, stop))

    # -- client-side tools --------------------------------------------------------------------------

    def read_call_id(self, call: ToolCall) -> str:
        """A client read's call id: the committed position, the reads asked since, and the call. A restart
        that drafts the same reads again asks with the same ids, so results the client posts still fit."""
        self._reads += 1
        return f"{self.id}:r{len(self.steps)}.{self._reads}-{hashlib.sha256(call.key().encode()).hexdigest()[:8]}"

    async def client_call(self, call: ToolCall, call_id: str) -> Observation:
        """The client's result of ``call``: one it posted already (before a restart) is not asked again,
        and a call asked before a restart keeps waiting under the same id."""
        if call_id in self.posted:
            return self.posted[call_id]
        future = self.pending_calls.get(call_id)
        if future is None:
            future = self.pending_calls[call_id] = asyncio.get_running_loop().create_future()
            self.flush_calls()
            self.record(ToolCallPending(call_id=call_id, name=call.name, arguments=call.arguments))
        self.status = "waiting_tool"
        try:
            with self.outside():
                return await self.from_client(future, f"the result of tool call {call_id}")
        finally:
            self.pending_calls.pop(call_id, None)
            if self.status == "waiting_tool":
                self.status = "running"

    async def from_client(self, waited: Awaitable[Any], what: str) -> Any:
        """``waited``'s result; ``IdleTimeout`` if the client has not given it within ``idle_timeout_s``."""
        try:
            async with asyncio.timeout(self.idle_timeout_s):  # not wait_for: it can swallow a cancel
                return await waited
        except TimeoutError:
            raise IdleTimeout(f"timed out: no {what} within {self.idle_timeout_s:g} s") from None

    def deliver_tool_result(self, call_id: str, observation: Observation) -> None:
        future = self.pending_calls.get(call_id)
        if future is None or future.done():
            pending = ", ".join(sorted(self.pending_calls)) or "none"
            raise NotFound(f"session {self.id} has no pending tool call {call_id!r} (pending: {pending})")
        self.record(ToolResultPosted(call_id=call_id, observation=observation_dict(observation)))
        self.posted[call_id] = observation
        future.set_result(observation)


def summary(s: Session) -> dict[str, Any]:
    return {"session_id": s.id, "status": s.status, "committed_steps": len(s.steps),
            "termination": s.termination, "error": s.error, "events": len(s.events)}
