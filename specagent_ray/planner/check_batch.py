"""``specagent-ray plan --check-batch``: the planner's batch term against the served sim profile whose engines
batch like GPUs (``latency.model: roofline``).

1. The planner's inputs (acceptance, call shapes) come from a fresh in-process ``bench tau2`` run of the task
   mix, as ``--check-sim``'s do: the planner predicts the load tests rather than fitting them.
2. The sim profile is deployed with one drafter and one verifier replica whose calls take the cost model's
   time at their replica's batch, times ``--time-scale`` (ESTIMATED seconds slowed or sped up so that the
   coordinator, not this machine's CPU, is never the bottleneck). One closed-loop load test per level.
3. In a window after the ramp, the replicas' meters give each engine's mean batch (sequences in flight
   integrated over time, over the window), and ``/v1/stats`` the committed steps per second.
4. The planner's batch term predicts each engine's batch from that step rate and the engine's measured
   calls per committed step: the batch ``B`` with ``B = X * S(B)``, where ``S(B)`` is the engine's time per
   committed step at batch ``B`` (Little's law, ``planner.operate``'s inner equation, at most the batch
   cap) and ``X`` the measured rate in estimated seconds. The error is (planner - sim) / sim; the bound is
   15 %. The calls per step are measured because their prediction is ``--check-sim``'s subject; the JSON
   keeps the batch the planner predicts with its own calls too.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from ..costs.fleet import PlanInputs
from ..costs.planner import calls_per_step, role_cost

BOUND = 0.15


@dataclass(frozen=True)
class BatchRow:
    level: int
    steps_per_s: float  # measured (real seconds)
    sim_strong: float  # mean sequences in flight at the verifier replica, measured over the window
    sim_weak: float
    planner_strong: float  # estimated from the measured step rate
    planner_weak: float
    detail: dict[str, dict[str, float]]  # per role: calls per committed step and mean call time, sim and planner

    def error(self, role: str) -> float:
        sim, plan = (self.sim_strong, self.planner_strong) if role == "strong" else (self.sim_weak, self.planner_weak)
        return plan / sim - 1 if sim > 0 else float("inf")


def predicted_batch(inputs: PlanInputs, role: str, x: float, calls: float | None = None) -> float:
    """The batch that ``x`` committed steps/s (estimated seconds) keep in one replica of ``role``, at most
    its batch cap; ``calls``: the role's calls per committed step, where measured (the planner's split
    between kinds of call kept), else the planner's."""
    engine = inputs.strong if role == "strong" else inputs.weak
    lo, hi = 0.0, float(engine.batch_cap(inputs.shapes.max_context))
    planned = sum(k for k, _ in calls_per_step("specagent", inputs.acceptance, inputs.shapes)[role])
    scale = calls / planned if calls is not None and planned else 1.0
    time_in = lambda b: scale * role_cost("specagent", role, inputs.acceptance, inputs.shapes, engine, b).latency_s
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if x * time_in(mid) - mid >= 0 else (lo, mid)
    return (lo + hi) / 2


def _snapshot(url: str) -> dict[str, Any]:
    from ray import serve

    stats = httpx.get(f"{url}/v1/stats", headers={"Authorization": "Bearer dev-key"}, timeout=30).json()
    meters = {role: serve.get_deployment_handle(name, app_name="specagent").meters.remote().result()
              for role, name in (("strong", "SimVerifier"), ("weak", "SimDrafter"))}
    return {"steps": stats["committed_steps"], "meters": meters, "at": time.monotonic()}


