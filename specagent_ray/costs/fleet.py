"""The capacity plan: both methods at a traffic level, the saving against concurrent sessions with its
crossover, and the replicas and coordinator shards the load needs (every output ESTIMATED).

Pure (no Ray, no HTTP); the model is :mod:`specagent_ray.costs.planner`. Conventions:

- The strong fleet is fixed across the sweep: ``strong.replicas``, or with ``auto_strong`` the replicas
  Strong-only needs at the planned traffic (the fleet that serves today's load), so that both methods are
  compared on the same strong GPUs. With ``auto_weak`` the drafters scale with the load (see
  :func:`weak_for`; their busy GPU-seconds count in ``gpu_s``); without it ``weak.replicas`` is fixed too.
- Sizing runs each replica at a target batch: by default where each sequence's own cost of a decode pass
  (KV reads or FLOPs) equals the pass's shared cost (weights, collectives), see :func:`amortizing_batch`;
  capped by ``max_batch`` and KV memory. Replicas = ceil(sequences the sessions keep in an engine / target
  batch), i.e. ceil(decode tokens/s needed / one replica's tokens/s at the target batch). Coordinator shards = ceil(committed steps/s / one shard's capacity), a MEASURED input.
- With a three-tier chain (``acceptance.chain`` and a ``mid`` engine) the plan compares Strong-only with the
  chain (method ``chain``) instead of SpecAgent; the mid verifier is a third fleet (fixed across the sweep,
  ``mid.replicas``; sized at its target batch like the others).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from .model import attention_flops_per_context
from .planner import (
    METRICS,
    Acceptance,
    Calls,
    Engine,
    Method,
    Operating,
    Shapes,
    StepCost,
    Traffic,
    call_at_batch,
    calls_per_step,
    decode_weight_bytes,
    operate,
    role_cost,
    savings,
    step_cost,
)

#: Committed steps/s one coordinator shard carries: MEASURED on the sim profile on a 2-core VM (`specagent-ray
#: bench scale --client-processes 2`: 1 shard, 108 steps/s with the machine saturated; docs/serving.md).
SHARD_STEPS_PER_S = 100.0


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan needs. ``target_batch_*`` override :func:`amortizing_batch` for sizing; ValueError
    for a shard capacity <= 0 or a target batch < 1."""

    strong: Engine
    weak: Engine
    traffic: Traffic
    acceptance: Acceptance
    shapes: Shapes
    shard_steps_per_s: float = SHARD_STEPS_PER_S
    auto_weak: bool = True
    auto_strong: bool = True
    target_batch_strong: float | None = None
    target_batch_weak: float | None = None
    mid: Engine | None = None
    auto_mid: bool = True

    def __post_init__(self) -> None:
        if (self.mid is None) != (self.acceptance.chain is None):
            raise ValueError("a chain needs both its rates (acceptance.chain) and its mid engine (mid)")
        if not self.shard_steps_per_s > 0:
            raise ValueError(f"shard capacity must be > 0 steps/s, got {self.shard_steps_per_s}")
        for name in ("target_batch_strong", "target_batch_weak"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    @property
    def method(self) -> Method:
        """What the plan compares with Strong-only: the chain if there is one, else SpecAgent."""
        return "specagent" if self.acceptance.chain is None else "chain"

    @property
    def methods(self) -> tuple[Method, Method]:
        return ("strong", self.method)


def weak_for(inputs: PlanInputs, sessions: float, method: Method | Calls | None = None) -> Engine:
    """The drafter fleet at ``sessions``. With ``auto_weak``: ``ceil(X * T / target)`` replicas, with ``T``
    the method's weak time per step at the target batch (SpecAgent's, or a measured call mix's) and ``X`` the
    most committed steps/s the sessions can ask for (strong at batch 1, weak at its target) or the strong
    fleet can verify (at its batch cap), the lower."""
    if not inputs.auto_weak:
        return inputs.weak
    method = inputs.method if method is None else method
    acc, shapes, strong, weak = inputs.acceptance, inputs.shapes, inputs.strong, inputs.weak
    target = _target(weak, inputs.target_batch_weak, shapes)
    weak_s = role_cost(method, "weak", acc, shapes, weak, target).latency_s
    low = step_cost(method, acc, shapes, strong, weak, mid=inputs.mid)
    cap = strong.batch_cap(shapes.max_context)
    x = min(sessions / (inputs.traffic.think_time_s + low.strong.latency_s + low.mid.latency_s + weak_s),
            strong.replicas * cap / role_cost(method, "strong", acc, shapes, strong, cap).latency_s)
    return replace(weak, replicas=max(1, math.ceil(x * weak_s / target - 1e-9)))


def at(inputs: PlanInputs, sessions: float) -> dict[Method, Operating]:
    """Both methods' operating points at ``sessions`` concurrent sessions (Strong-only and ``inputs.method``)."""
    traffic = replace(inputs.traffic, sessions=sessions)
    weak = weak_for(inputs, sessions)
    return {m: operate(m, traffic, inputs.acceptance, inputs.shapes, inputs.strong, weak, mid=inputs.mid)
            for m in inputs.methods}


@dataclass(frozen=True)
class SweepPoint:
    sessions: float
    saving: dict[str, float]
    batch_strong: dict[str, float]


def sweep(inputs: PlanInputs, max_sessions: float, points: int = 32) -> list[SweepPoint]:
    """Savings at ``points`` session counts spaced evenly in log from 1 to ``max_sessions``."""
    if max_sessions < 1 or points < 2:
        raise ValueError("a sweep needs max_sessions >= 1 and at least 2 points")
    grid = sorted({round(max_sessions ** (i / (points - 1)), 6) for i in range(points)})
    out = []
    for n in grid:
        ops = at(inputs, n)
        out.append(SweepPoint(n, savings(ops["strong"], ops[inputs.method]),
                              {m: ops[m].batch_strong for m in inputs.methods}))
    return out


def _first_at_or_below(inputs: PlanInputs, metric: str, lo: float, hi: float, below_at_hi: bool) -> float:
    """The whole session count in (lo, hi] where the saving crosses 1, by bisection."""
    lo, hi = math.floor(lo), math.ceil(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ops = at(inputs, mid)
        below = savings(ops["strong"], ops[inputs.method])[metric] <= 1.0
        lo, hi = (lo, mid) if below == below_at_hi else (mid, hi)
    return float(hi)


def crossovers(inputs: PlanInputs, points: list[SweepPoint]) -> dict[str, tuple[float | None, float | None]]:
    """Per metric (first, back): ``first`` is the smallest session count in the sweep's range where the saving
    is <= 1 (refined to whole sessions between grid points; None where it stays above 1), ``back`` where it
    rises above 1 again after that (None if it does not within the range)."""
    out: dict[str, tuple[float | None, float | None]] = {}
    for metric in METRICS:
        below = [p.saving[metric] <= 1.0 for p in points]
        first = next((i for i, b in enumerate(below) if b), None)
        if first is None:
            out[metric] = (None, None)
            continue
        start = points[0].sessions if first == 0 else _first_at_or_below(
            inputs, metric, points[first - 1].sessions, points[first].sessions, True)
        back = next((i for i in range(first, len(points)) if not below[i]), None)
        end = None if back is None else _first_at_or_below(
            inputs, metric, points[back - 1].sessions, points[back].sessions, False)
        out[metric] = (start, end)
    return out


def _smallest_batch(test: Callable[[float], bool]) -> float | None:
    """The smallest batch >= 1 (to 0.5) where ``test`` turns true, for a test that stays true once true;
    None if not below 2**20."""
    hi = 1.0
    while not test(hi):
        hi *= 2
        if hi > 2 ** 20:
            return None
    lo = hi / 2
    while hi > 1.0 and hi - lo > 0.5:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if test(mid) else (mid, hi)
    return hi


def decode_knee(engine: Engine, context: float) -> float | None:
    """ESTIMATED batch at which a decode pass at ``context`` tokens turns compute-bound (Assumption 1's
    limit): ``B (2 active + attention) / peak >= (W(B) + B kv context) / bw``; None if never below 2**20."""
    spec, gpu = engine.spec, engine.gpu
    per_seq = 2 * spec.active_params + attention_flops_per_context(spec) * context
    return _smallest_batch(lambda b: b * per_seq / gpu.peak_flops >= (
        decode_weight_bytes(spec, b) + b * spec.kv_bytes_per_token * context) / gpu.hbm_bytes_per_s)


def amortizing_batch(engine: Engine, context: float) -> float:
    """ESTIMATED batch at which each sequence's own cost of a decode pass (its KV reads or its FLOPs, the
    larger) equals the pass's shared cost (all weights read, collectives). Below it a sequence adds less
    than the shared cost, so GPU time per token still falls steeply with the batch; past it the pass time
    grows about linearly with the batch (latency for little gain). An MoE's shared cost counts all its
    weights, which a large batch touches. At least 1."""
    spec, gpu, g = engine.spec, engine.gpu, engine.gpus
    bw, peak = gpu.hbm_bytes_per_s * g, gpu.peak_flops * g
    shared = spec.total_params * spec.bytes_per_param / bw + gpu.collective_s(g) * spec.layers * (4 if spec.is_moe else 2)
    own = max(spec.kv_bytes_per_token * context / bw,
              (2 * spec.active_params + attention_flops_per_context(spec) * context) / peak)
    return max(1.0, shared / own)


@dataclass(frozen=True)
class Sizing:
    """ESTIMATED fleet for one method at the planned traffic, each replica at its target batch."""

    method: Method
    target_batch_strong: float
    target_batch_weak: float
    steps_per_s: float
    step_latency_s: float
    strong_replicas: int
    weak_replicas: int
    shards: int
    strong_decode_tokens_per_s: float  # needed
    strong_replica_tokens_per_s: float  # one replica at its target batch
    mid_replicas: int = 0  # the chain's mid verifiers, at the same target batch rule


def _target(engine: Engine, given: float | None, shapes: Shapes) -> float:
    cap = engine.batch_cap(shapes.max_context)
    if given is not None:
        return min(given, cap)
    return min(amortizing_batch(engine, shapes.step.prompt), float(cap))


def size(inputs: PlanInputs, method: Method) -> Sizing:
    """Replicas and shards for ``method`` at ``inputs.traffic`` (see the module docstring)."""
    shapes, acc, traffic = inputs.shapes, inputs.acceptance, inputs.traffic
    bs = _target(inputs.strong, inputs.target_batch_strong, shapes)
    bw = _target(inputs.weak, inputs.target_batch_weak, shapes)
    bm = 1.0 if inputs.mid is None else _target(inputs.mid, None, shapes)
    cost: StepCost = step_cost(method, acc, shapes, inputs.strong, inputs.weak, bs, bw, inputs.mid, bm)
    x = traffic.sessions / (traffic.think_time_s + cost.latency_s)
    strong_n = math.ceil(x * cost.strong.latency_s / bs - 1e-9)
    weak_n = math.ceil(x * cost.weak.latency_s / bw - 1e-9)
    decode = sum(k * s.decode for k, s in calls_per_step(method, acc, shapes)["strong"])
    one = call_at_batch(inputs.strong, replace(shapes.step, cached=shapes.step.prompt), bs)
    return Sizing(method, bs, bw, x, cost.latency_s, strong_n, weak_n,
                  max(1, math.ceil(x / inputs.shard_steps_per_s - 1e-9)), x * decode,
                  bs * shapes.step.decode / one.latency_s, math.ceil(x * cost.mid.latency_s / bm - 1e-9))


@dataclass(frozen=True)
class Plan:
    inputs: PlanInputs
    at_load: dict[Method, Operating]
    saving: dict[str, float]
    sweep: list[SweepPoint]
    crossover: dict[str, tuple[float | None, float | None]]
    sizing: dict[Method, Sizing]
    v_over_d: float  # verify over strong step, strong HBM at batch 1
    kappa: float  # weak draft step over strong step, latency at batch 1
    r_predicted: float  # Proposition 1 on the reviewed share: f * R_u (the chain: f * R_chain)
    l_predicted: float  # Proposition 2 on the reviewed share: f * L_u + (1 - f) kappa (the chain: L_chain)


def make_plan(inputs: PlanInputs, max_sessions: float | None = None, points: int = 32) -> Plan:
    """The whole plan. ``max_sessions`` bounds the sweep (default: 20 x the planned sessions, at least 1000)."""
    if inputs.auto_strong:
        fleet = max(1, size(inputs, "strong").strong_replicas)
        inputs = replace(inputs, strong=replace(inputs.strong, replicas=fleet), auto_strong=False)
    if inputs.mid is not None and inputs.auto_mid:
        mids = max(1, size(inputs, "chain").mid_replicas)
        inputs = replace(inputs, mid=replace(inputs.mid, replicas=mids), auto_mid=False)
    ops = at(inputs, inputs.traffic.sessions)
    top = max_sessions or max(1000.0, 20 * inputs.traffic.sessions)
    points_ = sweep(inputs, top, points)
    s, acc = inputs.strong, inputs.acceptance
    v_over_d = call_at_batch(s, inputs.shapes.verify, 1).hbm / call_at_batch(s, inputs.shapes.step, 1).hbm
    step_s = call_at_batch(s, inputs.shapes.step, 1).latency_s
    kappa = call_at_batch(inputs.weak, inputs.shapes.draft, 1).latency_s / step_s
    if inputs.mid is None:
        r, l_ = acc.r_u(v_over_d), acc.l_u(v_over_d, kappa)
    else:
        r = acc.r_chain(v_over_d)
        l_ = acc.l_chain(v_over_d, kappa, call_at_batch(inputs.mid, inputs.shapes.verify, 1).latency_s / step_s)
    return Plan(inputs, ops, savings(ops["strong"], ops[inputs.method]), points_, crossovers(inputs, points_),
                {m: size(inputs, m) for m in inputs.methods}, v_over_d, kappa, acc.f * r,
                acc.f * l_ + (1 - acc.f) * kappa)


def per_call_hbm(inputs: PlanInputs, method: Method) -> float:
    """ESTIMATED strong HBM bytes per committed step with every call priced alone (batch 1), the way a
    session's resource report prices its ledger (what the sim's load tests can be checked against)."""
    return step_cost(method, inputs.acceptance, inputs.shapes, inputs.strong, inputs.weak, mid=inputs.mid).strong.hbm
