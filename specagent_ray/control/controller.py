"""The speculation controller: how many steps to draft in the next block, from acceptance and engine load.

Pure (no Ray, no HTTP); every figure it weighs is ESTIMATED by the planner's model (``costs/planner.py``).
Per block it picks K in {0, 1, ..., k_max}, the one that minimizes the objective per committed step:

- K >= 1: SpecAgent with a draft cap of K. Drafting stops at the first write (staged, then reviewed) or
  after K reads (committed without review). With ``h_j`` the chance that the j-th drafted step is a write
  given that drafting reached it (the hazards; one constant hazard is a geometric run of reads), a block
  ending in a write is reviewed, one of K reads is not. That gives Proposition 1's accounting
  (``planner.Acceptance``): the reviewed block-length mix, its expected committed steps ``E``
  (Assumption 2 at ``p``), and the reviewed share ``f`` of committed steps. Costs are per *useful*
  committed step: a read committed without review is one the strong model would have rejected with
  probability 1 - p, and such a read is counted as no progress (the session spends a step undoing or
  redoing it). Without that, K = 1 (every read unreviewed) would always look cheapest whatever the
  drafter's quality.
- K = 0: the strong model writes the step itself, as in Strong-only (a strong step is a strong repair's
  equal, so the safety invariant is untouched).

Each option is priced where it would run: the planner's closed-loop operating point (``planner.operate``,
its batch term) of the sessions now on the engines, as if every session were like this one and used that K.
So K = 0 is priced at the larger strong batch that Strong-only reaches, not at the batch speculation leaves:
past the planner's crossover the strong model's weight reads are shared by so many sequences that
speculation's drafter GPU-seconds stop paying, and K = 0 wins on GPU-seconds; with few sessions and a high
``p`` a long block wins. Each session decides for itself, on its own estimate: sessions differ (priced
alone, the airline tasks' SpecAgent cost 0.68x to 1.63x their Strong-only cost at the crossover), so past
the crossover the sessions that draft well keep speculating and the rest let the strong model write. A
session whose estimate is still the prior's (fewer than ``explore_blocks`` drafted blocks) drafts unless
K = 0 wins by more than ``explore_margin``: a session that never drafts never learns that it drafts well. The
objectives, per committed step: ``latency`` (step latency, engines and queueing), ``gpu_seconds`` (busy GPU-seconds
of every role: drafter, mid, strong), ``hbm`` (HBM reads of every role) and ``strong_hbm`` (the strong model's HBM
reads alone, labelled so).

The three-tier chain (a mid verifier reviews each block first and escalates some to the strong one) is a third
route where a mid verifier is deployed (``mid`` and its rates ``chain``): each K >= 1 is then priced twice, as
SpecAgent and as the chain (the planner's method ``chain``, ``costs/calls.py``), and the block goes to the mid
verifier iff the chain's cheapest K is cheaper. Without a mid verifier the chain is never chosen. Every option is
the planner's own operating point (``planner.operate``) of the planner's own call counts, so the controller picks
what `specagent-ray plan`'s table, at the same inputs, says is cheapest (tests/unit/test_controller_chain.py).

A fixed table (``table``: strong-batch upper bounds -> K, like vLLM's
``num_speculative_tokens_per_batch_size``) replaces the model for operators who want one: the first row
whose bound is at least the strong engine's measured batch gives K.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..costs.calls import Chain
from ..costs.planner import (
    Acceptance,
    Engine,
    Operating,
    Traffic,
    operate,
    token_model_shapes,
)
from ..costs.totals import split

Objective = Literal["latency", "gpu_seconds", "strong_hbm", "hbm"]
OBJECTIVES: tuple[Objective, ...] = ("latency", "gpu_seconds", "strong_hbm", "hbm")
# The planner's crossover metric of each objective, where it has one (its "hbm" is the strong model's alone).
METRIC = {"latency": "latency", "gpu_seconds": "gpu_s", "strong_hbm": "hbm"}
MIN_HAZARD = 1e-3  # a session that has drafted no write yet still may: never assume none will come
ITERS = 16  # bisection steps of the operating points: batches and rates to 1/65,536 of their range


@dataclass(frozen=True)
class CappedAcceptance(Acceptance):
    """Proposition 1's accounting per *useful* committed step: ``extra_drafts`` are the drafted reads per
    useful step that were committed without review although the strong model would have rejected them. They
    are drafted whoever reviews the blocks, so SpecAgent's and the chain's drafts both count them
    (``wasted_drafts``, ``calls.calls_per_step``)."""

    extra_drafts: float = 0.0

    @property
    def wasted_drafts(self) -> float:
        return self.extra_drafts


def capped_acceptance(k: int, p: float, hazards: Sequence[float], rho: float,
                      chain: Chain | None = None) -> CappedAcceptance:
    """Proposition 1's accounting of blocks drafted with cap ``k`` (see the module docstring), per useful
    committed step; ``hazards[j - 1]`` is the j-th step's (the last one holds beyond). With ``chain`` a
    reviewed block commits the chain's steps (``Acceptance.chain_per_block``), and the result carries the
    rates. ValueError for k < 1, no hazards, or a rate outside [0, 1]."""
    if k < 1:
        raise ValueError(f"a draft cap must be >= 1, got {k}")
    if not hazards or any(not 0.0 <= h <= 1.0 for h in hazards):
        raise ValueError(f"hazards must be rates in [0, 1], got {hazards}")
    reach, ends = 1.0, []
    for j in range(1, k + 1):
        h = max(MIN_HAZARD, hazards[min(j, len(hazards)) - 1])
        ends.append((j, reach * h))  # a write at step j ends the block: reviewed
        reach *= 1 - h
    reviewed = 1 - reach  # the rest are k reads, committed without review
    blocks = tuple((j, w / reviewed) for j, w in ends)
    mix = Acceptance(p, blocks, rho, 1.0, chain)
    per_reviewed = mix.per_block if chain is None else mix.chain_per_block()[0]
    useful = reviewed * per_reviewed + reach * k * max(p, 1e-9)
    return CappedAcceptance(p, blocks, rho, max(reviewed * per_reviewed / useful, 1e-9), chain,
                            extra_drafts=reach * k * (1 - p) / useful)


def objective_of(op: Operating, objective: Objective) -> float:
    """``objective`` per committed step at an operating point: every role counts, except in ``strong_hbm``."""
    return {"latency": op.step_latency_s, "gpu_seconds": op.cost.gpu_s, "hbm": split(op.cost, "hbm")["total"],
            "strong_hbm": op.cost.strong.hbm}[objective]


@dataclass(frozen=True)
class Choice:
    """One block's route: ``k`` = 0, the strong model writes the step (Strong-only); else SpecAgent with draft
    cap ``k``, its block reviewed by the mid verifier first iff ``chain`` (the three-tier chain)."""

    k: int
    chain: bool = False

    @property
    def method(self) -> str:
        """The planner's method name of this route."""
        return "strong" if self.k == 0 else "chain" if self.chain else "specagent"


