"""``plan --chain``: the three-tier chain (weak -> mid -> strong verifier) in the capacity planner.

With ``--chain`` the plan compares Strong-only with the chain instead of SpecAgent: a mid verifier
(``--mid-model`` on ``--mid-gpus`` GPUs a replica) reviews every block, and only escalated blocks (rate
``--escalate``) reach the strong verifier. The call counts are ``costs/calls.py``'s (method ``chain``), the
Proposition ``costs/theory.py:chain_traffic``; every output is ESTIMATED, the rates are given.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from ..bench.quality.variants import MID_MODEL
from ..costs.calls import Chain, calls_per_step
from ..costs.fleet import Plan
from ..costs.planner import Engine
from ..costs.specs import GpuProfile, load_model
from ..costs.totals import FleetView

NAMES = {"specagent": "SpecAgent", "chain": "Chain"}  # the compared method's column in the plan's tables


def add_chain_args(p: argparse.ArgumentParser) -> None:
    """The chain's flags, in their own group of the ``plan`` parser."""
    g = p.add_argument_group("three-tier chain (a mid verifier reviews each block first)")
    g.add_argument("--chain", action="store_true", help="plan the chain weak -> mid -> strong verifier against "
                   "Strong-only instead of SpecAgent")
    g.add_argument("--escalate", type=float, default=0.3, help="share of reviewed blocks the mid verifier "
                   "escalates to the strong one (low confidence, a tier it may not settle, an invalid repair)")
    g.add_argument("--escalate-rejected", type=float, default=None, help="escalation rate of blocks the mid "
                   "rejected, if it differs (default --escalate)")
    g.add_argument("--p-mid", type=float, default=None, help="the mid verifier's per-step acceptance (default "
                   "the strong verifier's --p)")
    g.add_argument("--rho-mid", type=float, default=0.0, help="share of the rejections the mid settles that "
                   "carry no fused repair, so the strong policy writes the step")
    g.add_argument("--mid-model", default=MID_MODEL, help="the mid verifier's model spec")
    g.add_argument("--mid-gpus", type=int, default=2, help="GPUs of one mid-verifier replica")
    g.add_argument("--mid-replicas", default="auto", help="mid-verifier replicas (auto: sized for the load)")


def chain_from(args: argparse.Namespace, gpu: GpuProfile) -> tuple[Chain | None, Engine | None, bool]:
    """(rates, mid engine, whether its replicas are auto) from the flags; (None, None, True) without --chain.
    ValueError for a chain flag given without --chain or out of range."""
    if not getattr(args, "chain", False):
        if getattr(args, "escalate_rejected", None) is not None or getattr(args, "p_mid", None) is not None:
            raise ValueError("--escalate-rejected and --p-mid go with --chain")
        return None, None, True
    chain = Chain(args.escalate, args.escalate_rejected, args.p_mid, args.rho_mid)
    auto = args.mid_replicas == "auto"
    if not auto and (not args.mid_replicas.isdigit() or int(args.mid_replicas) < 1):
        raise ValueError(f"--mid-replicas takes auto or a whole number >= 1, got {args.mid_replicas!r}")
    replicas = 1 if auto else int(args.mid_replicas)
    return chain, Engine(load_model(args.mid_model), gpu, args.mid_gpus, replicas, args.max_batch), auto


def mid_gpus(plan: Plan) -> int:
    """GPUs of the chain's mid fleet at its target batch (0 without a chain)."""
    i = plan.inputs
    return 0 if i.mid is None else plan.sizing["chain"].mid_replicas * i.mid.gpus


def chain_table(plan: Plan, view: FleetView) -> Table:
    """The chain's own figures at the planned load, next to SpecAgent's calls per committed step. The mid's
    batch, HBM, GPU-s and replicas are ``view``'s: the headline's view, the chain on its own fleet sized to the
    load (``fleet_tables.fleet_views(plan)["chain"]``); only the row that says so is today's verifier fleet."""
    i, acc = plan.inputs, plan.inputs.acceptance
    assert i.mid is not None and acc.chain is not None
    c = acc.chain
    calls = {m: {r: sum(k for k, _ in v) for r, v in calls_per_step(m, acc, i.shapes).items()}
             for m in ("specagent", "chain")}
    steps, escalated, _ = acc.chain_per_block()
    t = Table(title=f"The chain on the headline's fleet sized to {i.traffic.sessions:g} sessions (ESTIMATED; rates "
                    "given)")
    for col in ("figure", "value", "label"):
        t.add_column(col)
    rows = [("mid verifier; its replicas on today's verifier fleet (not the headline's)",
             f"{i.mid.spec.name} on {i.mid.gpus} x {i.mid.gpu.name}; {i.mid.replicas} replica(s)",
             "given (replicas: --mid-replicas, or sized for the load: estimated)"),
            ("escalation accepted / rejected blocks; p_mid; rho_mid",
             f"{c.e_accept:.2f} / {c.e_reject if c.e_reject is not None else c.e_accept:.2f}; "
             f"{c.p_mid if c.p_mid is not None else acc.p:.2f}; {c.rho_mid:.2f}", "given"),
            ("escalated share of reviewed blocks; committed steps per block", f"{escalated:.3f}; {steps:.3f}",
             "estimated"),
            ("strong calls / committed step: SpecAgent -> chain",
             f"{calls['specagent']['strong']:.3f} -> {calls['chain']['strong']:.3f}", "estimated"),
            ("mid verifies / committed step", f"{calls['chain']['mid']:.3f}", "estimated"),
            ("mid batch per replica", f"{view.op.batch_mid:.1f}", "estimated"),
            ("mid HBM per committed step, TB", f"{view.hbm()['mid'] / 1e12:.3f}", "estimated"),
            ("mid GPU-s per committed step (mid GPUs per committed step/s)",
             f"{view.gpus['mid'] / view.steps_per_s:.3f}", "estimated"),
            ("mid verifier replicas", str(view.replicas["mid"]), "estimated")]
    for row in rows:
        t.add_row(*row)
    return t


def chain_dict(plan: Plan) -> dict[str, Any]:
    """The chain's inputs and figures for plan.json (``chain``); empty without a chain. ``batch_mid``,
    ``mid_hbm`` and ``mid_gpu_s`` (busy) are today's verifier fleet's (``at_load``); the headline's fleet is
    ``plan.json``'s ``fleet``."""
    i = plan.inputs
    if i.mid is None:
        return {}
    op = plan.at_load["chain"]
    return {"chain": {"mid": {"model": i.mid.spec.name, "gpus": i.mid.gpus, "replicas": i.mid.replicas},
                      "estimated": {"batch_mid": op.batch_mid, "mid_hbm": op.cost.mid.hbm,
                                    "mid_gpu_s": op.cost.mid.gpu_s,
                                    "mid_replicas_sized": plan.sizing["chain"].mid_replicas}}}
