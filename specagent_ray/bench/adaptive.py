"""``specagent-ray bench adaptive``: Strong-only, SpecAgent at a fixed K and SpecAgent with the speculation
controller's K per block, at several loads, in one run.

1. The fleet and traffic are `specagent-ray plan`'s defaults: the strong fleet sized for its planned load,
   drafters scaled with the load; the levels are concurrent sessions (default 10, 100 and 1,000) plus the
   planner's crossover of the objective's saving.
2. Sessions run the real protocol loop in process on tau2 tasks with SIMULATED policies (``bench tau2``'s
   world), graded by tau2's evaluator. Strong-only and fixed K do not depend on the load and run once;
   adaptive K runs at each level, its controller told that level's sessions (``Load``).
3. Each method's realized call mix (calls per committed step and mean tokens, per role and purpose, from
   the sessions' ledgers: SIMULATED tokens) is priced at its own closed-loop operating point at the level
   (``planner.operate``, the planner's batch term): GPU-seconds, strong HBM and step latency per committed
   step, ESTIMATED. Pass@1 is SIMULATED, with a 95 % bootstrap interval over tasks. Every figure counts every
   role (drafter and strong; GPU-s and HBM in total, the split beside it); a strong-only figure says so.
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
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from ..costs.controller import METRIC, OBJECTIVES, Controller, Load, TokenModel
from ..costs.fleet import PlanInputs, make_plan, weak_for
from ..costs.online import AdaptiveK, Observer, OnlineEstimate, Prior
from ..costs.planner import Calls, CallShape, Operating, Traffic, operate
from ..costs.totals import (
    GOAL_HIGH,
    GOAL_LOW,
    Goal,
    fleet_view,
    mix_shapes,
    total_goals,
)
from ..protocol.baselines import METHODS
from ..protocol.runtime import SpecConfig

HELP = __doc__
SPEC = ("strong", "fixed", "adaptive")
GOAL_WITHIN = 0.03  # adaptive within 3 % of the better fixed method on the objective, at every level
BEATS = 0.005  # "beats both": lower than the better fixed method by more than rounding (0.5 %)


@dataclass(frozen=True)
class Session:
    """One graded run: its reward, committed steps and ledger calls as (role, purpose, prompt, cached, decode)."""

    task_id: str
    trial: int
    reward: float
    steps: int
    calls: tuple[tuple[str, str, int, int, int], ...]
    chosen: tuple[int, ...] = ()


async def _run(domain: str, method: str, task_id: str, trial: int, k: int, controller: Controller | None,
               sessions: float, prior: Prior, learned: OnlineEstimate | None) -> Session:
    """One graded session; with a ``controller``, adaptive K; else K (``learned`` hears its blocks)."""
    from .tau2 import BenchConfig, _world

    task, parts, grade = _world(BenchConfig(domain=domain, methods=("strong",)), task_id, trial)
    chosen: list[int] = []
    if controller is not None:
        parts.block_size = AdaptiveK(controller, lambda: Load(sessions), prior, chosen.append)
    elif learned is not None:
        parts.block_size = Observer(k, learned)
    trajectory = await METHODS["strong" if method == "strong" else "specagent"](task, parts, SpecConfig(k=k))
    calls = tuple((c.role, c.purpose, c.usage.prompt_tokens, c.usage.cached_prompt_tokens, c.usage.decode_tokens)
                  for c in parts.ledger.calls)
    return Session(task_id, trial, grade(trajectory), len(trajectory.steps), calls, tuple(chosen))


def run_sessions(domain: str, tasks: Sequence[str], trials: int, method: str, k: int = 6,
                 controller: Controller | None = None, sessions: float = 1, prior: Prior = Prior(),
                 learned: OnlineEstimate | None = None) -> list[Session]:
    """Sessions of one method; ``controller``: adaptive K from ``prior`` at ``sessions``; ``learned``: what
    a fixed-K run's blocks teach (the prior of the adaptive runs)."""
    async def all_runs() -> list[Session]:
        return [await _run(domain, method, t, i, k, controller, sessions, prior, learned)
                for i in range(trials) for t in tasks]
    return asyncio.run(all_runs())