def measure(url: str, level: int, args: argparse.Namespace, inputs: PlanInputs) -> BatchRow:
    """One closed-loop load test at ``level`` sessions; the window is its second half of session starts."""
    from ..loadtest.locust_load import LocustLoad
    from ..loadtest.run import LoadConfig
    from ..loadtest.workload import Workload, parse_mix

    cfg = LoadConfig(url=url, api_key="dev-key", workload=Workload(parse_mix(args.tasks), max_steps=100),
                     concurrency=level, sessions=100_000, duration_s=args.duration_s, drain_s=5.0,
                     ramp_s=min(5.0, args.duration_s / 10), baseline_sessions=0)
    shots: list[dict[str, Any]] = []

    def sample() -> None:
        time.sleep(args.duration_s / 2)
        shots.append(_snapshot(url))
        time.sleep(args.duration_s / 2 - 1)
        shots.append(_snapshot(url))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    LocustLoad(cfg).run()
    sampler.join()
    a, b = shots
    dt = b["at"] - a["at"]
    batch = {r: (b["meters"][r]["seq_s"] - a["meters"][r]["seq_s"]) / dt for r in ("strong", "weak")}
    x = (b["steps"] - a["steps"]) / dt
    est_x = x * args.time_scale  # committed steps per estimated second
    steps = b["steps"] - a["steps"]
    d = {r: {k: b["meters"][r][k] - a["meters"][r][k] for k in ("calls", "batch_sum", "seq_s")} for r in ("strong", "weak")}
    measured_calls = {r: d[r]["calls"] / max(1, steps) for r in d}
    predicted = {r: predicted_batch(inputs, r, est_x, measured_calls[r]) for r in ("strong", "weak")}
    detail = {}
    for role in ("strong", "weak"):
        calls = calls_per_step("specagent", inputs.acceptance, inputs.shapes)[role]
        detail[role] = {"sim_calls_per_step": measured_calls[role], "planner_calls_per_step": sum(k for k, _ in calls),
                        "planner_batch_at_its_own_calls": predicted_batch(inputs, role, est_x),
                        "sim_entry_batch": d[role]["batch_sum"] / max(1, d[role]["calls"]),
                        # time in the engine per committed step: sequence-seconds per step, in estimated seconds
                        "sim_time_per_step_s": d[role]["seq_s"] / max(1, steps) / args.time_scale}
    return BatchRow(level, x, batch["strong"], batch["weak"], predicted["strong"], predicted["weak"], detail)


def run_check(args: argparse.Namespace, resolved: Any, console: Console) -> int:
    """Rows printed and written to ``<out>/plan-check-batch.json``; exit 0 when every row is within the bound."""
    from dataclasses import replace

    from ..launch.workload import local_cluster
    from .check_sim import _levels, bench_inputs

    levels = _levels(args.levels)
    console.print(f"planner inputs: bench tau2 {args.tasks} x {args.trials} trials (simulated policies)...")
    bench = bench_inputs(args.tasks, args.trials)
    base = resolved.inputs
    from ..serve.engines.sim_roofline import max_context

    inputs = replace(base, acceptance=bench.acceptance, shapes=replace(bench.shapes, max_context=max_context()),
                     strong=replace(base.strong, replicas=1), weak=replace(base.weak, replicas=1))
    overrides = {"engines": {"drafter_replicas": 1, "verifier_replicas": 1,
                             "latency": {"model": "roofline", "time_scale": args.time_scale}},
                 "coordinator": {"max_sessions": 2000, "verify_timeout_s": 600}}
    console.print(f"deploying the sim profile with roofline engines (time scale {args.time_scale:g}); load tests at "
                  f"{', '.join(map(str, levels))} sessions, {args.duration_s:g} s each...")
    with tempfile.TemporaryDirectory(prefix="specagent-plan-batch-") as log:
        with local_cluster("sim", args={**overrides, "session_log": log}) as url:
            rows = [measure(url, level, args, inputs) for level in levels]
    console.print(batch_table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"labels": {"sim": "measured over HTTP (SIMULATED policies, roofline engine times ESTIMATED)",
                      "planner": "estimated from the measured step rate"}, "time_scale": args.time_scale,
           "rows": [{**asdict(r), "error_strong": r.error("strong"), "error_weak": r.error("weak")} for r in rows]}
    path = args.out / "plan-check-batch.json"
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    console.print(f"wrote {path}")
    return 0 if all(abs(r.error(role)) <= BOUND for r in rows for role in ("strong", "weak")) else 1


def batch_table(rows: list[BatchRow]) -> Table:
    t = Table(title="The planner's batch term against the served sim with roofline engines: mean sequences in "
                    "flight per replica (sim: measured; planner: estimated from the measured step rate)")
    for col in ("sessions", "steps/s", "verifier: sim", "planner", "error", "drafter: sim", "planner", "error"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r.level), f"{r.steps_per_s:.1f}", f"{r.sim_strong:.2f}", f"{r.planner_strong:.2f}",
                  f"{r.error('strong'):+.1%}", f"{r.sim_weak:.2f}", f"{r.planner_weak:.2f}", f"{r.error('weak'):+.1%}")
    return t
