"""The session log's records: one pydantic union, discriminated by ``t``.

A session writes each kind in one place (named in its docstring). The same records are read back by
``Session.restore`` (replay), streamed to clients as server-sent events (with ``seq``, their position in
the session's stream; the gateway's OpenAPI schema documents them from ``SessionEvent``), counted by the
coordinator's metrics and by the load tester. ``parse`` turns a stored dict back into its record; a dict
that is not one of these kinds, or lacks a field, raises ``pydantic.ValidationError``.

Unknown fields are ignored on reading, so a log written by a newer version still replays.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, TypeAdapter, model_serializer

from ...protocol.interfaces import Purpose
from ...protocol.types import Author, Event
from ..core.api import CreateSession

EventKind = typing.get_type_hints(Event)["kind"]  # the protocol's event kinds, one definition


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    def data(self) -> dict[str, Any]:
        """The JSON form the log stores and the event stream shows."""
        return self.model_dump(mode="json")


class _Stamped(_Record):
    """A record whose time is kept (usage by day, ``usage.py``)."""

    at: int = Field(0, description="when the coordinator wrote it, Unix seconds (0: a log from before)")


class UserCallJson(BaseModel):
    name: str
    arguments: dict[str, Any]
    content: str
    error: bool = False


class ObservationJson(BaseModel):
    content: str
    error: bool = False
    user_stop: bool = False
    user_calls: list[UserCallJson] | None = Field(None, description="tools the user ran on their side before "
                                                  "replying (dual-control domains only)")
    parts: list[ObservationJson] | None = Field(None, description="a parallel action's: one per call, in order")

    @model_serializer(mode="wrap")
    def _without_empty_user_calls(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        for optional in ("user_calls", "parts"):
            if not out.get(optional):
                out.pop(optional, None)
        return out


class CallJson(BaseModel):
    name: str
    arguments: dict[str, Any]


class ActionJson(BaseModel):
    kind: Literal["tool", "message", "stop"]
    name: str | None = Field(None, description="tool actions: the tool")
    arguments: dict[str, Any] | None = Field(None, description="tool actions: the call's arguments")
    text: str | None = Field(None, description="message actions: the text")
    more: list[CallJson] | None = Field(None, description="a parallel action's calls after the first")

    @model_serializer(mode="wrap")
    def _only_its_fields(self, handler: Any) -> dict[str, Any]:  # a message action has no name, and so on
        return {k: v for k, v in handler(self).items() if v is not None}


class StepJson(BaseModel):
    action: ActionJson
    observation: ObservationJson | None = Field(description="null for a staged step")
    author: Author
    effect: Literal["read", "write"]


class ModelCallJson(BaseModel):
    role: Author
    purpose: Purpose
    wall_s: float
    usage: tuple[int, int, int] | tuple[int, int, int, int] = Field(
        description="prompt, cached prompt and decode tokens, then the predicted cached tokens (older logs: 3)")


class TurnMeta(BaseModel):
    """What a Responses API request said about its own response, beyond the session's request."""

    model: str = Field(description="the model name the client asked for (a method, or an alias of one)")
    metadata: dict[str, str] = Field(default_factory=dict)
    background: bool = False
    created_at: int = Field(0, description="when the gateway took the request, Unix seconds")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="the tools the agent had (echoed)")
    store: bool = Field(True, description="false: the response is not retrievable afterwards")
    echo: dict[str, Any] = Field(default_factory=dict, description="the response object's fields that say what "
                                 "was applied of the request (sampling, tool_choice, identifiers)")


# -- what the session's life writes (coordinator.py) -----------------------------------------------------

class Created(_Stamped):
    """Written first, once, when the session is created; the request as accepted."""

    t: Literal["created"] = "created"
    request: CreateSession
    owner: str = Field("local", description="the tenant: a hash of the API key that created it")
    idempotency_key: str | None = Field(None, description="the create's Idempotency-Key header")
    opening: str = Field("", description="the user's opening message, when known at creation")
    turn: TurnMeta | None = Field(None, description="a Responses API create: its first response")
    tools: list[dict[str, Any]] | None = Field(None, description="a Responses API create: the session's catalog")


class Opening(_Record):
    """A tau2 user simulator's opening message, asked for when the session starts."""

    t: Literal["opening"] = "opening"
    text: str


class Resumed(_Record):
    """A restarted coordinator resumed the session from the log."""

    t: Literal["resumed"] = "resumed"
    committed_steps: int


class Final(_Stamped):
    """Written last, once: how the session ended."""

    t: Literal["final"] = "final"
    status: Literal["done", "failed", "cancelled", "timed_out"]
    termination: str | None = None
    error: str | None = None


