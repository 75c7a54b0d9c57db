"""``specagent-ray plan --check-sim``: the planner's strong HBM per committed step against sim-profile load
tests at several load levels.

1. The planner's inputs come from ``--from-bench`` files or, without them, from a fresh in-process ``bench
   tau2`` run of the same task mix (Strong-only and SpecAgent, SIMULATED policies): an independent run, so
   the planner predicts the load tests rather than fitting them.
2. The ``sim`` profile is deployed on a fresh local Ray instance, and the load generator of ``specagent-ray
   loadtest`` runs one closed-loop test per level (``--levels``, ``--duration-s`` of session starts each),
   then a few Strong-only sessions on the same (task, trial)s.
3. Each finished session's resource report (``GET /v1/sessions/{id}``) gives its strong HBM:
   SIMULATED tokens, ESTIMATED HBM, each call priced alone as the report does (batch 1). Strong HBM per
   committed step is the sum over finished sessions over the sum of their committed steps.
4. The planner's prediction for the same figure is :func:`~specagent_ray.costs.fleet.per_call_hbm`, priced
   the same way; the error is (planner - sim) / sim.

What this checks: Proposition 1's call counts over the block-length mix, the call shapes and the cost model,
against the real serving path under load (batching, retries, fallbacks, the sim's own sessions). What it
cannot check: the batch term, since the simulated engines have no weight reads to share (that needs a GPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from ..costs.fleet import PlanInputs, per_call_hbm
from .bench_inputs import BenchInputs, inputs_from_results

BOUND = 0.15  # the error the check must stay within


@dataclass(frozen=True)
class CheckRow:
    level: int
    sessions_done: int
    committed_steps: int
    steps_per_s: float
    verify_batch_mean: float | None
    sim_hbm: float  # SpecAgent, simulated tokens, estimated HBM per committed step
    sim_low: float  # its 95 % bootstrap interval over sessions (sampling noise of the task/trial mix)
    sim_high: float
    planner_hbm: float  # estimated
    baseline_sessions: int
    sim_hbm_strong: float | None  # Strong-only, same labels
    planner_hbm_strong: float

    @property
    def error(self) -> float:
        return self.planner_hbm / self.sim_hbm - 1

    @property
    def error_strong(self) -> float | None:
        return None if not self.sim_hbm_strong else self.planner_hbm_strong / self.sim_hbm_strong - 1


def bench_inputs(tasks: str, trials: int, seed: int = 0) -> BenchInputs:
    """A fresh ``bench tau2`` run (Strong-only and SpecAgent, simulated policies, one process) of the mix."""
    from ..bench.quality.runs import BenchConfig, run_bench
    from ..loadtest.workload import parse_mix
    from ..sim.gold import SimSettings

    by_source: dict[str, list[str]] = defaultdict(list)
    for source, task in parse_mix(tasks):
        by_source[source].append(task)
    results = []
    for source, ids in by_source.items():
        cfg = BenchConfig(domain=source, methods=("strong", "specagent"), trials=trials, task_ids=tuple(ids),
                          sim=SimSettings.for_domain(source, seed=seed), workers=1)
        results += run_bench(cfg)
    return inputs_from_results(results, f"bench tau2 {tasks} x {trials} trials, in-process")


async def _reports(url: str, ids: list[str]) -> list[dict[str, Any]]:
    """Each session's trajectory (committed steps and resource report), 8 requests at a time."""
    from ..launch.client import GatewayClient

    gate = asyncio.Semaphore(8)
    async with GatewayClient(url, "dev-key", timeout_s=60) as client:
        async def one(sid: str) -> dict[str, Any]:
            async with gate:
                return await client.trajectory(sid)
        return list(await asyncio.gather(*(one(s) for s in ids)))


def _per_step(trajs: list[dict[str, Any]]) -> float | None:
    steps = sum(t["committed_steps"] for t in trajs)
    hbm = sum(t["resources"]["hbm_bytes_by_role"].get("strong", 0.0) for t in trajs)
    return hbm / steps if steps else None