def call_mix(runs: Sequence[Session]) -> tuple[Calls, float]:
    """Calls per committed step with their mean shape, per role and purpose; and the longest context."""
    steps = sum(r.steps for r in runs) or 1
    groups: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    for r in runs:
        for role, purpose, p, c, d in r.calls:
            groups[(role, purpose)].append((p, c, d))
    mix: Calls = {"strong": [], "weak": []}
    for (role, _), rows in sorted(groups.items()):
        mean = np.mean(np.array(rows, dtype=float), axis=0)
        mix[role].append((len(rows) / steps, CallShape(*(float(x) for x in mean))))
    longest = max((p + d for r in runs for _, _, p, _, d in r.calls), default=1)
    return mix, float(longest)


def priced(runs: Sequence[Session], inputs: PlanInputs, sessions: float) -> Operating:
    """The runs' call mix at its closed-loop operating point with ``sessions`` on the plan's fleet (ESTIMATED)."""
    mix, longest = call_mix(runs)
    steps = np.mean([r.steps for r in runs])
    shapes = replace(inputs.shapes, max_context=longest)
    traffic = Traffic(sessions, float(steps), inputs.traffic.think_time_s)
    weak = weak_for(replace(inputs, shapes=shapes), sessions, mix)  # drafters scaled to this mix's own demand
    return operate(mix, traffic, inputs.acceptance, shapes, inputs.strong, weak)


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


@dataclass(frozen=True)
class Level:
    sessions: float
    label: str
    figures: dict[str, dict[str, float]]  # method -> figure -> value
    chosen_k: dict[int, int]


def figures(op: Operating, runs: Sequence[Session], inputs: PlanInputs | None = None) -> dict[str, float]:
    """The figures of one method at one level: at its operating point on the plan's fleet (GPU-s and HBM of
    every role, ``strong_hbm`` the strong model's alone), and with ``inputs``, on a fleet sized to the level
    (``fleet_*``: GPUs per committed step/s, step latency, all-role HBM per committed step)."""
    p, lo, hi = pass_interval(runs)
    out = {"gpu_seconds": op.cost.gpu_s, "strong_hbm": op.cost.strong.hbm, "weak_hbm": op.cost.weak.hbm,
           "hbm_total": op.cost.strong.hbm + op.cost.weak.hbm + op.cost.mid.hbm, "latency": op.step_latency_s,
           "batch_strong": op.batch_strong, "pass_at_1": p, "pass_low": lo, "pass_high": hi,
           "committed_steps": float(sum(r.steps for r in runs))}
    if inputs is not None:
        v = sized(runs, inputs, op.sessions)
        out.update(fleet_gpu_s_per_step=v.gpu_s_per_step, fleet_latency=v.step_latency_s,
                   fleet_hbm_total=v.hbm()["total"], fleet_gpus=float(v.total_gpus))
    return out


def sized(runs: Sequence[Session], inputs: PlanInputs, sessions: float):
    """The runs' call mix on a fleet sized to ``sessions`` (``costs/totals.py``; ESTIMATED)."""
    mix, longest = call_mix(runs)
    traffic = Traffic(sessions, float(np.mean([r.steps for r in runs])), inputs.traffic.think_time_s)
    engines = {"strong": inputs.strong, "weak": inputs.weak}
    return fleet_view(mix, engines, traffic, inputs.acceptance, mix_shapes(mix, longest))


