"""``bench batching``: the coordinator under load, on the ``sim`` profile (SIMULATED engines, real Ray
Serve, real HTTP). For each session count it deploys a fresh application, runs that many concurrent
tau2 airline sessions through the gateway, and reports verify requests per verifier batch, coordinator
overhead per committed step (p50, p99; measured) and committed steps per second (measured)."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from ...launch.client import GatewayClient
from ...launch.workload import local_cluster, run_sessions
from ...arguments import ints


def batching_run(n: int, window_ms: float, max_batch: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as log:
        args = {"session_log": log, "coordinator": {"max_sessions": max(n, 16), "queue_limit": 8 * max(n, 16),
                                                     "batch_window_ms": window_ms, "max_batch": max_batch}}
        with local_cluster("sim", args=args) as url:
            bodies = [{"tool_source": "airline", "task_id": str(i % 50), "user": "simulated", "trial": i}
                      for i in range(n)]
            start = time.perf_counter()
            results = asyncio.run(run_sessions(url, "dev-key", bodies, concurrency=n, grade=False))
            wall = time.perf_counter() - start

            async def stats() -> dict[str, Any]:
                async with GatewayClient(url, "dev-key") as client:
                    return await client.stats()
            s = asyncio.run(stats())
    verify = {int(k): v for k, v in s["batch_sizes"]["verify"].items()}
    batches = sum(verify.values())
    return {"sessions": n, "errors": sum(r.status != "done" for r in results), "wall_s": wall,
            "steps": s["committed_steps"], "steps_per_s": s["committed_steps"] / wall,
            "verify_per_batch": sum(k * v for k, v in verify.items()) / batches if batches else 0.0,
            "max_verify_batch": max(verify, default=0), "overhead_p50_ms": 1000 * (s["overhead_s"]["p50"] or 0),
            "overhead_p99_ms": 1000 * (s["overhead_s"]["p99"] or 0),
            "cpu_ms_per_step": 1000 * s["process_cpu_s"] / max(1, s["committed_steps"]),
            "intent_log_p99_ms": 1000 * (s["intent_log_wait_s"]["p99"] or 0)}


def report_batching(console: Console, sessions: tuple[int, ...], window_ms: float, max_batch: int) -> int:
    rows = []
    for n in sessions:
        console.print(f"{n} concurrent sessions (window {window_ms:g} ms, max batch {max_batch})...")
        rows.append(batching_run(n, window_ms, max_batch))
    table = Table(title=f"Coordinator under load, sim profile (SIMULATED engines; figures measured on this machine), "
                        f"window {window_ms:g} ms, max batch {max_batch}")
    for col in ("sessions", "errors", "verify req / batch", "largest batch", "overhead p50 ms", "overhead p99 ms",
                "intent log wait p99 ms", "coordinator CPU ms / step", "committed steps/s", "wall s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["sessions"]), str(r["errors"]), f"{r['verify_per_batch']:.2f}", str(r["max_verify_batch"]),
                      f"{r['overhead_p50_ms']:.2f}", f"{r['overhead_p99_ms']:.2f}", f"{r['intent_log_p99_ms']:.1f}",
                      f"{r['cpu_ms_per_step']:.2f}", f"{r['steps_per_s']:.1f}", f"{r['wall_s']:.1f}")
    console.print(table)
    console.print("overhead = a session's wall time between commits minus its time waiting on engines, tools, "
                  "the user and the session log's disk write, per committed step; goal p99 < 5 ms at 1,000 sessions. "
                  "Coordinator CPU / step = the coordinator process's CPU time (all threads) over committed steps.")
    return 1 if any(r["errors"] for r in rows) else 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("batching", help="the coordinator under load on the sim profile: verify batch sizes, "
                       "overhead per step, steps/s", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sessions", type=ints, default=(10, 100, 1000),
                   help="concurrent session counts, one fresh deployment each")
    p.add_argument("--window-ms", type=float, default=2.0, help="verify batching window")
    p.add_argument("--max-batch", type=int, default=64, help="most verify requests per batch")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    return report_batching(console, args.sessions, args.window_ms, args.max_batch)
