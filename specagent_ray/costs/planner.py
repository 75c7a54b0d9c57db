"""The capacity planner's model: SpecAgent against Strong-only at a traffic level (every output ESTIMATED).

Pure functions of the inputs (no Ray, no HTTP). What it adds to Propositions 1/2 (``costs/theory.py``) and
the per-call roofline (``costs/model.py``) is the batch:

- **Per committed step** (Proposition 1's accounting, with a mix of block lengths; the calls are
  ``costs/calls.py``'s, which also prices the three-tier chain's mid verifier as a third role): SpecAgent makes
  ``f / E`` verify calls and ``f * rho * (1 - p)`` separate strong repairs, and drafts ``f * n / E + 1 - f``
  weak steps, where ``f`` is the reviewed share of committed steps, ``n`` the mean block length and
  ``E = sum_n w_n (1 - p**n) / (1 - p)`` the expected committed steps per reviewed block. Strong-only makes
  one strong step. With one block length ``f * (v/d / E + rho (1 - p))`` is ``f * theory.r_u``.
- **Batch.** An engine replica runs ``B`` sequences per forward pass (continuous batching). A pass reads the
  weights once, so each sequence's decode token is charged ``W(B) / B`` weight bytes plus its own KV cache;
  ``W(B)`` is the midpoint of (active, min(total, B * active)) weight bytes (an MoE's batch touches more
  experts; a dense model reads its weights whatever B). A prefill pass's weight read, the midpoint of
  (active, total) as in ``call_cost``, is shared the same way. Pass time is the roofline
  ``max(bytes / bw, flops / peak)`` plus the collectives of ``call_cost``; a call's latency is its passes,
  its GPU-seconds its ``1/B`` share of them. At ``B = 1`` every figure equals :func:`call_cost`'s.
- **Load** (closed loop, Little's law). ``N`` sessions each alternate think time (user and tools), strong
  time ``S`` and weak time ``T`` per committed step; at ``X`` committed steps/s an engine role with ``R``
  replicas holds ``B = X * S(B) / R`` sequences per replica. ``X`` solves ``N = X (think + S + T)``, or,
  where a replica's batch cap (``max_batch``, KV memory) binds, ``X`` is the capped rate and sessions queue.
  Below one sequence per replica the engine idles part of the time and runs batch 1.

So at low load SpecAgent saves what Proposition 1 says; as ``N`` grows both methods share weight reads over
larger batches, Strong-only's more than SpecAgent's, and the saving shrinks. The crossover is the smallest
``N`` at which a saving (Strong-only figure over SpecAgent's) falls to 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .calls import (  # Acceptance, calls_per_step and the shapes lived here before calls.py: still importable
    METHODS as METHODS,
)
from .calls import Acceptance, Calls, CallShape, Method, Shapes, calls_per_step
from .calls import Chain as Chain
from .model import _sum_max_linear, _sum_range, attention_flops_per_context
from .specs import GpuProfile, ModelSpec

METRICS = ("hbm", "gpu_s", "latency")  # strong HBM, GPU-s of both roles, step latency; all per committed step
MEMORY_UTILIZATION = 0.9  # share of GPU memory an engine may use for weights and KV (vLLM's default)


def token_model_shapes(acc: Acceptance, steps_per_session: float, system_tokens: float = 2600,
                       new_tokens: float = 460, step_tokens: float = 723, verdict_tokens: float = 618) -> Shapes:
    """Call shapes from a token model: a prompt is ``system_tokens`` plus ``new_tokens`` per committed step
    so far (mid-session on average); a strong or weak step decodes ``step_tokens``, a verdict
    ``verdict_tokens``. A verify prefills what was committed since the previous verify that it has not seen
    (``E / f - E`` steps) and the block (``n`` steps); a repair's prompt is the verify's, all cached."""
    if steps_per_session < 1 or min(system_tokens, new_tokens, step_tokens, verdict_tokens) < 0:
        raise ValueError("token counts must be >= 0 and steps_per_session >= 1")
    context = system_tokens + new_tokens * steps_per_session / 2
    verify_prompt = context + new_tokens * acc.mean_n
    unseen = new_tokens * (acc.per_block / acc.f - acc.per_block + acc.mean_n)
    draft_prompt = context + new_tokens * (acc.mean_n - 1) / 2
    return Shapes(
        step=CallShape(context, max(0.0, context - new_tokens), step_tokens),
        verify=CallShape(verify_prompt, max(0.0, verify_prompt - unseen), verdict_tokens),
        repair=CallShape(verify_prompt, verify_prompt, step_tokens),
        draft=CallShape(draft_prompt, max(0.0, draft_prompt - new_tokens), step_tokens),
        max_context=system_tokens + new_tokens * steps_per_session + step_tokens)


@dataclass(frozen=True)
class Engine:
    """One model role: ``replicas`` engines of ``gpus`` GPUs each, at most ``max_batch`` sequences each."""

    spec: ModelSpec
    gpu: GpuProfile
    gpus: int = 1
    replicas: int = 1
    max_batch: int = 256

    def __post_init__(self) -> None:
        if min(self.gpus, self.replicas, self.max_batch) < 1:
            raise ValueError(f"gpus, replicas and max_batch must be >= 1 ({self.spec.name})")

    def batch_cap(self, max_context: float) -> int:
        """Sequences one replica holds: ``max_batch``, or fewer where the KV cache of ``max_context`` tokens
        each must fit next to the weights in ``MEMORY_UTILIZATION`` of the memory. ValueError if the weights
        alone do not fit."""
        free = MEMORY_UTILIZATION * self.gpus * self.gpu.memory_bytes - self.spec.total_params * self.spec.bytes_per_param
        fits = math.floor(free / (self.spec.kv_bytes_per_token * max(1.0, max_context)))
        if fits < 1:
            raise ValueError(f"{self.spec.name} and one {max_context:.0f}-token KV cache do not fit on "
                             f"{self.gpus} x {self.gpu.name} ({MEMORY_UTILIZATION:.0%} of memory); add GPUs")
        return min(self.max_batch, fits)


@dataclass(frozen=True)
class Share:
    """ESTIMATED cost of calls to one engine: HBM bytes read, FLOPs, GPU-seconds (the calls' share of the
    replica's passes) and the latency the session waits."""

    hbm: float = 0.0
    flops: float = 0.0
    gpu_s: float = 0.0
    latency_s: float = 0.0

    def __add__(self, o: Share) -> Share:
        return Share(self.hbm + o.hbm, self.flops + o.flops, self.gpu_s + o.gpu_s, self.latency_s + o.latency_s)

    def scaled(self, k: float) -> Share:
        return Share(self.hbm * k, self.flops * k, self.gpu_s * k, self.latency_s * k)


def decode_weight_bytes(spec: ModelSpec, batch: float) -> float:
    """Weight bytes one decode pass of ``batch`` sequences reads: the midpoint of (active, min(total, batch x
    active)); ``active`` at batch 1 and for a dense model."""
    active = spec.active_params * spec.bytes_per_param
    return (active + min(spec.total_params * spec.bytes_per_param, batch * active)) / 2


def call_at_batch(engine: Engine, shape: CallShape, batch: float) -> Share:
    """ESTIMATED cost of one call when its replica runs ``batch`` sequences per pass (below 1: batch 1).
    Guarantees: at batch 1, hbm equals :func:`call_cost`'s ``hbm_point``, latency its ``gpu_latency_s`` and
    gpu_s that times the GPUs; hbm per call does not grow with the batch."""
    b = max(1.0, batch)
    spec, g = engine.spec, engine.gpus
    bw, peak = engine.gpu.hbm_bytes_per_s * g, engine.gpu.peak_flops * g
    per_pass = engine.gpu.collective_s(g) * spec.layers * (4 if spec.is_moe else 2)
    dense, attn, kv = 2 * spec.active_params, attention_flops_per_context(spec), spec.kv_bytes_per_token
    p, c, d = shape.prompt, shape.cached, shape.decode
    out = Share()
    if p - c > 0:
        flops = dense * (p - c) + attn * _sum_range(c + 1, p - c)
        weights = (spec.active_params + spec.total_params) * spec.bytes_per_param / 2
        out = Share(weights / b, flops, (max(flops / peak, weights / b / bw) + per_pass / b) * g,
                    max(flops / peak, weights / bw) + per_pass)
    if d > 0:
        w = decode_weight_bytes(spec, b)
        pass_s = _sum_max_linear(w / bw, b * kv / bw, b * dense / peak, b * attn / peak, p + 1, d) + per_pass * d
        out = out + Share(d * w / b + kv * _sum_range(p + 1, d), dense * d + attn * _sum_range(p + 1, d),
                          pass_s / b * g, pass_s)
    return out


@dataclass(frozen=True)
class StepCost:
    """ESTIMATED cost per committed step of one method: each role's share (latency = time spent in it); the
    mid verifier's is zero except in the three-tier chain."""

    strong: Share
    weak: Share
    mid: Share = Share()

    @property
    def gpu_s(self) -> float:
        return self.strong.gpu_s + self.mid.gpu_s + self.weak.gpu_s

    @property
    def latency_s(self) -> float:
        return self.strong.latency_s + self.mid.latency_s + self.weak.latency_s


def role_cost(method: Method | Calls, role: str, acc: Acceptance, shapes: Shapes, engine: Engine, batch: float) -> Share:
    """ESTIMATED cost per committed step of one role's calls, its replicas at ``batch`` sequences each."""
    total = Share()
    for k, shape in calls_per_step(method, acc, shapes).get(role, []):
        total = total + call_at_batch(engine, shape, batch).scaled(k)
    return total


def step_cost(method: Method | Calls, acc: Acceptance, shapes: Shapes, strong: Engine, weak: Engine,
              b_strong: float = 1.0, b_weak: float = 1.0, mid: Engine | None = None, b_mid: float = 1.0) -> StepCost:
    """ESTIMATED cost per committed step at the given batches (per replica). ValueError if the method calls a
    mid verifier and ``mid`` is None."""
    return StepCost(role_cost(method, "strong", acc, shapes, strong, b_strong),
                    role_cost(method, "weak", acc, shapes, weak, b_weak),
                    _mid_cost(method, acc, shapes, mid, b_mid))


def _mid_cost(method: Method | Calls, acc: Acceptance, shapes: Shapes, mid: Engine | None, batch: float) -> Share:
    """The mid verifier's share: zero for a method that never calls it; ValueError if it does and ``mid`` is None."""
    if mid is not None:
        return role_cost(method, "mid", acc, shapes, mid, batch)
    if calls_per_step(method, acc, shapes).get("mid"):
        raise ValueError("the chain calls a mid verifier: pass its Engine (mid=...)")
    return Share()


@dataclass(frozen=True)
class Traffic:
    """Concurrent sessions, committed steps per session and think time (user and tools) per step."""

    sessions: float
    steps_per_session: float
    think_time_s: float

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.steps_per_session < 1 or self.think_time_s < 0:
            raise ValueError(f"need sessions >= 1, steps_per_session >= 1, think_time_s >= 0; got {self}")


@dataclass(frozen=True)
class Operating:
    """One method at one load (ESTIMATED): committed steps/s, batch per replica of each role, the step
    latency (engine time plus queueing, think time excluded), the cost per step, and which cap binds."""

    method: Method
    sessions: float
    steps_per_s: float
    batch_strong: float
    batch_weak: float
    step_latency_s: float
    cost: StepCost
    capped: str | None
    batch_mid: float = 0.0

    def metric(self, name: str) -> float:
        return {"hbm": self.cost.strong.hbm, "gpu_s": self.cost.gpu_s, "latency": self.step_latency_s}[name]


def _bisect(fn: Callable[[float], float], lo: float, hi: float, iters: int = 30) -> float:
    """A root of a function with fn(lo) >= 0 >= fn(hi), to (hi - lo) / 2**iters."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fn(mid) >= 0 else (lo, mid)
    return (lo + hi) / 2


def operate(method: Method | Calls, traffic: Traffic, acc: Acceptance, shapes: Shapes, strong: Engine, weak: Engine,
            iters: int = 30, mid: Engine | None = None) -> Operating:
    """The closed-loop operating point of ``method`` at ``traffic`` (see the module docstring). A role's
    batch depends only on its own calls and the step rate, so each is solved on its own for a given rate;
    ``iters`` bisection steps each (the controller, which asks per block, takes fewer). The chain's mid
    verifier is a third engine role (``mid``), solved the same way."""
    calls = calls_per_step(method, acc, shapes)
    if calls.get("mid") and mid is None:
        raise ValueError("the chain calls a mid verifier: pass its Engine (mid=...)")
    engines = {r: e for r, e in (("strong", strong), ("mid", mid), ("weak", weak)) if e is not None and calls.get(r)}
    caps = {r: e.batch_cap(shapes.max_context) for r, e in engines.items()}
    time_in = {r: (lambda b, r=r: role_cost(method, r, acc, shapes, engines[r], b).latency_s) for r in engines}

    def batch(x: float, role: str) -> float:
        return _bisect(lambda b: x * time_in[role](b) / engines[role].replicas - b, 0.0, caps[role], iters)

    def batches(x: float) -> dict[str, float]:
        return {r: batch(x, r) for r in engines}

    def cycle(x: float) -> float:
        return x * (traffic.think_time_s + sum(time_in[r](b) for r, b in batches(x).items()))

    limits = {r: engines[r].replicas * caps[r] / time_in[r](caps[r]) for r in engines}
    x_cap = min(limits.values())
    if cycle(x_cap) <= traffic.sessions:
        x, capped = x_cap, min(limits, key=limits.__getitem__)
    else:
        x, capped = _bisect(lambda x: traffic.sessions - cycle(x), 0.0, x_cap, iters), None
    b = batches(x)
    c = step_cost(method, acc, shapes, strong, weak, b.get("strong", 0.0), b.get("weak", 0.0), mid, b.get("mid", 0.0))
    latency = traffic.sessions / x - traffic.think_time_s if capped else c.latency_s
    return Operating(method, traffic.sessions, x, b.get("strong", 0.0), b.get("weak", 0.0), latency, c, capped,
                     b.get("mid", 0.0))


def savings(so: Operating, sa: Operating) -> dict[str, float]:
    """Strong-only's figure over SpecAgent's, per metric (> 1: SpecAgent saves)."""
    return {m: so.metric(m) / sa.metric(m) if sa.metric(m) > 0 else math.inf for m in METRICS}