def run_levels(args: argparse.Namespace, inputs: PlanInputs, levels: list[tuple[float, str]],
               console: Console) -> list[Level]:
    from .tau2 import BenchConfig, task_ids

    tasks = task_ids(BenchConfig(domain=args.domain, methods=("strong",)))[: args.tasks]
    console.print(f"Strong-only and SpecAgent K = {args.k}: {len(tasks)} tasks x {args.trials} trials ...")
    learned = OnlineEstimate(Prior(weight=1e-6), max(1, args.k))
    base = {"strong": run_sessions(args.domain, tasks, args.trials, "strong"),
            "fixed": run_sessions(args.domain, tasks, args.trials, "specagent", args.k, learned=learned)}
    prior = learned.as_prior()  # calibrated on the fixed-K run, as a profile's prior would be from a bench run
    steps = float(np.mean([r.steps for r in base["fixed"]]))
    tokens = fitted_tokens(base["fixed"])
    console.print(f"prior from the fixed-K run: p read {prior.p_read:.2f}, write {prior.p_write:.2f}, rho "
                  f"{prior.rho:.2f}, write hazard by position " + ", ".join(f"{h:.2f}" for h in prior.hazards)
                  + f"; tokens: system {tokens.system:.0f}, {tokens.new:.0f} per step, step {tokens.step:.0f}, "
                  f"verdict {tokens.verdict:.0f}; {steps:.1f} steps per session")
    out = []
    for sessions, label in levels:
        weak = weak_for(inputs, sessions)
        tr = inputs.traffic
        controller = Controller(inputs.strong, weak, args.objective, args.k, review_slack=args.review_slack,
                                explore_blocks=args.explore_blocks, explore_margin=args.explore_margin,
                                tokens=tokens, steps_per_session=steps, think_time_s=tr.think_time_s)
        console.print(f"adaptive K at {sessions:,.0f} sessions ({label}) ...")
        runs = {**base, "adaptive": run_sessions(args.domain, tasks, args.trials, "specagent", args.k, controller,
                                                 sessions, prior)}
        chosen: dict[int, int] = defaultdict(int)
        for r in runs["adaptive"]:
            for k in r.chosen:
                chosen[k] += 1
        out.append(Level(sessions, label, {m: figures(priced(runs[m], inputs, sessions), runs[m], inputs) for m in SPEC},
                         dict(sorted(chosen.items()))))
    return out


def goals(levels: Sequence[Level], objective: str) -> list[tuple[str, bool]]:
    """The issue's goals, each with whether this run met it."""
    within, beats, quality = [], [], []
    for lv in levels:
        f = lv.figures
        best = min(f["strong"][objective], f["fixed"][objective])
        within.append(f["adaptive"][objective] <= best * (1 + GOAL_WITHIN))
        beats.append(f["adaptive"][objective] < best * (1 - BEATS))
        quality.append(f["fixed"]["pass_low"] <= f["adaptive"]["pass_at_1"] <= f["fixed"]["pass_high"])
    return [(f"{objective}: adaptive within {GOAL_WITHIN:.0%} of the better fixed method at every level", all(within)),
            (f"{objective}: adaptive beats both by {BEATS:.1%} or more at one level or more", any(beats)),
            ("Pass@1 of adaptive within fixed K's bootstrap interval at every level", all(quality))]


def total_goals_of(levels: Sequence[Level]) -> list[Goal]:
    """The issue's goals in totals for fixed and adaptive K, where the run has the 10- and 1,000-session levels
    (fleets sized to each; Pass@1 inside Strong-only's bootstrap interval)."""
    by = {lv.sessions: lv.figures for lv in levels}
    if GOAL_LOW not in by or GOAL_HIGH not in by or "fleet_gpu_s_per_step" not in by[GOAL_LOW]["strong"]:
        return []
    low, high = by[GOAL_LOW], by[GOAL_HIGH]
    out = []
    for m, name in (("fixed", "fixed K"), ("adaptive", "adaptive K")):
        ok = high["strong"]["pass_low"] <= high[m]["pass_at_1"] <= high["strong"]["pass_high"]
        note = f"Pass@1 {high[m]['pass_at_1']:.1f} in Strong-only's [{high['strong']['pass_low']:.1f}, " \
               f"{high['strong']['pass_high']:.1f}]: {'yes' if ok else 'no'}"
        out += total_goals(name, low[m]["fleet_hbm_total"] / low["strong"]["fleet_hbm_total"],
                           high[m]["fleet_gpu_s_per_step"] / high["strong"]["fleet_gpu_s_per_step"],
                           high["strong"]["fleet_latency"] / high[m]["fleet_latency"], ok, note)
    return out


