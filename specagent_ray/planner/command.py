"""``specagent-ray plan``: the capacity planner's command: inputs (given or from bench runs), the table, the
JSON and the plot. The model is ``costs/planner.py`` and ``costs/fleet.py``; the check against the sim's
load tests is ``planner/check_sim.py``.

Every figure carries a label: **given** (a flag), **shipped profile** (costs/data/gpus.yaml, naming the fields
its source says were MEASURED), **measured** (a measured GPU profile, with its device; the coordinator shard
capacity, on the 2-core VM it was measured on),
**simulated** (acceptance and tokens from a bench run of the simulated policies) or **estimated** (all the
planner's outputs: roofline from the model specs and the GPU profile).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..costs.fleet import SHARD_STEPS_PER_S, Plan, PlanInputs, decode_knee, make_plan
from ..costs.measured_gpus import read_profile
from ..costs.planner import Acceptance, Engine, Traffic, token_model_shapes
from ..costs.specs import GpuProfile, gpu_names, load_gpu, load_model
from .bench_inputs import from_bench
from .chain import NAMES, add_chain_args, chain_dict, chain_from, chain_table, mid_gpus
from .compare_gpu import METRIC_NAMES, Side, compare_dict, compare_table
from .fleet_tables import fleet_dict, fleet_table, fleet_views

HELP = """Capacity planner: does SpecAgent save strong-model HBM, GPU-seconds and step latency against
Strong-only at a traffic level, by how much, where the saving vanishes as batches grow, and how many
verifier (strong) and drafter (weak) replicas and coordinator shards the load needs.

The model (all outputs ESTIMATED): Proposition 1's call counts per committed step (a verify per f/E steps,
f*rho*(1-p) separate repairs, f*n/E + 1 - f drafts), each call priced by the roofline of costs/model.py at
the batch its replica runs; the batch comes from the load by Little's law (closed loop: sessions alternate
think time, strong time and weak time). Below the decode knee a pass reads the weights once for the whole
batch, so each session's share falls as the batch grows; Strong-only keeps more sessions in the strong
engine than SpecAgent, so it gains more, and the saving shrinks; the crossover is the session count where
a saving falls to 1 (on the same verifier fleet). docs/benchmarks.md ("Capacity planner")
explains the figures and the check against the simulator."""

EPILOG = """examples:
  specagent-ray plan                                      # the defaults: 1,000 sessions, paper deployment on H20
  specagent-ray plan --sessions 200 --think-time-s 5 --gpu h200 --strong-gpus 8
  specagent-ray plan --from-bench results/tau2-airline-seed0.json      # p, n, rho, f and tokens of a bench run
  specagent-ray plan --gpu specagent_ray/costs/data/measured/nvidia-h200.yaml   # a measured GPU profile
  specagent-ray plan --gpu h200 --strong-gpus 8 --compare-gpu h200-datasheet     # corrected H200 against the datasheet's
  specagent-ray plan --n 1:75,2:39,3:14,4:11 --p 0.9 --rho 0.2 --f 0.3            # a block-length mix
  specagent-ray plan --check-sim --levels 10,40,100 --duration-s 30               # against the sim's load tests

