"""Savings counted in total: every role (drafter, mid, strong) in every figure, on a fleet sized to the load.

One question, one answer. "GPU-s per committed step" for a fleet sized to the load is what the operator pays
for: the GPUs that fleet holds, times a second, over the committed steps it serves in that second, i.e. GPUs
per committed step/s (:attr:`FleetView.gpu_s_per_step`). Busy GPU-seconds (the share of the passes a step
uses, ``StepCost.gpu_s``) answer a different question (how busy a fixed fleet is) and are never the headline;
they are not a lower bound of it either: the planner charges a prefill's FLOPs to its call in full while
Little's law counts the prefill's latency once, so at large batches busy can exceed held.

A fleet sized to the load (:func:`fleet_view`): each role's replicas run at the planner's target batch
(``fleet._target``), ``ceil(X * t_r / B_r)`` replicas of role ``r`` for ``X`` committed steps/s at those
batches; the figures are then the closed-loop operating point (``planner.operate``) of that fleet at the
load, so that the steps/s, the latency and the cost per step all come from one solution. Every output is
ESTIMATED (roofline of the model specs on the GPU profile); a mix from a bench run carries SIMULATED tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .calls import Acceptance, Calls, CallShape, Method, Shapes, calls_per_step
from .fleet import _target
from .planner import Engine, Operating, StepCost, Traffic, operate, step_cost

ROLES = ("weak", "mid", "strong")  # the order every per-role split is printed in


@dataclass(frozen=True)
class FleetView:
    """One method on the fleet sized for ``sessions`` (ESTIMATED). ``replicas`` and ``gpus`` per role; the
    operating point of that fleet at that load."""

    sessions: float
    replicas: dict[str, int]
    gpus: dict[str, int]
    op: Operating

    @property
    def total_gpus(self) -> int:
        return sum(self.gpus.values())

    @property
    def steps_per_s(self) -> float:
        return self.op.steps_per_s

    @property
    def gpu_s_per_step(self) -> float:
        """GPUs held per committed step/s: the GPU-seconds the sized fleet costs per committed step."""
        return self.total_gpus / self.steps_per_s

    @property
    def busy_gpu_s_per_step(self) -> float:
        """The passes' share a step uses (all roles); see the module docstring for why it is not the price."""
        return self.op.cost.gpu_s

    @property
    def step_latency_s(self) -> float:
        return self.op.step_latency_s

    def hbm(self) -> dict[str, float]:
        """HBM bytes per committed step, per role and ``total``."""
        return split(self.op.cost, "hbm")


def split(cost: StepCost, field: str) -> dict[str, float]:
    """One figure of a step's cost per role (weak, mid, strong) and their ``total``."""
    out = {r: getattr(getattr(cost, r), field) for r in ROLES}
    return {**out, "total": sum(out.values())}


def mix_from_usage(usage: Mapping[str, tuple[float, float, float, float]], steps: float) -> Calls:
    """A measured call mix from each role's totals ``(calls, prompt, cached, decode)`` over ``steps``
    committed steps: calls per committed step, each at the role's mean shape. A role without calls is
    left out. Mean shapes charge every call a prefill pass where the mean prompt is not all cached: a
    slight over-estimate for roles whose calls are sometimes fully cached (repairs)."""
    if steps <= 0:
        raise ValueError("a call mix needs committed steps > 0")
    mix: Calls = {r: [] for r in ROLES}
    for role, (calls, prompt, cached, decode) in usage.items():
        if calls > 0:
            mix[role].append((calls / steps, CallShape(prompt / calls, min(cached, prompt) / calls, decode / calls)))
    return mix


def mix_shapes(mix: Calls, max_context: float | None = None) -> Shapes:
    """Shapes for pricing a mix: only ``max_context`` (the KV a session may hold at its end) and the step's
    prompt (the context the target batch is judged at) are read. Without ``max_context``: twice the longest
    mean call, since a mean call is a session's middle and its context grows about linearly."""
    shapes = [s for calls in mix.values() for _, s in calls]
    if not shapes:
        raise ValueError("an empty call mix")
    longest = max(shapes, key=lambda s: s.prompt)
    ctx = max_context if max_context is not None else 2 * max(s.prompt + s.decode for s in shapes)
    return Shapes(longest, longest, longest, longest, ctx)


