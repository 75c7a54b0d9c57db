"""``specagent-ray bench adaptive``: Strong-only, SpecAgent at a fixed K, the three-tier chain at that K, and the
speculation controller's route per block (Strong-only, SpecAgent with its K, or the chain), at several loads.

1. The fleet and traffic are `specagent-ray plan`'s defaults: the strong fleet sized for its planned load,
   drafters scaled with the load; the levels are concurrent sessions (default 10, 100 and 1,000) plus the
   planner's crossover of the objective's saving.
2. Sessions run the real protocol loop in process on tau2 tasks with SIMULATED policies (``bench tau2``'s
   world), graded by tau2's evaluator. Strong-only and fixed K do not depend on the load and run once;
   adaptive K runs at each level, its controller told that level's sessions (``Load``). With a mid verifier
   (``--mid-model``, default the chain's; ``none``: no chain) the fixed chain runs too, and the controller
   weighs the chain per block with the mid verifier's escalation rate measured on that run; a block it routes
   to the chain is reviewed by the simulated mid verifier first (``Parts.mid`` set for that block).
3. Each method's realized call mix (calls per committed step and mean tokens, per role and purpose, from
   the sessions' ledgers: SIMULATED tokens) is priced at its own closed-loop operating point at the level
   (``planner.operate``, the planner's batch term): GPU-seconds, strong HBM and step latency per committed
   step, ESTIMATED. Pass@1 is SIMULATED, with a 95 % bootstrap interval over tasks. Every figure counts every
   role (drafter, mid, strong; GPU-s and HBM in total, the split beside it); a strong-only figure says so.
4. The issue's goals in totals (``costs/totals.py``): each mix on a fleet sized to 10 and to 1,000 sessions,
   all-role HBM per committed step and GPUs per committed step/s against Strong-only, PASS or MISS.

Why not 1,000 sessions through the served sim profile: on a 2-core machine the coordinator, not the
simulated GPUs, would set the pace there (about 100 committed steps/s), and the latencies would measure
this VM. The served sim with roofline latencies checks the planner's batch term where the CPU keeps up
(``specagent-ray plan --check-batch``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ..bench.quality.variants import MID_MODEL, Variant
from ..control.controller import METRIC, OBJECTIVES, Controller, Load, TokenModel
from ..control.online import AdaptiveK, Observer, OnlineEstimate, Prior
from ..costs.calls import Chain
from ..costs.fleet import PlanInputs, make_plan, weak_for
from ..costs.planner import Calls, CallShape, Engine, Operating, Traffic, operate
from ..costs.specs import load_model
from ..costs.totals import ROLES, FleetView, fleet_view, mix_shapes
from ..protocol.baselines import METHODS
from ..protocol.runtime import SpecConfig
from .adaptive_report import (
    LABELS,
    Level,
    goals,
    level_table,
    print_goals,
    total_goals_of,
)

HELP = __doc__


@dataclass(frozen=True)
class Session:
    """One graded run: its reward, committed steps and ledger calls as (role, purpose, prompt, cached, decode)."""

    task_id: str
    trial: int
    reward: float
    steps: int
    calls: tuple[tuple[str, str, int, int, int], ...]
    chosen: tuple[int, ...] = ()
    chained: tuple[bool, ...] = ()  # per chosen block, whether the mid verifier reviewed it first


def mid_switch(parts: Any, mid: Any, heard: list[bool]) -> Callable[[bool], None]:
    """An ``AdaptiveK`` route in process: ``parts.mid`` is the mid verifier for a block the controller sent
    to the chain and None for one it did not (``Parts.mid`` None: the strong verifier reviews the block)."""
    def route(chain: bool) -> None:
        heard.append(chain)
        parts.mid = mid if chain else None
    return route


async def _run(domain: str, method: str, task_id: str, trial: int, k: int, controller: Controller | None,
               sessions: float, prior: Prior, learned: OnlineEstimate | None, chain: bool = False) -> Session:
    """One graded session; with a ``controller``, adaptive K; else K (``learned`` hears its blocks). With
    ``chain`` the simulated mid verifier is there: for every block, or for the blocks the controller routes."""
    from ..bench.quality.runs import BenchConfig, _world

    variant = Variant("specagent", chain=chain)
    task, parts, grade = _world(BenchConfig(domain=domain, methods=("strong",)), task_id, trial, variant)
    chosen: list[int] = []
    chained: list[bool] = []
    if controller is not None:
        parts.block_size = AdaptiveK(controller, lambda: Load(sessions), prior, chosen.append,
                                     mid_switch(parts, parts.mid, chained))
    elif learned is not None:
        parts.block_size = Observer(k, learned)
    trajectory = await METHODS["strong" if method == "strong" else "specagent"](task, parts,
                                                                                variant.spec(SpecConfig(k=k)))
    calls = tuple((c.role, c.purpose, c.usage.prompt_tokens, c.usage.cached_prompt_tokens, c.usage.decode_tokens)
                  for c in parts.ledger.calls)
    return Session(task_id, trial, grade(trajectory), len(trajectory.steps), calls, tuple(chosen), tuple(chained))


def run_sessions(domain: str, tasks: Sequence[str], trials: int, method: str, k: int = 6,
                 controller: Controller | None = None, sessions: float = 1, prior: Prior = Prior(),
                 learned: OnlineEstimate | None = None, chain: bool = False) -> list[Session]:
    """Sessions of one method; ``controller``: adaptive K from ``prior`` at ``sessions``; ``learned``: what
    a fixed-K run's blocks teach (the prior of the adaptive runs); ``chain``: a mid verifier is deployed."""
    async def all_runs() -> list[Session]:
        return [await _run(domain, method, t, i, k, controller, sessions, prior, learned, chain)
                for i in range(trials) for t in tasks]
    return asyncio.run(all_runs())