Defaults of --p/--n/--rho/--f and the token flags are rounded from a simulated tau2 airline bench run
(`bench tau2 --domain airline --tasks 0..19 --trials 3 --methods strong,specagent`): SIMULATED figures,
not a real model's; pass --from-bench to use a run of yours. Writes <out>/plan.json and <out>/plan.png."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="capacity planner: SpecAgent's savings at a load, the crossover, replicas",
                       description=HELP, epilog=EPILOG, formatter_class=_Formatter)
    m = p.add_argument_group("models and GPUs")
    m.add_argument("--strong-model", default="qwen3.5-397b-a17b", help="verifier's model spec (costs/data/models.yaml)")
    m.add_argument("--weak-model", default="qwen3-4b", help="drafter's model spec")
    m.add_argument("--gpu", default="h20", help=f"shipped GPU profile ({', '.join(gpu_names())}) or a measured "
                   "profile YAML written by `bench roofline`")
    m.add_argument("--compare-gpu", default=None, metavar="NAME_OR_YAML", help="plan again on this second GPU "
                   "profile (every other flag the same) and print its crossovers and savings next to --gpu's, with "
                   "the difference (A / B - 1), e.g. --gpu h200 --compare-gpu h200-datasheet: the H200 at its "
                   "measured matrix rate against its datasheet peak; adds `compare` to plan.json")
    m.add_argument("--strong-gpus", type=int, default=16, help="GPUs of one verifier replica")
    m.add_argument("--weak-gpus", type=int, default=1, help="GPUs of one drafter replica")
    m.add_argument("--strong-replicas", default="auto", help="verifier replicas both methods share (auto: what "
                   "Strong-only needs at --sessions)")
    m.add_argument("--weak-replicas", default="auto", help="drafter replicas (auto: scaled with the load)")
    m.add_argument("--max-batch", type=int, default=256, help="most sequences a replica runs at once (vLLM "
                   "max_num_seqs); KV memory may allow fewer")
    m.add_argument("--target-batch-strong", type=float, default=None, help="batch a verifier replica is sized "
                   "for (default: where a sequence's own KV reads or FLOPs cost as much as the pass's shared "
                   "weight reads and collectives; at most the batch cap)")
    m.add_argument("--target-batch-weak", type=float, default=None, help="the same for a drafter replica")
    m.add_argument("--shard-steps-per-s", type=float, default=SHARD_STEPS_PER_S,
                   help="committed steps/s one coordinator shard carries (default MEASURED on a 2-core VM)")
    t = p.add_argument_group("traffic")
    t.add_argument("--sessions", type=float, default=1000, help="concurrent sessions")
    t.add_argument("--steps-per-session", type=float, default=None, help="committed steps per session "
                   "(default 14, or the bench run's)")
    t.add_argument("--think-time-s", type=float, default=1.0, help="time per committed step outside the "
                   "engines (tool calls, user replies)")
    a = p.add_argument_group("acceptance (given, or --from-bench)")
    a.add_argument("--from-bench", type=Path, nargs="+", default=None, metavar="JSON",
                   help="`bench tau2` results with strong and specagent runs: p, n (its block-length mix), "
                        "rho, f, call tokens and steps per session come from them (pooled)")
    # Defaults: rounded from `bench tau2 --domain airline --trials 3` (simulated, 2026-12-01, docs/benchmarks.md).
    a.add_argument("--p", type=float, default=0.82, help="per-step acceptance p_u")
    a.add_argument("--n", default="1:66,2:18,3:8,4:4,5:3",
                   help="mean block length, or a mix LENGTH:COUNT,... (e.g. 1:75,2:39)")
    a.add_argument("--rho", type=float, default=0.2, help="separate strong repairs per rejection")
    a.add_argument("--f", type=float, default=0.29, help="reviewed share of committed steps")
    k = p.add_argument_group("tokens (token model; ignored with --from-bench)")
    k.add_argument("--system-tokens", type=float, default=2600, help="prompt tokens before the first step")
    k.add_argument("--new-tokens", type=float, default=460, help="prompt tokens each committed step adds")
    k.add_argument("--step-tokens", type=float, default=723, help="decode tokens of one step (strong or weak)")
    k.add_argument("--verdict-tokens", type=float, default=1420, help="decode tokens of one verdict")
    o = p.add_argument_group("output")
    o.add_argument("--max-sessions", type=float, default=None, help="top of the sweep (default: 20 x --sessions, "
                   "at least 1,000)")
    o.add_argument("--points", type=int, default=32, help="session counts in the sweep")
    o.add_argument("--out", type=Path, default=Path("results/plan"), help="folder for plan.json and plan.png")
    c = p.add_argument_group("check against the simulator (starts the sim profile on local Ray)")
    c.add_argument("--check-sim", action="store_true", help="run sim load tests at --levels and compare strong "
                   "HBM per committed step with the planner's")
    c.add_argument("--check-batch", action="store_true", help="run sim load tests whose engines batch like GPUs "
                   "(roofline latencies) at --levels and compare each engine's batch with the planner's batch term")
    c.add_argument("--time-scale", type=float, default=0.3, help="--check-batch: real seconds per estimated "
                   "engine second (keeps this machine's CPU out of the measurement)")
    c.add_argument("--levels", default="10,40,100", help="concurrent sessions of each load test")
    c.add_argument("--duration-s", type=float, default=30.0, help="session starts of each load test")
    c.add_argument("--tasks", default="airline:0-19", help="task mix of the load tests and of the bench run the "
                   "planner's inputs come from (when --from-bench is not given)")
    c.add_argument("--trials", type=int, default=3, help="trials of that bench run")
    add_chain_args(p)
    p.set_defaults(run=run_plan)
    return p


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