def write_share_for(f: float, p: float, k: int, rho: float = 0.2) -> float:
    """The constant hazard at which blocks capped at ``k`` have reviewed share ``f`` (the planner's inputs
    have f, not the hazards); by bisection, as f rises with the hazard."""
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if capped_acceptance(k, p, (mid,), rho).f < f else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class TokenModel:
    """Call tokens by committed steps (the planner's token model, ``planner.token_model_shapes``; the
    defaults are `specagent-ray plan`'s, rounded from a simulated bench run): a prompt is ``system`` plus
    ``new`` per step; a step decodes ``step``, a verdict ``verdict``."""

    system: float = 2600
    new: float = 460
    step: float = 723
    verdict: float = 1420


@dataclass(frozen=True)
class Estimate:
    """What the controller knows of a session: per-step acceptance ``p`` (pooled over kinds), the hazards
    of a write by position in the block, the separate repairs per rejection, and the drafted ``blocks``
    behind them (0: the prior's alone)."""

    p: float
    hazards: tuple[float, ...]
    rho: float
    blocks: int = 0


@dataclass(frozen=True)
class Load:
    """The engines' load now: concurrent sessions on them (all coordinators), and each role's requests in
    flight per replica (what vLLM calls ``num_requests_running``)."""

    sessions: float
    batch_strong: float = 1.0
    batch_weak: float = 1.0


