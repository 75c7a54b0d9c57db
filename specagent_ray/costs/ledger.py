"""The resource ledger: every model call of a run, as measured (tokens from the engine or the token
model, wall time from the injected clock)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..protocol.interfaces import CallRecord
from ..protocol.types import Author


@dataclass(frozen=True, slots=True)
class RoleTotals:
    """Sums over one role's calls. ``prefill_tokens`` excludes cached prompt tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    decode_tokens: int = 0
    wall_s: float = 0.0
    predicted_cached_tokens: int = 0

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_prompt_tokens


@dataclass
class Ledger:
    """Append-only record of model calls. Implements the protocol's ``Ledger`` interface."""

    calls: list[CallRecord] = field(default_factory=list)
    on_record: Callable[[CallRecord], None] | None = field(default=None, repr=False, compare=False)

    def record(self, call: CallRecord) -> None:
        """Append a call as it ends; ``on_record`` (the GPU meter's span sink) sees it then."""
        self.calls.append(call)
        if self.on_record is not None:
            self.on_record(call)

    def totals(self, role: Author) -> RoleTotals:
        mine = [c for c in self.calls if c.role == role]
        return RoleTotals(
            calls=len(mine),
            prompt_tokens=sum(c.usage.prompt_tokens for c in mine),
            cached_prompt_tokens=sum(c.usage.cached_prompt_tokens for c in mine),
            decode_tokens=sum(c.usage.decode_tokens for c in mine),
            wall_s=sum(c.wall_s for c in mine),
            predicted_cached_tokens=sum(c.usage.predicted_cached_tokens for c in mine),
        )


def decoding(calls: Iterable[CallRecord], role: Author = "strong") -> list[CallRecord]:
    """The role's calls that decode: a prefill ahead of a verify (purpose ``prefill``) is not a model step."""
    return [c for c in calls if c.role == role and c.purpose != "prefill"]