def chain_rates(runs: Sequence[Session]) -> Chain:
    """The mid verifier's escalation rate measured on a fixed-chain run (SIMULATED): strong verifies over mid
    verifies; the same for accepted and rejected blocks, and every settled rejection carries its repair
    (``plan --chain``'s defaults)."""
    verifies = {role: sum(1 for r in runs for c in r.calls if c[0] == role and c[1] == "verify")
                for role in ("mid", "strong")}
    return Chain(min(1.0, verifies["strong"] / max(1, verifies["mid"])))


def call_mix(runs: Sequence[Session]) -> tuple[Calls, float]:
    """Calls per committed step with their mean shape, per role and purpose; and the longest context."""
    steps = sum(r.steps for r in runs) or 1
    groups: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    for r in runs:
        for role, purpose, p, c, d in r.calls:
            groups[(role, purpose)].append((p, c, d))
    mix: Calls = {"strong": [], "mid": [], "weak": []}
    for (role, _), rows in sorted(groups.items()):
        mean = np.mean(np.array(rows, dtype=float), axis=0)
        mix[role].append((len(rows) / steps, CallShape(*(float(x) for x in mean))))
    longest = max((p + d for r in runs for _, _, p, _, d in r.calls), default=1)
    return mix, float(longest)


def priced(runs: Sequence[Session], inputs: PlanInputs, sessions: float, mid: Engine | None = None) -> Operating:
    """The runs' call mix at its closed-loop operating point with ``sessions`` on the plan's fleet (ESTIMATED);
    a mix that calls ``mid`` gets the mid fleet sized to this load (:func:`mid_for`)."""
    mix, longest = call_mix(runs)
    steps = np.mean([r.steps for r in runs])
    shapes = replace(inputs.shapes, max_context=longest)
    traffic = Traffic(sessions, float(steps), inputs.traffic.think_time_s)
    sized_mid = mid_for(runs, inputs, sessions, mid) if mix["mid"] and mid is not None else None
    # PlanInputs asks that a mid comes with rates; a measured mix carries its own mid calls and never reads them
    at = replace(inputs, shapes=shapes, mid=sized_mid, acceptance=replace(
        inputs.acceptance, chain=Chain(1.0) if sized_mid is not None else None))
    weak = weak_for(at, sessions, mix)  # drafters scaled to this mix's own demand
    return operate(mix, traffic, inputs.acceptance, shapes, inputs.strong, weak, mid=sized_mid)


def mid_for(runs: Sequence[Session], inputs: PlanInputs, sessions: float, mid: Engine) -> Engine:
    """The mid fleet for the runs' mix at ``sessions``: its replicas sized to the load at the mid's target
    batch (``costs/totals.fleet_view``; ``plan --chain``'s auto replicas)."""
    return replace(mid, replicas=sized(runs, inputs, sessions, mid).replicas.get("mid", 1))


def fitted_tokens(runs: Sequence[Session]) -> TokenModel:
    """The controller's token model from a fixed-K run's ledgers (SIMULATED tokens), as its prior is: the
    system prompt is the mean first prompt; the tokens each step adds, the median over sessions of the
    slope of the draft prompts against their order; a step's and a verdict's decode, the means of the
    drafts' and the verifies'."""
    def mean_decode(purpose: str) -> float:
        rows = [d for r in runs for _, p, _, _, d in r.calls if p == purpose]
        return float(np.mean(rows)) if rows else 0.0

    firsts = [r.calls[0][2] for r in runs if r.calls]
    slopes = [float(np.polyfit(range(len(d)), d, 1)[0]) for r in runs
              if len(d := [p for _, purpose, p, _, _ in r.calls if purpose == "draft"]) > 2]
    if not firsts or not slopes:
        return TokenModel()
    return TokenModel(float(np.mean(firsts)), max(0.0, float(np.median(slopes))), mean_decode("draft"),
                      mean_decode("verify"))