@dataclass(frozen=True)
class Controller:
    """Picks each block's route (:class:`Choice`). Guarantees: K lies in 0..k_max; with a ``table`` it is the
    table's K for the strong engine's batch (clipped to k_max), never the chain; otherwise, at the session's own
    estimate, K = 0 iff the strong model's own step is cheaper on ``objective`` than every option with K >= 1
    by ``switch_margin`` (by ``explore_margin`` while the estimate rests on fewer than ``explore_blocks``
    drafted blocks); else the chain iff a mid verifier is deployed and the chain's cheapest K is cheaper than
    SpecAgent's, and on that route the largest K within ``review_slack`` of its cheapest.

    Why each session decides, not the fleet: sessions differ in what speculation saves them, so near the
    planner's crossover a fleet split by each session's own estimate beats both all-or-nothing choices
    (`bench adaptive`: 3 % to 7 % fewer GPU-seconds per step than the better of Strong-only and fixed K
    from 500 to 1,000 sessions, SIMULATED policies, ESTIMATED cost). Why the exploring blocks: a session
    that lets the strong model write from its first block never drafts, so its estimate never leaves the
    prior; and why their margin: where the prior says drafting loses by more, they cost more than they find.

    Why the slack: in Algorithm 1 a block of reads alone commits without review, so K decides which reads
    the verifier sees, together with the write that follows, before they commit; it barely changes how many
    verifies there are (one per write). A smaller K is a little cheaper and reviews fewer reads, so the
    controller pays up to ``review_slack`` for the reviews. ``strong``, ``weak`` and ``mid`` carry the
    replicas the sessions share; ``chain`` is the mid verifier's rates (escalation; ``p_mid`` None: the
    session's p); ``steps_per_session`` and ``think_time_s`` are the planner's traffic."""

    strong: Engine
    weak: Engine
    objective: Objective = "gpu_seconds"
    k_max: int = 6
    table: tuple[tuple[float, int], ...] = ()
    review_slack: float = 0.03
    switch_margin: float = 0.01
    explore_blocks: int = 2
    explore_margin: float = 0.25
    tokens: TokenModel = TokenModel()
    steps_per_session: float = 14.0
    think_time_s: float = 1.0
    mid: Engine | None = None
    chain: Chain | None = None

    def __post_init__(self) -> None:
        if self.k_max < 0:
            raise ValueError(f"k_max must be >= 0, got {self.k_max}")
        if not 0 <= self.review_slack < 1:
            raise ValueError(f"review_slack must lie in [0, 1), got {self.review_slack}")
        if self.explore_blocks < 0 or not 0 <= self.explore_margin < 1:
            raise ValueError(f"explore_blocks must be >= 0 and explore_margin in [0, 1), got "
                             f"{self.explore_blocks}, {self.explore_margin}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; one of {', '.join(OBJECTIVES)}")
        bounds = [b for b, _ in self.table]
        if bounds != sorted(bounds) or any(k < 0 for _, k in self.table):
            raise ValueError(f"a K table needs rising batch bounds and K >= 0, got {self.table}")
        if (self.mid is None) != (self.chain is None):
            raise ValueError("the chain needs both its mid verifier (mid) and its rates (chain)")

    def options(self) -> list[Choice]:
        """Every route this controller weighs: K = 0, SpecAgent at each K, the chain at each K with a mid."""
        ks = range(1, self.k_max + 1)
        return [Choice(0), *(Choice(k) for k in ks), *(Choice(k, True) for k in ks if self.mid is not None)]

    def operating(self, choice: Choice, est: Estimate, sessions: float) -> Operating:
        """The planner's closed-loop operating point (ESTIMATED) of ``choice``, every session using it."""
        traffic, t = Traffic(max(1.0, sessions), self.steps_per_session, self.think_time_s), self.tokens
        acc = capped_acceptance(max(1, choice.k), est.p, est.hazards, est.rho, self.chain if choice.chain else None)
        shapes = token_model_shapes(acc, self.steps_per_session, t.system, t.new, t.step, t.verdict)
        return operate(choice.method, traffic, acc, shapes, self.strong, self.weak, ITERS,  # type: ignore[arg-type]
                       mid=self.mid if choice.chain else None)

    def costs(self, est: Estimate, sessions: float) -> dict[Choice, float]:
        """The objective per committed step (ESTIMATED) of every option, every session using it."""
        return {c: objective_of(self.operating(c, est, sessions), self.objective) for c in self.options()}

    def decide(self, est: Estimate, load: Load) -> Choice:
        """The next block's route, at the session's ``est`` and the engines' ``load`` (see the class)."""
        if self.table:
            k = next((k for bound, k in self.table if load.batch_strong <= bound), self.table[-1][1])
            return Choice(min(k, self.k_max))
        if self.k_max == 0:
            return Choice(0)
        return pick(self.costs(est, load.sessions), self.review_slack,
                    self.explore_margin if est.blocks < self.explore_blocks else self.switch_margin)

    def choose(self, est: Estimate, load: Load) -> int:
        """K for the next block (``decide``'s)."""
        return self.decide(est, load).k

    def decide_quantized(self, est: Estimate, load: Load) -> Choice:
        """``decide`` at rates rounded to 0.02 (hazards 0.05), sessions to two significant digits and
        batches to whole sequences, cached: a coordinator asks once per block, and the exact answer takes
        tens of milliseconds of CPU (the planner's operating points)."""
        return _decide_cached(self, self._rounded(est), Load(float(f"{load.sessions:.2g}"), float(round(
            load.batch_strong)), float(round(load.batch_weak))))

    def choose_quantized(self, est: Estimate, load: Load) -> int:
        """K of ``decide_quantized``."""
        return self.decide_quantized(est, load).k

    def _rounded(self, est: Estimate) -> Estimate:
        r = lambda x, step: round(x / step) * step
        return Estimate(r(est.p, 0.02), tuple(r(h, 0.05) for h in est.hazards[: self.k_max or 1]), r(est.rho, 0.05),
                        min(est.blocks, self.explore_blocks))


def pick(costs: dict[Choice, float], review_slack: float, margin: float) -> Choice:
    """The rule of :class:`Controller` on priced options (``costs`` holds K = 0 and at least one K >= 1):
    K = 0 iff cheaper than every speculating option by ``margin``; else the route (SpecAgent or the chain)
    whose cheapest option is cheaper, and on it the largest K within ``review_slack`` of that cheapest."""
    speculating = {c: v for c, v in costs.items() if c.k >= 1}
    cheapest = min(speculating.values())
    if costs[Choice(0)] < cheapest * (1 - margin):
        return Choice(0)
    route = min(speculating, key=lambda c: (speculating[c], c.chain)).chain  # a tie keeps SpecAgent
    on_route = {c: v for c, v in speculating.items() if c.chain is route}
    return max((c for c, v in on_route.items() if v <= cheapest * (1 + review_slack)), key=lambda c: c.k)


@functools.lru_cache(maxsize=65536)
def _decide_cached(controller: Controller, est: Estimate, load: Load) -> Choice:
    return controller.decide(est, load)