@dataclass(frozen=True)
class Resolved:
    """The planner's inputs and the label of each input figure."""

    inputs: PlanInputs
    labels: dict[str, str]


def gpu_profile(text: str) -> tuple[GpuProfile, str]:
    """A shipped profile name, or a measured profile YAML; with its label."""
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ValueError(f"no GPU profile file {path}")
        gpu, measured = read_profile(path)
        return gpu, f"measured on {measured.get('device')} ({measured.get('date')}; {path})"
    gpu = load_gpu(text)
    return gpu, shipped_label(gpu)


def shipped_label(gpu: GpuProfile) -> str:
    """``shipped profile (costs/data/gpus.yaml: NAME[; FIELD, ... measured])``: the fields named in a sentence
    of the profile's source that has MEASURED in capitals (the convention of gpus.yaml's header)."""
    sentences = [s for s in re.split(r"\.\s+", gpu.source) if "MEASURED" in s]
    fields = [f for f in GpuProfile.model_fields if f not in ("name", "source")
              and any(re.search(rf"\b{f}\b", s) for s in sentences)]
    return f"shipped profile (costs/data/gpus.yaml: {gpu.name}" + (f"; {', '.join(fields)} measured)" if fields else ")")


def parse_blocks(text: str) -> float | dict[int, int]:
    """``1.8`` (a mean) or ``1:75,2:39`` (counts per block length)."""
    try:
        if ":" not in text:
            return float(text)
        return {int(k): int(v) for k, v in (part.split(":") for part in text.split(",") if part.strip())}
    except ValueError:
        raise ValueError(f"--n takes a mean (1.8) or LENGTH:COUNT pairs (1:75,2:39), got {text!r}") from None


def _replicas(text: str, flag: str) -> int | None:
    if text == "auto":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{flag} takes auto or a whole number >= 1, got {text!r}")
    return int(text)


def resolve(args: argparse.Namespace) -> Resolved:
    """The planner's inputs from the flags (and bench runs). ValueError with the reason on a bad input."""
    gpu, gpu_label = gpu_profile(args.gpu)
    strong_n, weak_n = _replicas(args.strong_replicas, "--strong-replicas"), _replicas(args.weak_replicas, "--weak-replicas")
    strong = Engine(load_model(args.strong_model), gpu, args.strong_gpus, strong_n or 1, args.max_batch)
    weak = Engine(load_model(args.weak_model), gpu, args.weak_gpus, weak_n or 1, args.max_batch)
    chain, mid, auto_mid = chain_from(args, gpu)
    labels = {"gpu": gpu_label, "traffic": "given", "shard capacity": "measured (sim profile, 2-core VM, "
              "`specagent-ray bench scale --client-processes 2`)" if args.shard_steps_per_s == SHARD_STEPS_PER_S
              else "given"}
    if args.from_bench:
        bench = from_bench(args.from_bench)
        acc, shapes, steps = replace(bench.acceptance, chain=chain), bench.shapes, args.steps_per_session or bench.steps_per_session
        labels.update(acceptance=f"simulated ({bench.source})", tokens=f"simulated ({bench.source})")
    else:
        n = parse_blocks(args.n)
        acc = (Acceptance.from_mean(args.p, n, args.rho, args.f, chain) if isinstance(n, float)
               else Acceptance.from_counts(args.p, n, args.rho, args.f, chain))
        steps = args.steps_per_session or 14.0
        shapes = token_model_shapes(acc, steps, args.system_tokens, args.new_tokens, args.step_tokens,
                                    args.verdict_tokens)
        labels.update(acceptance="given (defaults: simulated bench run, rounded)",
                      tokens="given (defaults: simulated token model, rounded)")
    inputs = PlanInputs(strong, weak, Traffic(args.sessions, steps, args.think_time_s), acc, shapes,
                        args.shard_steps_per_s, auto_weak=weak_n is None, auto_strong=strong_n is None,
                        target_batch_strong=args.target_batch_strong, target_batch_weak=args.target_batch_weak,
                        mid=mid, auto_mid=auto_mid)
    return Resolved(inputs, labels)