def level_table(lv: Level, objective: str) -> Table:
    t = Table(title=f"{lv.sessions:,.0f} sessions ({lv.label}): per committed step; GPU-s, HBM, latency ESTIMATED "
                    "(simulated tokens), Pass@1 SIMULATED")
    for col in ("figure", "Strong-only", "fixed K", "adaptive", "adaptive / best fixed"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    f = lv.figures
    rows = [("gpu_seconds", "GPU-s, all roles (strong + weak)", "{:.3f}"), ("hbm_total", "HBM all roles, TB", "{:.3f}"),
            ("weak_hbm", "  of which weak, TB", "{:.3f}"), ("strong_hbm", "  of which strong (strong model only), TB", "{:.3f}"),
            ("latency", "step latency, s", "{:.2f}"), ("batch_strong", "strong batch / replica", "{:.1f}")]
    if "fleet_gpu_s_per_step" in f["strong"]:
        rows += [("fleet_gpu_s_per_step", "fleet sized to this load: GPUs per committed step/s", "{:.3f}"),
                 ("fleet_latency", "fleet sized to this load: step latency, s", "{:.2f}")]
    for key, name, fmt in rows:
        scale = 1e-12 if "hbm" in key else 1
        best = min(f["strong"][key], f["fixed"][key])
        t.add_row(name + (" (objective)" if key == objective else ""),
                  *(fmt.format(f[m][key] * scale) for m in SPEC),
                  f"{f['adaptive'][key] / best:.3f}" if key != "batch_strong" and best > 0 else "")
    t.add_row("Pass@1 % [95 % interval]", *(f"{f[m]['pass_at_1']:.1f} [{f[m]['pass_low']:.1f}, {f[m]['pass_high']:.1f}]"
                                            for m in SPEC), "")
    t.add_row("K chosen (blocks)", "", "", ", ".join(f"{k}: {n}" for k, n in lv.chosen_k.items()), "")
    return t


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
    p.add_argument("--out", type=Path, default=Path("results/adaptive.json"), help="where the figures go")
    return p


@functools.cache
def default_inputs() -> PlanInputs:
    """`specagent-ray plan`'s inputs with every default, its strong fleet sized for the planned load."""
    from .plan import add_parser as add_plan_parser
    from .plan import resolve

    sub = argparse.ArgumentParser().add_subparsers()
    add_plan_parser(sub)
    return make_plan(resolve(sub.choices["plan"].parse_args([])).inputs).inputs


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    inputs = default_inputs()
    plan = make_plan(inputs)  # its crossovers, on that fleet
    levels = [(float(x), "given") for x in args.levels.split(",") if x.strip()]
    first, _ = plan.crossover[METRIC[args.objective]]
    if first is not None:
        levels.append((float(first), f"the planner's {args.objective} crossover"))
    done = run_levels(args, inputs, sorted(levels), console)
    for lv in done:
        console.print(level_table(lv, args.objective))
    met = goals(done, args.objective)
    for text, ok in met:
        console.print(f"  goal: {text}: {'[green]met[/green]' if ok else '[red]not met[/red]'}")
    totals = total_goals_of(done)
    for g in totals:
        console.print(f"  goal in totals ({g.scope}): {g.name}: {g.figure}: {g.verdict}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"objective": args.objective, "labels": {
        "gpu_seconds, hbm_total, weak_hbm, strong_hbm, latency": "estimated (cost model at each method's operating "
        "point; simulated tokens; hbm_total and gpu_seconds count every role, strong_hbm the strong model only)",
        "fleet_*": "estimated (the method's mix on a fleet sized to the level, costs/totals.py)",
        "pass_at_1": "simulated (tau2 evaluator on simulated policies)"},
        "levels": [asdict(lv) for lv in done], "goals": dict(met),
        "goals_in_totals": [{"goal": g.name, "scope": g.scope, "figure": g.figure, "verdict": g.verdict}
                            for g in totals]}, indent=1))
    console.print(f"figures written to {args.out}")
    return 0 if all(ok for _, ok in met) else 1