def pass_interval(runs: Sequence[Session], draws: int = 5000, seed: int = 0) -> tuple[float, float, float]:
    """Pass@1 (%) and its 95 % bootstrap interval, resampling tasks with each task's trials together."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        by_task[r.task_id].append(r.reward)
    means = np.array([np.mean(v) for v in by_task.values()]) * 100
    idx = np.random.default_rng(seed).integers(0, len(means), size=(draws, len(means)))
    boot = means[idx].mean(axis=1)
    return float(means.mean()), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def figures(op: Operating, runs: Sequence[Session], inputs: PlanInputs | None = None,
            mid: Engine | None = None) -> dict[str, float]:
    """The figures of one method at one level: at its operating point on the plan's fleet (GPU-s and HBM of
    every role and per role, ``strong_hbm`` the strong model's alone), and with ``inputs``, on a fleet sized
    to the level (``fleet_*``: GPUs per committed step/s, step latency, all-role HBM per committed step)."""
    p, lo, hi = pass_interval(runs)
    c = op.cost
    out = {"gpu_seconds": c.gpu_s, "hbm_total": c.strong.hbm + c.weak.hbm + c.mid.hbm, "latency": op.step_latency_s,
           **{f"{r}_hbm": getattr(c, r).hbm for r in ROLES}, **{f"{r}_gpu_s": getattr(c, r).gpu_s for r in ROLES},
           "batch_strong": op.batch_strong, "pass_at_1": p, "pass_low": lo, "pass_high": hi,
           "committed_steps": float(sum(r.steps for r in runs))}
    if inputs is not None:
        v = sized(runs, inputs, op.sessions, mid)
        out.update(fleet_gpu_s_per_step=v.gpu_s_per_step, fleet_latency=v.step_latency_s,
                   fleet_hbm_total=v.hbm()["total"], fleet_gpus=float(v.total_gpus))
    return out


def sized(runs: Sequence[Session], inputs: PlanInputs, sessions: float, mid: Engine | None = None) -> FleetView:
    """The runs' call mix on a fleet sized to ``sessions`` (``costs/totals.py``; ESTIMATED)."""
    mix, longest = call_mix(runs)
    traffic = Traffic(sessions, float(np.mean([r.steps for r in runs])), inputs.traffic.think_time_s)
    engines = {"strong": inputs.strong, "weak": inputs.weak, **({"mid": mid} if mid is not None else {})}
    return fleet_view(mix, engines, traffic, inputs.acceptance, mix_shapes(mix, longest))


def run_levels(args: argparse.Namespace, inputs: PlanInputs, levels: list[tuple[float, str]],
               console: Console) -> list[Level]:
    """The fixed methods once, then adaptive at each level; every method priced at each level."""
    from ..bench.quality.runs import BenchConfig, task_ids

    tasks = task_ids(BenchConfig(domain=args.domain, methods=("strong",)))[: args.tasks]
    mid = mid_engine(args, inputs)
    console.print(f"Strong-only, SpecAgent K = {args.k}" + (f" and the chain (mid {mid.spec.name})" if mid else "")
                  + f": {len(tasks)} tasks x {args.trials} trials ...")
    learned = OnlineEstimate(Prior(weight=1e-6), max(1, args.k))
    run = functools.partial(run_sessions, args.domain, tasks, args.trials)
    base = {"strong": run("strong"), "fixed": run("specagent", args.k, learned=learned)}
    if mid is not None:
        base["chain"] = run("specagent", args.k, chain=True)
    prior = learned.as_prior()  # calibrated on the fixed-K run, as a profile's prior would be from a bench run
    steps = float(np.mean([r.steps for r in base["fixed"]]))
    tokens = fitted_tokens(base["fixed"])
    rates = chain_rates(base["chain"]) if mid is not None else None
    console.print(f"prior from the fixed-K run: p read {prior.p_read:.2f}, write {prior.p_write:.2f}, rho "
                  f"{prior.rho:.2f}, write hazard by position " + ", ".join(f"{h:.2f}" for h in prior.hazards)
                  + f"; tokens: system {tokens.system:.0f}, {tokens.new:.0f} per step, step {tokens.step:.0f}, "
                  f"verdict {tokens.verdict:.0f}; {steps:.1f} steps per session"
                  + (f"; the chain run's escalation {rates.e_accept:.2f}" if rates else ""))
    out = []
    for sessions, label in levels:
        controller = Controller(inputs.strong, weak_for(inputs, sessions), args.objective, args.k,
                                review_slack=args.review_slack, explore_blocks=args.explore_blocks,
                                explore_margin=args.explore_margin, tokens=tokens, steps_per_session=steps,
                                think_time_s=inputs.traffic.think_time_s, chain=rates,
                                mid=mid_for(base["chain"], inputs, sessions, mid) if mid is not None else None)
        console.print(f"adaptive at {sessions:,.0f} sessions ({label}) ...")
        runs = {**base, "adaptive": run("specagent", args.k, controller, sessions, prior, chain=mid is not None)}
        chosen = Counter(f"{k} chain" if c else str(k) for r in runs["adaptive"]
                         for k, c in zip(r.chosen, r.chained or (False,) * len(r.chosen), strict=True))
        out.append(Level(sessions, label, {m: figures(priced(rs, inputs, sessions, mid), rs, inputs, mid)
                                           for m, rs in runs.items()}, dict(sorted(chosen.items()))))
    return out