def run_plan(args: argparse.Namespace, console: Console) -> int:
    resolved = resolve(args)
    for flag, given in (("--compare-gpu", args.compare_gpu), ("--chain", resolved.inputs.mid)):
        if given and (args.check_sim or args.check_batch):
            raise ValueError(f"{flag} goes with a plan, not with --check-sim or --check-batch")
    if args.check_sim:
        from .check_sim import run_check

        return run_check(args, resolved, console)
    if args.check_batch:
        from .check_batch import run_check as run_batch_check

        return run_batch_check(args, resolved, console)
    plan = make_plan(resolved.inputs, args.max_sessions, args.points)
    views = fleet_views(plan)  # the headline's fleets: its table, the chain's table and plan.json's "fleet"
    for table in tables(plan, resolved.labels) + ([chain_table(plan, views["chain"])] if plan.inputs.mid else []):
        console.print(table)
    extra: dict[str, Any] = {**chain_dict(plan), **fleet_dict(views)}
    if args.compare_gpu:
        other = resolve(argparse.Namespace(**{**vars(args), "gpu": args.compare_gpu}))
        b = Side("--compare-gpu", args.compare_gpu, other.labels["gpu"],
                 make_plan(other.inputs, args.max_sessions, args.points))
        console.print(compare_table(Side("--gpu", args.gpu, resolved.labels["gpu"], plan), b))
        extra["compare"] = compare_dict(b)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "plan.json", plan, resolved.labels, extra)
    from .plot import plot

    plot(args.out / "plan.png", plan)
    console.print(f"wrote {args.out / 'plan.json'} and {args.out / 'plan.png'}")
    return 0


def _tb(x: float) -> str:
    return f"{x / 1e12:.2f}"


def _x(x: float) -> str:
    return f"{x:.2f}x"


def tables(plan: Plan, labels: dict[str, str]) -> list[Table]:
    """The input table, the figures at the planned load, the crossovers and the fleet."""
    i, acc = plan.inputs, plan.inputs.acceptance
    t0 = Table(title="Capacity plan: inputs")
    for col in ("input", "value", "label"):
        t0.add_column(col)
    t0.add_row("strong / weak model", f"{i.strong.spec.name} on {i.strong.gpus} x {i.strong.gpu.name} / "
               f"{i.weak.spec.name} on {i.weak.gpus} x {i.weak.gpu.name}", "given")
    t0.add_row("GPU profile", f"{i.strong.gpu.hbm_bytes_per_s / 1e12:.2f} TB/s, {i.strong.gpu.peak_flops / 1e12:.0f} "
               "TFLOP/s per GPU", labels["gpu"])
    tr = i.traffic
    t0.add_row("traffic", f"{tr.sessions:g} sessions, {tr.steps_per_session:.1f} steps each, {tr.think_time_s:g} s "
               "think time per step", labels["traffic"])
    t0.add_row("acceptance", f"p {acc.p:.3f}, n {acc.mean_n:.2f} (mix " + ", ".join(
        f"{n}:{w:.2f}" for n, w in acc.blocks) + f"), rho {acc.rho:.3f}, f {acc.f:.3f}", labels["acceptance"])
    s = i.shapes
    t0.add_row("tokens per call (prompt / cached / decode)", "; ".join(
        f"{name} {c.prompt:.0f} / {c.cached:.0f} / {c.decode:.0f}" for name, c in
        (("step", s.step), ("verify", s.verify), ("repair", s.repair), ("draft", s.draft))), labels["tokens"])
    t0.add_row("coordinator shard capacity", f"{i.shard_steps_per_s:g} committed steps/s", labels["shard capacity"])
    return [t0, fleet_table(plan), _load_table(plan), _crossover_table(plan), _fleet_table(plan)]


