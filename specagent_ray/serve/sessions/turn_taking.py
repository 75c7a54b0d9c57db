"""What a session does with its turns: take a client's turn (messages, tool results, approval answers),
and ask the client to approve a verified write. The turns' plain state is ``turns.py``."""

from __future__ import annotations

import asyncio

from ...protocol.types import Observation, ToolCall
from ..core.api import ToolResult, UserMessage
from ..core.errors import Conflict, NotFound, Overloaded
from ..log.records import Turn
from .session import Session
from .turns import ApprovalPost, TurnPost


def take_turn(s: Session, post: TurnPost, key: str | None, inbox_limit: int) -> int:
    """Record ``s``'s next turn and take its inputs; returns its number. Every input is checked before
    anything is recorded: 404 for a tool call or approval request that is not open, 409 for a message
    to a session whose user is not the client, 429 past ``inbox_limit`` unanswered messages."""
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


def answer_approval(s: Session, post: ApprovalPost) -> None:
    """Record the client's answer to an open approval request of ``s`` (a repeat records nothing)."""
    answer = s.approvals.answer(post)
    if answer is not None:
        s.record(answer)


async def approved(s: Session, call: ToolCall) -> tuple[bool, str | None]:
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
