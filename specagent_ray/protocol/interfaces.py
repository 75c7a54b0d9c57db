"""The small interfaces the protocol is written against. Ray, HTTP and vLLM live behind them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ContextManager, Literal, Protocol, runtime_checkable

from .types import (
    Author,
    Effect,
    Event,
    History,
    Observation,
    Proposal,
    Review,
    Step,
    Tier,
    ToolCall,
    Usage,
)


class EngineUnavailable(Exception):
    """A model engine (or the replica serving it) could not answer, after the caller's own retries.

    Infrastructure, not output: nothing was proposed, so nothing can be executed. The loop re-drafts
    from the last committed state when the drafter is lost, and falls back to a strong step when the
    verifier is; a strong policy that stays unavailable ends the session with this error.
    """


class MalformedOutput(Exception):
    """A model returned something that cannot be parsed into an action or a verdict.

    The protocol never executes such output: from a verifier it becomes a rejection, from a weak
    policy it ends the draft and the strong policy writes the step instead.
    """


class Policy(Protocol):
    """Proposes the next action from the committed history plus the steps drafted so far."""

    async def propose(
        self, history: History, draft: Sequence[Step] = (), feedback: str | None = None
    ) -> Proposal: ...


class Verifier(Protocol):
    """Reads H and a block in one pass and answers ``(j, r, ã)``; j may be malformed, the loop checks it."""

    async def verify(self, history: History, block: Sequence[Step]) -> Review: ...


@runtime_checkable
class JudgeWithCriteria(Protocol):
    """A verifier that judges by an acceptance criterion it can switch: the exact-match ablation asks it
    for the same judge with the exact criterion, so that only the criterion changes."""

    async def verify(self, history: History, block: Sequence[Step]) -> Review: ...

    def by_exact_match(self) -> Verifier: ...


@runtime_checkable
class CriticalJudge(Protocol):
    """A verifier that can take a second, differently framed look at a block whose staged step holds a
    critical call (``for_critical``: the same judge told to check that call argument by argument), so that
    the ``verdicts`` second check is not the first verdict asked again."""

    async def verify(self, history: History, block: Sequence[Step]) -> Review: ...

    def for_critical(self) -> Verifier: ...


class ToolAdapter(Protocol):
    """A tool environment. ``classify`` must answer WRITE for any tool it does not know."""

    def classify(self, call: ToolCall) -> Effect: ...

    def validate(self, call: ToolCall) -> str | None:
        """The paper's ``valid()``: None if the tool is known and the arguments match its schema,
        else the reason the call is invalid."""
        ...

    async def execute(self, call: ToolCall) -> Observation: ...


@runtime_checkable
class TieredTools(Protocol):
    """A tool adapter that knows risk tiers (tools/tiers.py). ``tier`` may raise a call above what
    ``classify`` says (a side-effecting read is staged like a write); the runtime never lets it lower one."""

    def tier(self, call: ToolCall) -> Tier: ...


@runtime_checkable
class MessageRules(Protocol):
    """A tool adapter that also says whether a message may be sent to the user (a served session whose
    messages must follow the client's output format): None if it may, else why not. A message it refuses
    is an invalid action, as a call that fails ``validate`` is: never sent, and replaced by the strong model."""

    def validate_message(self, text: str) -> str | None: ...


class User(Protocol):
    """The other side of the conversation. ``reply`` returns the user's answer to an agent message."""

    async def reply(self, text: str) -> Observation: ...


# "prefill": the serving layer's prefill of H ahead of a verify (serve/engines/prefill_ahead.py), never the protocol's
# "confirm": the strong policy's own step, written to check a critical call (protocol/review.py)
Purpose = Literal["draft", "verify", "repair", "step", "speculate", "escalate", "prefill", "confirm"]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call as the ledger sees it: who, why, tokens, and wall time (measured)."""

    role: Author
    purpose: Purpose
    usage: Usage
    wall_s: float


class Ledger(Protocol):
    def record(self, call: CallRecord) -> None: ...


class BlockSize(Protocol):
    """Chooses how many steps the next block may draft, and learns from the blocks (a speculation
    controller). 0 means the strong policy writes the next step itself; the runtime clips the answer to
    ``SpecConfig.k``. Called between blocks only, never while a block is drafted. An optional attribute
    ``chain`` (bool or None), read after ``next_k``, routes the block: False sends it to the strong verifier
    alone though a mid verifier is configured; None or absent leaves the chain as configured."""

    def next_k(self, history: History) -> int: ...

    def drafted(self, block: Sequence[Step], staged: bool) -> None: ...

    def reviewed(self, block: Sequence[Step], accepted: int, separate_repair: bool) -> None: ...


class SpanHandle(Protocol):
    def set(self, key: str, value: object) -> None: ...


class Spans(Protocol):
    """Where the loop reports its structure (session, block, model and tool calls). The core only
    names spans and attributes; telemetry/tracing.py maps them onto OpenTelemetry."""

    def span(self, name: str, attributes: Mapping[str, object] | None = None) -> ContextManager[SpanHandle]: ...


class Journal(Protocol):
    """Where a served session's progress goes as it happens: every event, and every commit.

    ``committed`` is called once per commit, after the steps joined H and before anything else runs,
    so a journal that makes commits durable loses no committed step."""

    def event(self, event: Event) -> None: ...

    def committed(self, steps: Sequence[Step]) -> None: ...


class NoJournal:
    """The default: a run that nobody follows."""

    def event(self, event: Event) -> None:
        return None

    def committed(self, steps: Sequence[Step]) -> None:
        return None


class _NullSpan:
    def __enter__(self) -> _NullSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: object) -> None:
        return None


class NoSpans:
    """The default: records nothing and costs one method call per span."""

    _null = _NullSpan()

    def span(self, name: str, attributes: Mapping[str, object] | None = None) -> _NullSpan:
        return self._null