def _load_table(plan: Plan) -> Table:
    so, sa = plan.at_load["strong"], plan.at_load[plan.inputs.method]
    i, name = plan.inputs, NAMES[plan.inputs.method]
    t = Table(title=f"On today's verifier fleet: at {i.traffic.sessions:g} sessions on {i.strong.replicas} verifier "
                    f"replica(s) (ESTIMATED; saving = Strong-only / {name}). On the verifier fleet that serves "
                    "Strong-only today, what does each method's committed step keep busy?")
    for col in ("figure", "Strong-only", name, "saving", "label"):
        t.add_column(col, justify="right" if col not in ("figure", "label") else "left")
    rows = [("committed steps / s", f"{so.steps_per_s:.1f}", f"{sa.steps_per_s:.1f}", "", "estimated"),
            ("strong batch per replica (sequences)", f"{so.batch_strong:.1f}", f"{sa.batch_strong:.1f}", "", "estimated"),
            ("drafter batch per replica / replicas", "-", f"{sa.batch_weak:.1f} / {_weak_reps(plan)}", "", "estimated"),
            ("HBM per committed step, TB, all roles", _tb(_hbm(so)), _tb(_hbm(sa)), _x(_hbm(so) / _hbm(sa)),
             "estimated"),
            ("  strong HBM per committed step, TB (strong model only)", _tb(so.cost.strong.hbm),
             _tb(sa.cost.strong.hbm), _x(plan.saving["hbm"]), "estimated"),
            ("busy GPU-s per committed step, all roles (not the fleet's price: see the headline)",
             f"{so.cost.gpu_s:.3f}", f"{sa.cost.gpu_s:.3f}", _x(plan.saving["gpu_s"]), "estimated"),
            ("step latency s (engines + queueing)", f"{so.step_latency_s:.2f}", f"{sa.step_latency_s:.2f}",
             _x(plan.saving["latency"]), "estimated"),
            ("capped by (sessions queue)", so.capped or "-", sa.capped or "-", "", "estimated"),
            ("speculation controller's K here: latency / gpu_seconds / strong_hbm / hbm", "-", _adaptive_k(plan), "",
             "estimated"),
            (("Prop. 1: R = f R_u" if i.mid is None else "chain: R = f R_chain") + f" at batch 1 (v/d {plan.v_over_d:.2f})", "1", f"{plan.r_predicted:.3f}",
             _x(1 / plan.r_predicted), "estimated"),
            (("Prop. 2: L = f L_u" if i.mid is None else "chain: L = f L_chain") + f" + (1-f) kappa at batch 1 (kappa {plan.kappa:.2f})", "1",
             f"{plan.l_predicted:.3f}", _x(1 / plan.l_predicted), "estimated")]
    for row in rows:
        t.add_row(*row)
    return t


def _hbm(op: Any) -> float:
    return op.cost.strong.hbm + op.cost.mid.hbm + op.cost.weak.hbm


def _adaptive_k(plan: Plan, k_max: int = 6) -> str:
    """The K that ``speculation.mode: adaptive`` would pick at this load, per objective, for a session past
    its exploring blocks whose estimate is the plan's acceptance (its write hazard solved from f at
    K = k_max), on the same fleet."""
    from ..control.controller import (
        OBJECTIVES,
        Controller,
        Estimate,
        Load,
        write_share_for,
    )
    from ..costs.fleet import weak_for

    i, acc = plan.inputs, plan.inputs.acceptance
    weak, tr = weak_for(i, i.traffic.sessions), i.traffic
    ks = []
    for o in OBJECTIVES:
        c = Controller(i.strong, weak, o, k_max, steps_per_session=tr.steps_per_session, think_time_s=tr.think_time_s)
        est = Estimate(acc.p, (write_share_for(acc.f, acc.p, k_max, acc.rho),), acc.rho, c.explore_blocks)
        ks.append(str(c.choose(est, Load(tr.sessions))))
    return " / ".join(ks)


def _weak_reps(plan: Plan) -> int:
    from ..costs.fleet import weak_for

    return weak_for(plan.inputs, plan.inputs.traffic.sessions).replicas