def mid_engine(args: argparse.Namespace, inputs: PlanInputs) -> Engine | None:
    """The mid verifier (``--mid-model`` on ``--mid-gpus`` of the strong model's GPU), or None for ``none``."""
    if args.mid_model == "none":
        return None
    return Engine(load_model(args.mid_model), inputs.strong.gpu, args.mid_gpus, 1, inputs.strong.max_batch)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("adaptive", help="ESTIMATED/SIMULATED: Strong-only, fixed K and adaptive K at 10, 100, "
                       "1,000 sessions and the planner's crossover", description=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objective", choices=OBJECTIVES, default="gpu_seconds", help="what adaptive K minimizes")
    p.add_argument("--levels", default="10,100,1000", help="concurrent sessions (the crossover is added)")
    p.add_argument("--domain", default="airline", help="tau2 domain")
    p.add_argument("--tasks", type=int, default=20, help="the first N tasks of the domain (tau2's base split)")
    p.add_argument("--trials", type=int, default=2, help="trials per task")
    p.add_argument("--k", type=int, default=6, help="the fixed K, and adaptive K's largest")
    p.add_argument("--review-slack", type=float, default=0.03, help="the extra cost adaptive K pays to review "
                   "more reads (the profile's speculation.review_slack)")
    p.add_argument("--explore-blocks", type=int, default=2, help="blocks a session drafts before its own "
                   "estimate may stop it (the profile's speculation.explore_blocks)")
    p.add_argument("--explore-margin", type=float, default=0.25, help="how much cheaper K = 0 must be at the "
                   "prior to skip them (speculation.explore_margin)")
    p.add_argument("--mid-model", default=MID_MODEL, help="the chain's mid verifier's model spec (none: no chain, "
                   "the controller weighs Strong-only and SpecAgent alone)")
    p.add_argument("--mid-gpus", type=int, default=2, help="GPUs of one mid-verifier replica")
    p.add_argument("--out", type=Path, default=Path("results/adaptive.json"), help="where the figures go")
    p.set_defaults(run=run_from_args)
    return p


@functools.cache
def default_inputs() -> PlanInputs:
    """`specagent-ray plan`'s inputs with every default, its strong fleet sized for the planned load."""
    from .command import add_parser as add_plan_parser
    from .command import resolve

    sub = argparse.ArgumentParser().add_subparsers()
    add_plan_parser(sub)
    return make_plan(resolve(sub.choices["plan"].parse_args([])).inputs).inputs


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    inputs = default_inputs()
    plan = make_plan(inputs)  # its crossovers, on that fleet
    levels = [(float(x), "given") for x in args.levels.split(",") if x.strip()]
    metric = METRIC.get(args.objective)  # the planner has no crossover of all-role HBM
    first = plan.crossover[metric][0] if metric else None
    if first is not None:
        levels.append((float(first), f"the planner's {args.objective} crossover"))
    done = run_levels(args, inputs, sorted(levels), console)
    for lv in done:
        console.print(level_table(lv, args.objective))
    met, totals = goals(done, args.objective), total_goals_of(done)
    print_goals(console, met, totals)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "objective": args.objective, "mid_model": args.mid_model, "labels": LABELS,
        "levels": [asdict(lv) for lv in done], "goals": dict(met),
        "goals_in_totals": [{"goal": g.name, "scope": g.scope, "figure": g.figure, "verdict": g.verdict}
                            for g in totals]}, indent=1))
    console.print(f"figures written to {args.out}")
    return 0 if all(ok for _, ok in met) else 1