# -- the conversation (session.py: ClientUser, TimedUser; coordinator: posted messages) ---------------

class AgentMessage(_Record):
    t: Literal["agent_message"] = "agent_message"
    text: str


class UserMessageRecord(_Record):
    """A user's message: posted by the client (client users) or answered by a simulated user."""

    t: Literal["user_message"] = "user_message"
    text: str
    stop: bool = False
    idempotency_key: str | None = Field(None, description="the post's Idempotency-Key header")


# -- the protocol's steps and tools (session.py: Session, SessionTools) ---------------------------------

class Commit(_Stamped):
    """Steps committed to the history, the write keys they settle (``None`` for reads and messages; for a
    parallel write, a list with one per call) and the model calls made since the previous commit."""

    t: Literal["commit"] = "commit"
    steps: list[StepJson]
    keys: list[str | list[str | None] | None]
    calls: list[ModelCallJson]


def written(keys: Sequence[str | Sequence[str | None] | None]) -> list[str]:
    """The idempotency keys a commit's ``keys`` settle (a parallel write's step holds a list of them)."""
    return [k for key in keys for k in ([key] if isinstance(key, str) or key is None else key) if k]


class Intent(_Record):
    """An approved write about to run: durable before the write runs, with its idempotency key."""

    t: Literal["intent"] = "intent"
    key: str
    call: CallJson
    author: Author
    epoch: int = Field(0, description="the session log lease epoch of the coordinator that ran it")


class Result(_Record):
    """What a write (by its idempotency key) returned."""

    t: Literal["result"] = "result"
    key: str
    observation: ObservationJson


class ToolResultRecord(_Record):
    """What a tool call, read or write, returned."""

    t: Literal["tool_result"] = "tool_result"
    name: str
    observation: ObservationJson


class ToolCallPending(_Record):
    """A client-side tool call the client must run and answer (``POST .../tool_results``)."""

    t: Literal["tool_call_pending"] = "tool_call_pending"
    call_id: str
    name: str
    arguments: dict[str, Any]


class ToolResultPosted(_Record):
    t: Literal["tool_result_posted"] = "tool_result_posted"
    call_id: str
    observation: ObservationJson


# -- the Responses API's turns and approvals (turns.py) ---------------------------------------------------

class Turn(_Record):
    """A continuation: the start of turn ``n`` (the first turn starts at ``created``). The inputs follow."""

    t: Literal["turn"] = "turn"
    n: int
    meta: TurnMeta
    idempotency_key: str | None = None


class ModelCalls(_Stamped):
    """The model calls made since the previous commit, written when the agent's turn ends before a commit
    (a message awaiting its reply, a client tool call, an approval request)."""

    t: Literal["calls"] = "calls"
    calls: list[ModelCallJson]


class ApprovalRequest(_Record):
    """A write the verifier accepted that waits for the client's approval (``approval`` in the request)."""

    t: Literal["approval_request"] = "approval_request"
    id: str
    name: str
    arguments: dict[str, Any]


class ApprovalAnswer(_Record):
    """The client's answer to an approval request: approved, the write runs (once); denied, it never does."""

    t: Literal["approval_response"] = "approval_response"
    id: str
    approve: bool
    reason: str | None = None


class Deleted(_Record):
    """The client deleted the conversation: its routes answer 404 from now on (its records stay)."""

    t: Literal["deleted"] = "deleted"


class ProtocolEvent(_Record):
    """One of the protocol's events (Algorithm 1's journal: drafts, verdicts, repairs, fallbacks)."""

    t: EventKind  # type: ignore[valid-type]
    detail: str = ""
    action: ActionJson | None = None


Record = Annotated[
    Created | Opening | Resumed | Final | AgentMessage | UserMessageRecord | Commit | Intent | Result
    | ToolResultRecord | ToolCallPending | ToolResultPosted | Turn | ModelCalls | ApprovalRequest
    | ApprovalAnswer | Deleted | ProtocolEvent,
    Field(discriminator="t"),
]
_RECORD: TypeAdapter[Record] = TypeAdapter(Record)


def parse(data: dict[str, Any]) -> Record:
    """The record a stored dict holds (``sid``, ``i`` and ``seq`` are ignored)."""
    return _RECORD.validate_python(data)


class SessionEvent(RootModel[Record]):
    """One server-sent event of a session: a session log record (``t`` names its kind) plus ``seq``, its
    position in the session's stream (the SSE ``id``). The stream ends with ``final``."""