def _crossover_table(plan: Plan) -> Table:
    top, load = plan.sweep[-1].sessions, plan.inputs.traffic.sessions
    t = Table(title=f"Where the saving vanishes (ESTIMATED; sessions 1-{top:,.0f}, on today's verifier fleet of "
                    f"{plan.inputs.strong.replicas} verifier replica(s))")
    for col in ("saving", "at planned load", "lowest in range, planned load included (at sessions)", "<= 1 from",
                "above 1 again from"):
        t.add_column(col)
    for metric, name in METRIC_NAMES.items():  # the sweep's grid need not hold the planned load: add it
        low, at = min([(p.saving[metric], p.sessions) for p in plan.sweep] + [(plan.saving[metric], load)])
        first, back = plan.crossover[metric]
        t.add_row(name, _x(plan.saving[metric]), f"{_x(low)} ({at:,.0f}{', the planned load' if at == load else ''})",
                  "none within range" if first is None else f"{first:,.0f} sessions",
                  "-" if first is None else ("not within range" if back is None else f"{back:,.0f} sessions"))
    return t


def _fleet_table(plan: Plan) -> Table:
    i = plan.inputs
    t = Table(title=f"Replicas and shards of the headline's fleets, {i.traffic.sessions:g} sessions, each replica at "
                    "its target batch (ESTIMATED; shards from the measured shard capacity)")
    for col in ("figure", "Strong-only", NAMES[i.method]):
        t.add_column(col, justify="right" if col != "figure" else "left")
    so, sa = plan.sizing["strong"], plan.sizing[plan.inputs.method]
    knee = decode_knee(i.strong, i.shapes.step.prompt)
    rows = [("target batch strong / weak (strong compute knee: " + ("none" if knee is None else f"{knee:.0f}") + ")",
             f"{so.target_batch_strong:.0f} / -", f"{sa.target_batch_strong:.0f} / {sa.target_batch_weak:.0f}"),
            ("strong decode tokens / s needed (one replica gives)",
             f"{so.strong_decode_tokens_per_s:,.0f} ({so.strong_replica_tokens_per_s:,.0f})",
             f"{sa.strong_decode_tokens_per_s:,.0f}"),
            (f"verifier replicas (x {i.strong.gpus} GPUs)", str(so.strong_replicas), str(sa.strong_replicas)),
            (f"drafter replicas (x {i.weak.gpus} GPUs)", "0", str(sa.weak_replicas)),
            (f"mid verifier replicas (x {i.mid.gpus} GPUs)" if i.mid else "mid verifier replicas", "0",
             str(mid_gpus(plan) // i.mid.gpus if i.mid else 0)),
            ("coordinator shards (at least 2 for restarts, docs/serving.md)", str(so.shards), str(sa.shards))]
    for row in rows:
        t.add_row(*row)
    return t


def plan_dict(plan: Plan, labels: dict[str, str]) -> dict[str, Any]:
    """The plan as JSON-ready data; figures under ``estimated`` are the planner's."""
    i = plan.inputs
    return {"labels": {**labels, "outputs": "estimated"},
            "inputs": {"strong": {"model": i.strong.spec.name, "gpu": i.strong.gpu.model_dump(), "gpus": i.strong.gpus,
                                  "replicas": i.strong.replicas, "max_batch": i.strong.max_batch},
                       "weak": {"model": i.weak.spec.name, "gpus": i.weak.gpus},
                       "traffic": asdict(i.traffic), "acceptance": asdict(i.acceptance), "shapes": asdict(i.shapes),
                       "shard_steps_per_s": i.shard_steps_per_s},
            "estimated": {"at_load": {m: asdict(o) for m, o in plan.at_load.items()}, "saving": plan.saving,
                          "crossover": plan.crossover, "sizing": {m: asdict(s) for m, s in plan.sizing.items()},
                          "v_over_d": plan.v_over_d, "kappa": plan.kappa, "r_predicted": plan.r_predicted,
                          "l_predicted": plan.l_predicted, "sweep": [asdict(p) for p in plan.sweep]}}


def write_json(path: Path, plan: Plan, labels: dict[str, str], extra: dict[str, Any] | None = None) -> None:
    """The plan (:func:`plan_dict`) and any ``extra`` keys (``compare``: the --compare-gpu run's figures)."""
    doc = {**plan_dict(plan, labels), **(extra or {})}
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

