"""Online estimates of a session's speculation, and the ``BlockSize`` that asks the controller with them.

Pure (no Ray). Per session: acceptance by step kind (read, write), the hazard of a write by position in
the block, and separate repairs per rejection, each starting from a prior (the profile's, or one taken
from a bench run) counted as ``weight`` observations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..protocol.types import Effect, History, Step
from .controller import Controller, Estimate, Load


@dataclass(frozen=True)
class Prior:
    """Where a session's estimates start: per-step acceptance of drafted reads and writes, the chance that
    a drafted step is a write (every position alike), separate repairs per rejection, and how many
    observations the prior counts as."""

    p_read: float = 0.82
    p_write: float = 0.82
    write_share: float = 0.3
    rho: float = 0.2
    weight: float = 4.0
    hazards: tuple[float, ...] = ()  # by position, where known (a bench run's); else write_share everywhere

    def __post_init__(self) -> None:
        for name in ("p_read", "p_write", "write_share", "rho"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if any(not 0.0 <= h <= 1.0 for h in self.hazards):
            raise ValueError(f"hazards must lie in [0, 1], got {self.hazards}")
        if self.weight <= 0:
            raise ValueError(f"the prior's weight must be > 0, got {self.weight}")

    def hazard(self, j: int) -> float:
        """The prior's hazard of a write at position ``j`` (0-based)."""
        return self.hazards[min(j, len(self.hazards) - 1)] if self.hazards else self.write_share


class OnlineEstimate:
    """One session's counts plus the prior's pseudo-counts.

    Guarantees: every rate lies in [0, 1]; with no observations each equals the prior's; each moves toward
    the session's observed rate as observations accumulate (Assumption 2's MLE plus ``weight`` prior trials).
    A reviewed block of n steps ending in a staged write, with accepted prefix j, gives j acceptances (reads,
    and the write if j = n) and, if j < n, one rejection of step j's kind; later steps are never judged.
    A drafted block of n steps reached positions 1..n, and its last one was a write iff it was staged."""

    def __init__(self, prior: Prior = Prior(), positions: int = 8):
        self.prior, self.positions = prior, positions
        self.accepted = {"read": 0, "write": 0}
        self.rejected = {"read": 0, "write": 0}
        self.reached, self.wrote = [0] * positions, [0] * positions
        self.separate = 0

    def drafted(self, kinds: Sequence[str], staged: bool) -> None:
        n = min(len(kinds), self.positions)
        for j in range(n):
            self.reached[j] += 1
        if staged and n:
            self.wrote[n - 1] += 1

    def reviewed(self, kinds: Sequence[str], accepted: int, separate_repair: bool) -> None:
        for kind in kinds[:accepted]:
            self.accepted[kind] += 1
        if accepted < len(kinds):
            self.rejected[kinds[accepted]] += 1
            self.separate += int(separate_repair)

    def _rate(self, hits: float, trials: float, prior: float) -> float:
        return (hits + self.prior.weight * prior) / (trials + self.prior.weight)

    def p(self, kind: str) -> float:
        prior = self.prior.p_read if kind == "read" else self.prior.p_write
        return self._rate(self.accepted[kind], self.accepted[kind] + self.rejected[kind], prior)

    def hazards(self) -> tuple[float, ...]:
        return tuple(self._rate(w, r, self.prior.hazard(j))
                     for j, (w, r) in enumerate(zip(self.wrote, self.reached, strict=True)))

    def as_prior(self, weight: float = 4.0) -> Prior:
        """What this estimate has learned, as a prior for other sessions (a bench run's)."""
        return Prior(self.p("read"), self.p("write"), self.prior.write_share, self.estimate().rho, weight,
                     self.hazards())

    def estimate(self) -> Estimate:
        """Pooled over kinds, as Assumption 2 takes one p (the prior's weight is counted once per kind)."""
        a, r = sum(self.accepted.values()), sum(self.rejected.values())
        w = self.prior.weight
        p = (a + w * self.prior.p_read + w * self.prior.p_write) / (a + r + 2 * w)
        return Estimate(p, self.hazards(), self._rate(self.separate, r, self.prior.rho), self.reached[0])


class Learner:
    """Feeds every drafted block and verdict to its estimates."""

    def __init__(self, *estimates: OnlineEstimate | None):
        self.estimates = [e for e in estimates if e is not None]

    def drafted(self, block: Sequence[Step], staged: bool) -> None:
        for est in self.estimates:
            est.drafted(_kinds(block), staged)

    def reviewed(self, block: Sequence[Step], accepted: int, separate_repair: bool) -> None:
        for est in self.estimates:
            est.reviewed(_kinds(block), accepted, separate_repair)


class Observer(Learner):
    """A ``BlockSize`` that always answers ``k`` and learns, for a bench run that calibrates a prior."""

    def __init__(self, k: int, estimate: OnlineEstimate):
        super().__init__(estimate)
        self.k = k

    def next_k(self, history: History) -> int:
        return self.k


class AdaptiveK(Learner):
    """A session's ``BlockSize`` (protocol/interfaces.py): the controller's route at the session's online
    estimate and the engines' load now. ``on_choice`` hears every K chosen (for the stats); ``chain`` says
    whether the block now drafted goes to the mid verifier first, and ``on_route`` hears it before the block
    is drafted. Where the controller has no mid verifier, ``chain`` is None (no opinion: the configured
    chain, if any, reviews as before) and ``on_route`` hears nothing."""

    def __init__(self, controller: Controller, load: Callable[[], Load], prior: Prior = Prior(),
                 on_choice: Callable[[int], None] = lambda k: None,
                 on_route: Callable[[bool], None] = lambda chain: None):
        self.controller, self.load, self.on_choice, self.on_route = controller, load, on_choice, on_route
        self.estimate = OnlineEstimate(prior, max(1, controller.k_max))
        self.chain: bool | None = None
        super().__init__(self.estimate)

    def next_k(self, history: History) -> int:
        choice = self.controller.decide_quantized(self.estimate.estimate(), self.load())
        self.chain = choice.chain if self.controller.mid is not None else None
        if self.chain is not None:
            self.on_route(self.chain)
        self.on_choice(choice.k)
        return choice.k


def _kinds(block: Sequence[Step]) -> list[str]:
    return ["write" if s.effect is Effect.WRITE else "read" for s in block]
