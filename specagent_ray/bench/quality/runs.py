"""``specagent-ray bench tau2`` (and ``bench bfcl``): every method on the same tasks, graded by the
benchmark's own evaluator: tau2's for a tau2 domain, BFCL's multi-turn checker for a BFCL category
(the domain ``bfcl-<category>``, see bench/quality/bfcl_parts.py).

Runs are spread over worker processes (one per core by default); each worker loads the domain once
and runs all methods of one (task, trial) pair, so identical trajectories are graded once.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

from ...costs.hardware import Hardware
from ...protocol.baselines import METHODS
from ...protocol.runtime import Parts, SpecConfig
from ...protocol.types import Task, ToolCall, Trajectory
from ...results.trial import (
    TrialResult,
    block_stats,
    paper_layout_strong_flops,
    repair_cache,
    role_usage,
)
from ...sim.gold import mid_judge
from ...tasks import BfclBenchmark, benchmark
from ...telemetry.resources import report_from_ledger
from ...tools.tau2 import Tau2Tools
from ...tools.tiers import Tiered
from .tau2_parts import SimSettings, simulated_parts
from .variants import VARIANTS, Variant, critical_writes, variant_of

HIDDEN = {"specactions": frozenset({"speculate"})}


@dataclass(frozen=True)
class BenchConfig:
    domain: str = "airline"
    methods: tuple[str, ...] = ("strong", "weak", "specagent", "agentcollab", "specactions")
    trials: int = 3
    task_ids: tuple[str, ...] | None = None
    spec: SpecConfig = SpecConfig()
    sim: SimSettings = field(default_factory=SimSettings)
    hardware: Hardware = Hardware()
    workers: int = 2

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS and m not in VARIANTS]
        if unknown:
            raise ValueError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join([*METHODS, *VARIANTS])}")
        if any(variant_of(m).chain for m in self.methods) and self.hardware.mid_model is None:
            raise ValueError("a chain variant needs a mid model to price (Hardware.mid_model)")
        if self.trials < 1:
            raise ValueError(f"trials must be >= 1, got {self.trials}")


def _world(cfg: BenchConfig, task_id: str, trial: int, variant: Variant = Variant("specagent")
           ) -> tuple[Task, Parts, Callable[[Trajectory], float]]:
    """A task, fresh simulated parts and its grader: a tau2 domain, or a BFCL category (``bfcl-base``), with
    the variant's mechanisms (tier table on the tools, a mid verifier) in place."""
    bench = benchmark(cfg.domain)
    sim = variant.sim(cfg.sim)
    if isinstance(bench, BfclBenchmark):
        from .bfcl_parts import bfcl_parts

        if variant != Variant(variant.method):
            raise ValueError(f"{cfg.domain}: the beyond-the-paper variants run on tau2 domains only")
        task, parts = bfcl_parts(cfg.domain, task_id, trial, sim)
    else:
        tools = Tau2Tools(bench.domain, task=bench.domain.tasks[task_id])
        tiered = Tiered(tools, bench.domain.tiers()) if variant.tiers else None
        task, parts = simulated_parts(bench.domain, task_id, trial, sim, tiered or tools)
        if variant.chain:
            parts.mid = mid_judge(parts.verifier, sim.weak)  # type: ignore[arg-type]
    return task, parts, lambda t: bench.grade(task, t)


def _critical(cfg: BenchConfig, task_id: str, trajectory: Trajectory) -> dict[str, int]:
    """The trajectory's critical writes and wrong ones, by the tau2 domain's table (none for BFCL)."""
    bench = benchmark(cfg.domain)
    if isinstance(bench, BfclBenchmark):
        return {}
    domain = bench.domain
    gold = {ToolCall(a.name, dict(a.arguments)).key()
            for a in domain.tasks[task_id].evaluation_criteria.actions or [] if a.requestor == "assistant"}
    done, wrong = critical_writes(trajectory, domain.tiers().tier, gold)
    return {"critical_writes": done, "wrong_critical_writes": wrong}


async def run_trial(cfg: BenchConfig, method: str, task_id: str, trial: int) -> TrialResult:
    variant = variant_of(method)
    task, parts, grade = _world(cfg, task_id, trial, variant)
    start = time.perf_counter()
    trajectory = await METHODS[variant.method](task, parts, variant.spec(cfg.spec))
    wall = time.perf_counter() - start
    hidden = HIDDEN.get(variant.method, frozenset())
    deployments = cfg.hardware.deployments()
    strong, weak = deployments["strong"], deployments["weak"]
    strong_used = role_usage(parts.ledger, "strong", strong.spec, strong.gpu, strong.n_gpus)
    weak_used = role_usage(parts.ledger, "weak", weak.spec, weak.gpu, weak.n_gpus, hidden)
    mid = deployments.get("mid")
    mid_used = role_usage(parts.ledger, "mid", mid.spec, mid.gpu, mid.n_gpus) if mid and variant.chain else None
    return TrialResult(
        method=method, task_id=task_id, trial=trial,
        reward=grade(trajectory),
        termination=trajectory.termination.value, committed_steps=len(trajectory.steps), wall_s=wall,
        strong=strong_used, weak=weak_used,
        blocks=block_stats(trajectory), resources=report_from_ledger(parts.ledger, deployments),
        **repair_cache(parts.ledger),
        flops_paper_layout=weak_used.flops + paper_layout_strong_flops(parts.ledger, strong),
        mid=mid_used, **_critical(cfg, task_id, trajectory),
    )


def _run_pair(cfg: BenchConfig, task_id: str, trial: int) -> list[TrialResult]:
    async def all_methods() -> list[TrialResult]:
        return [await run_trial(cfg, m, task_id, trial) for m in cfg.methods]

    return asyncio.run(all_methods())


def task_ids(cfg: BenchConfig) -> list[str]:
    """The tasks asked for, or the benchmark's set (tau2's base split: all of airline and retail,
    telecom's 114; every case of a BFCL category)."""
    bench = benchmark(cfg.domain)
    if cfg.task_ids is None:
        return list(bench.task_ids())
    missing = [t for t in cfg.task_ids if not bench.knows(t)]
    if missing:
        raise ValueError(f"{cfg.domain} has no task(s) {', '.join(missing)}")
    return list(cfg.task_ids)


def run_bench(cfg: BenchConfig, on_done: Callable[[int], None] = lambda n: None) -> list[TrialResult]:
    """All (method, task, trial) runs, in a stable order. ``on_done`` is told how many runs finished."""
    pairs = [(t, k) for k in range(cfg.trials) for t in task_ids(cfg)]
    results: list[TrialResult] = []
    if cfg.workers <= 1:
        for t, k in pairs:
            results += _run_pair(cfg, t, k)
            on_done(len(cfg.methods))
    else:
        with ProcessPoolExecutor(cfg.workers) as pool:
            futures = [pool.submit(_run_pair, cfg, t, k) for t, k in pairs]
            for f in as_completed(futures):
                results += f.result()
                on_done(len(cfg.methods))
    order = {m: i for i, m in enumerate(cfg.methods)}
    return sorted(results, key=lambda r: (order[r.method], r.trial, _natural(r.task_id)))


def _natural(task_id: str) -> tuple[int, str]:
    return (int(task_id), "") if task_id.isdigit() else (1 << 30, task_id)
