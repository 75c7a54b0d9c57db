"""``plan``'s headline: the fleet an operator sizes a cluster with, and what a committed step costs on it.

Two questions, two tables, one model (``costs/totals.py``):
- **Fleet sized to the load** (the headline): "How many GPUs does each method need for this load, and what
  does a committed step cost on them?" Each method gets its own fleet (every role at its target batch), and
  GPU-s per committed step is the GPUs it holds over the committed steps/s it serves at its closed-loop
  operating point: GPUs per committed step/s.
- **On today's verifier fleet** (``plan``'s "At N sessions" table): "On the verifier fleet that serves
  Strong-only today, what does each method's step keep busy?" Both methods share Strong-only's verifier
  replicas; its GPU-s are busy GPU-s (the passes' share a step uses), not the fleet's price. They are not a
  lower bound of the headline's either: the planner charges a prefill's FLOPs to its call in full, while
  Little's law counts its latency once, so busy GPU-s can exceed the GPUs held per step/s at large batches.
The fleet table's rows come from the same operating point as the load table's, so one derives from the other
(tests/unit/test_totals.py). Every figure is ESTIMATED.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from ..costs.fleet import Plan
from ..costs.planner import Method
from ..costs.totals import ROLES, FleetView, fleet_view
from .chain import NAMES

NAME = {"strong": "Strong-only", **NAMES}
QUESTION = ("How many GPUs does each method need for this load, and what does a committed step cost on them? "
            "(each method on its own fleet, every role at its target batch)")


def fleet_views(plan: Plan) -> dict[Method, FleetView]:
    """Each compared method on its own fleet sized to the planned load (ESTIMATED)."""
    i = plan.inputs
    engines = {"strong": i.strong, "weak": i.weak, **({"mid": i.mid} if i.mid is not None else {})}
    targets = {"strong": i.target_batch_strong, "weak": i.target_batch_weak}
    return {m: fleet_view(m, engines, i.traffic, i.acceptance, i.shapes, targets) for m in i.methods}


def fleet_table(plan: Plan, views: dict[Method, FleetView] | None = None) -> Table:
    """The headline: GPUs per role, steps/s, GPU-s per committed step (GPUs held), HBM per role and in
    total, step latency; with the saving (Strong-only / the method)."""
    views = views or fleet_views(plan)
    so, me = views["strong"], views[plan.inputs.method]
    name = NAME[plan.inputs.method]
    t = Table(title=f"Headline: fleet sized to {plan.inputs.traffic.sessions:g} sessions (ESTIMATED). {QUESTION}")
    for col in ("figure", "Strong-only", name, "saving"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    t.add_row("GPUs: weak / mid / strong", *(" / ".join(str(v.gpus.get(r, 0)) for r in ROLES) for v in (so, me)), "")
    t.add_row("GPUs in all", str(so.total_gpus), str(me.total_gpus), _x(so.total_gpus, me.total_gpus))
    t.add_row("committed steps / s", f"{so.steps_per_s:.1f}", f"{me.steps_per_s:.1f}", "")
    t.add_row("GPU-s per committed step (GPUs per committed step/s; all roles)", f"{so.gpu_s_per_step:.3f}",
              f"{me.gpu_s_per_step:.3f}", _x(so.gpu_s_per_step, me.gpu_s_per_step))
    hs, hm = so.hbm(), me.hbm()
    t.add_row("HBM per committed step, TB, all roles", f"{hs['total'] / 1e12:.2f}", f"{hm['total'] / 1e12:.2f}",
              _x(hs["total"], hm["total"]))
    t.add_row("  weak / mid / strong, TB", *(" / ".join(f"{h[r] / 1e12:.2f}" for r in ROLES) for h in (hs, hm)), "")
    t.add_row("step latency s (engines + queueing)", f"{so.step_latency_s:.2f}", f"{me.step_latency_s:.2f}",
              _x(so.step_latency_s, me.step_latency_s))
    return t


def fleet_dict(views: dict[Method, FleetView]) -> dict[str, Any]:
    """The headline's figures for plan.json (``fleet``), ESTIMATED."""
    return {"fleet": {"question": QUESTION, "estimated": {m: {
        "gpus": v.gpus, "replicas": v.replicas, "steps_per_s": v.steps_per_s, "gpu_s_per_step": v.gpu_s_per_step,
        "busy_gpu_s_per_step": v.busy_gpu_s_per_step, "hbm": v.hbm(), "step_latency_s": v.step_latency_s}
        for m, v in views.items()}}}


def _x(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"