def fleet_view(method: Method | Calls, engines: Mapping[str, Engine], traffic: Traffic, acc: Acceptance,
               shapes: Shapes, targets: Mapping[str, float | None] | None = None) -> FleetView:
    """``method`` on a fleet sized for ``traffic`` (see the module docstring). ``engines`` per role (strong and
    weak always; mid where the method calls it): model, GPUs and batch cap; their replicas are replaced by
    the sized ones. ``targets`` override a role's target batch."""
    calls = calls_per_step(method, acc, shapes)
    used = [r for r in ROLES if calls.get(r)]
    if "mid" in used and "mid" not in engines:
        raise ValueError("the method calls a mid verifier: pass its Engine")
    targets = targets or {}
    batch = {r: _target(engines[r], targets.get(r), shapes) for r in used}
    cost = step_cost(method, acc, shapes, engines["strong"], engines["weak"], batch.get("strong", 1.0),
                     batch.get("weak", 1.0), engines.get("mid"), batch.get("mid", 1.0))
    x = traffic.sessions / (traffic.think_time_s + cost.latency_s)
    replicas = {r: max(1, math.ceil(x * getattr(cost, r).latency_s / batch[r] - 1e-9)) for r in used}
    sized = {r: replace(engines[r], replicas=replicas.get(r, 1)) for r in engines}
    op = operate(method, traffic, acc, shapes, sized["strong"], sized["weak"], mid=sized.get("mid"))
    return FleetView(traffic.sessions, replicas, {r: replicas[r] * engines[r].gpus for r in used}, op)


@dataclass(frozen=True)
class Goal:
    """One goal checked against one figure: its statement in totals, the figure as printed, and the verdict."""

    name: str
    scope: str
    figure: str
    passed: bool

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "MISS"


HBM_GOAL = 0.30  # all-role HBM per committed step at 10 sessions, x Strong-only, each domain
FLEET_GOAL = 0.80  # GPUs per committed step/s at 1,000 sessions (fleet sized to the load), x Strong-only
LATENCY_GOAL = 1.4  # step-latency saving at 1,000 sessions on those fleets, Strong-only / the method
GOAL_LOW, GOAL_HIGH = 10.0, 1000.0  # the two loads the goals are stated at


def load_goals(scope: str, low: tuple[FleetView, FleetView], high: tuple[FleetView, FleetView],
               pass_ok: bool, pass_note: str) -> list[Goal]:
    """The issue's two goals for one method against Strong-only: ``low`` and ``high`` are (Strong-only, the
    method) at 10 and 1,000 sessions on fleets sized to each load; ``pass_ok``: Pass@1 inside Strong-only's
    interval (``pass_note`` says how it was judged)."""
    detail = (f" ({high[1].total_gpus} GPUs / {high[1].steps_per_s:.1f} steps/s against {high[0].total_gpus} / "
              f"{high[0].steps_per_s:.1f})")
    return total_goals(scope, low[1].hbm()["total"] / low[0].hbm()["total"],
                       high[1].gpu_s_per_step / high[0].gpu_s_per_step,
                       high[0].step_latency_s / high[1].step_latency_s, pass_ok, pass_note, detail)


def total_goals(scope: str, hbm_x: float, gpus_x: float, latency_saving: float, pass_ok: bool, pass_note: str,
                detail: str = "") -> list[Goal]:
    """The two goals from their figures: all-role HBM x Strong-only at 10 sessions; GPUs per committed step/s
    x Strong-only and the latency saving at 1,000 (fleets sized to the load)."""
    return [Goal(f"all-role HBM / committed step at {GOAL_LOW:g} sessions <= {HBM_GOAL:.2f}x Strong-only, "
                 "Pass@1 inside Strong-only's interval", scope, f"{hbm_x:.2f}x; {pass_note}",
                 hbm_x <= HBM_GOAL and pass_ok),
            Goal(f"GPUs per committed step/s at {GOAL_HIGH:,.0f} sessions (fleet sized to the load) <= "
                 f"{FLEET_GOAL:.2f}x Strong-only, step-latency saving >= {LATENCY_GOAL:.1f}x", scope,
                 f"{gpus_x:.2f}x{detail}; latency {latency_saving:.2f}x; {pass_note}",
                 gpus_x <= FLEET_GOAL and latency_saving >= LATENCY_GOAL and pass_ok)]