def bootstrap(trajs: list[dict[str, Any]], draws: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of the per-step figure, resampling sessions with replacement."""
    import random

    rng = random.Random(seed)
    pairs = [(t["resources"]["hbm_bytes_by_role"].get("strong", 0.0), t["committed_steps"]) for t in trajs]
    stats = []
    for _ in range(draws):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        steps = sum(s for _, s in sample)
        if steps:
            stats.append(sum(h for h, _ in sample) / steps)
    stats.sort()
    return stats[int(0.025 * len(stats))], stats[min(len(stats) - 1, int(0.975 * len(stats)))]


def _check_hardware(trajs: list[dict[str, Any]], inputs: PlanInputs) -> None:
    hw = trajs[0]["resources"]["hardware"] if trajs else None
    if hw and (hw["strong_model"], hw["gpu"], hw["strong_gpus"]) != (
            inputs.strong.spec.name, inputs.strong.gpu.name, inputs.strong.gpus):
        raise ValueError(f"the sim profile prices on {hw['strong_model']} x {hw['strong_gpus']} {hw['gpu']}; run "
                         "the check with the same --strong-model, --gpu and --strong-gpus")


def measure(url: str, level: int, args: argparse.Namespace, inputs: PlanInputs, baseline: int) -> CheckRow:
    """One closed-loop load test at ``level`` concurrent sessions, and its row."""
    from ..loadtest.locust_load import LocustLoad
    from ..loadtest.report import load_summary
    from ..loadtest.run import LoadConfig
    from ..loadtest.workload import Workload, parse_mix

    workload = Workload(parse_mix(args.tasks), max_steps=100)  # the bench's step guard (the server's is 30)
    cfg = LoadConfig(url=url, api_key="dev-key", workload=workload, concurrency=level,
                     sessions=100_000, duration_s=args.duration_s, drain_s=120.0,
                     ramp_s=min(5.0, args.duration_s / 10), baseline_sessions=baseline)
    result = LocustLoad(cfg).run()
    summary = load_summary(result)
    done = [r.session_id for r in result.load() if r.outcome == "done" and r.session_id]
    base = [r.session_id for r in result.baseline() if r.outcome == "done" and r.session_id]
    trajs = asyncio.run(_reports(url, done))
    base_trajs = asyncio.run(_reports(url, base))
    _check_hardware(trajs, inputs)
    sim = _per_step(trajs)
    if sim is None:
        raise ValueError(f"no session finished at {level} concurrent sessions; raise --duration-s")
    return CheckRow(level, len(done), sum(t["committed_steps"] for t in trajs), summary["steps_per_s"],
                    summary["verify_batch_sizes"]["mean"], sim, *bootstrap(trajs), per_call_hbm(inputs, "specagent"), len(base),
                    _per_step(base_trajs), per_call_hbm(inputs, "strong"))


def run_levels(args: argparse.Namespace, inputs: PlanInputs, levels: list[int], baseline: int = 10) -> list[CheckRow]:
    """Deploy the sim profile once and run one load test per level on it."""
    from ..launch.workload import local_cluster

    with tempfile.TemporaryDirectory(prefix="specagent-plan-check-") as log:
        overrides = {"session_log": log, "coordinator": {"max_sessions": max(2000, 2 * max(levels)),
                                                         "queue_limit": max(4096, 8 * max(levels))}}
        with local_cluster("sim", args=overrides) as url:
            return [measure(url, level, args, inputs, baseline) for level in levels]


def _levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise ValueError(f"--levels takes comma-separated session counts >= 1, got {text!r}")
    return levels


def run_check(args: argparse.Namespace, resolved: Any, console: Console) -> int:
    """The check: rows printed and written to ``<out>/plan-check-sim.json``; exit 0 when every SpecAgent row
    is within the bound, 1 otherwise. The planner is also set against its inputs' own bench ledgers, which
    splits the error into the model's (planner vs bench) and the sample's and serving path's (bench vs sim)."""
    from dataclasses import replace

    levels = _levels(args.levels)
    if args.from_bench:
        from .bench_inputs import from_bench

        bench = from_bench(args.from_bench)
    else:
        console.print(f"planner inputs: bench tau2 {args.tasks} x {args.trials} trials (simulated policies)...")
        bench = bench_inputs(args.tasks, args.trials)
    inputs = replace(resolved.inputs, acceptance=bench.acceptance, shapes=bench.shapes)
    source = bench.source
    own = {m: per_call_hbm(inputs, m) / bench.strong_hbm_per_step[m] - 1 for m in ("strong", "specagent")}
    console.print(f"the bench run's own ledgers (simulated tokens, estimated HBM): SpecAgent "
                  f"{bench.strong_hbm_per_step['specagent'] / 1e12:.2f} TB/step (planner {own['specagent']:+.1%}), "
                  f"Strong-only {bench.strong_hbm_per_step['strong'] / 1e12:.2f} (planner {own['strong']:+.1%})")
    console.print(f"deploying the sim profile; load tests at {', '.join(map(str, levels))} sessions, "
                  f"{args.duration_s:g} s of starts each...")
    rows = run_levels(args, inputs, levels)
    console.print(check_table(rows, source))
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"labels": {"sim": "simulated tokens, estimated HBM (per call, batch 1)", "planner": "estimated",
                      "planner inputs": source, "load": "measured over HTTP (SIMULATED engines)"},
           "tasks": args.tasks, "duration_s": args.duration_s,
           "bench_ledger_hbm_per_step": bench.strong_hbm_per_step, "planner_vs_bench_ledger": own,
           "rows": [{**asdict(r), "error": r.error, "error_strong": r.error_strong} for r in rows]}
    path = args.out / "plan-check-sim.json"
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    console.print(f"wrote {path}")
    return 0 if all(abs(r.error) <= BOUND for r in rows) else 1


def check_table(rows: list[CheckRow], source: str) -> Table:
    t = Table(title=f"Planner against sim load tests: strong HBM per committed step, TB (sim: simulated tokens, "
                    f"estimated HBM per call; planner: estimated, inputs from {source})")
    for col in ("sessions", "done", "steps", "steps/s", "verify batch", "SpecAgent sim [95% CI]", "planner", "error",
                "Strong-only sim (sessions)", "planner", "error"):
        t.add_column(col, justify="right")
    for r in rows:
        es = r.error_strong
        t.add_row(str(r.level), str(r.sessions_done), str(r.committed_steps), f"{r.steps_per_s:.1f}",
                  "-" if r.verify_batch_mean is None else f"{r.verify_batch_mean:.2f}",
                  f"{r.sim_hbm / 1e12:.2f} [{r.sim_low / 1e12:.2f}-{r.sim_high / 1e12:.2f}]",
                  f"{r.planner_hbm / 1e12:.2f}", f"{r.error:+.1%}",
                  "-" if r.sim_hbm_strong is None else f"{r.sim_hbm_strong / 1e12:.2f} ({r.baseline_sessions})",
                  f"{r.planner_hbm_strong / 1e12:.2f}", "-" if es is None else f"{es:+.1%}")
    return t
