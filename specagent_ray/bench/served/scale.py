"""``bench scale``: the coordinator shards apart from the machine, on the ``sim`` profile (SIMULATED
engines, real Ray Serve, real HTTP), on a fresh local Ray instance or, with ``--address``, on a running
cluster such as the multi-node one ``cluster/local_multinode.py`` starts on this host.

For each shard count it deploys a fresh application and reports, from the same run: the coordinators'
idle CPU (before any session), their CPU per committed step, committed steps/s, overhead p50/p99, each
shard's share of the steps, and the load client's own CPU per step. A latency-bound run then gives the
engines GPU-like latencies and reports per-session steps/s next to the bound those latencies set: the
rate a session would reach if nothing but its engine calls took time (its steps over its engine time).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from rich.console import Console
from rich.table import Table

from ...launch.client import GatewayClient
from ...launch.workload import local_cluster, run_sessions
from ...arguments import ints

# GPU-like latencies of the gpu-tp16 profile (costs/: a 397B-A17B verify prefill of a 6-step draft and a
# 4B decode of one step on H20s), as the sim engines' latency model takes them.
GPU_LIKE = {"draft_base_s": 0.040, "draft_per_request_s": 0.0, "verify_base_s": 0.250,
            "verify_per_request_s": 0.0, "step_base_s": 0.300}
IDLE_S = 5.0


def _client(url: str, bodies: list[dict[str, Any]]) -> tuple[list[Any], float]:
    """One load client process: its sessions' results and its own CPU seconds."""
    cpu = time.process_time()
    results = asyncio.run(run_sessions(url, "dev-key", bodies, concurrency=len(bodies), grade=False))
    return results, time.process_time() - cpu


def drive(url: str, bodies: list[dict[str, Any]], processes: int) -> tuple[list[Any], float]:
    """Run every session through ``processes`` load client processes (spawned: this one holds a Ray
    connection, which a fork must not copy); returns the results and the clients' CPU seconds."""
    if processes <= 1:
        return _client(url, bodies)
    parts = [bodies[i::processes] for i in range(processes)]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = list(pool.map(_client, [url] * processes, parts))
    return [r for results, _ in done for r in results], sum(cpu for _, cpu in done)


async def _stats(url: str) -> dict[str, Any]:
    async with GatewayClient(url, "dev-key") as client:
        return await client.stats()


def per_step(idle: dict[str, Any], after: dict[str, Any], steps: int) -> dict[str, dict[str, float]]:
    """What each committed step cost the coordinators between two ``stats()``, summed over shards: CPU
    ms by part of the process (``telemetry/threads.py``), and calls in and out by method."""
    out: dict[str, dict[str, float]] = {}
    for key, scale in (("cpu_s_by_part", 1000), ("calls_in", 1), ("calls_out", 1)):
        total: dict[str, float] = {}
        for before, now in zip(idle["shards"], after["shards"]):
            was = before.get("process", {}).get(key, {})
            for name, value in now.get("process", {}).get(key, {}).items():
                total[name] = total.get(name, 0.0) + scale * (value - was.get(name, 0)) / steps
        out[key] = dict(sorted(total.items(), key=lambda kv: -kv[1]))
    return out


def scale_run(shards: int, sessions: int, latency: dict[str, float] | None = None,
              client_processes: int = 1, address: str | None = None) -> dict[str, Any]:
    """One fresh deployment with ``shards`` coordinators running ``sessions`` concurrent sessions, driven
    by ``client_processes`` load client processes, on a fresh local Ray instance or the cluster at
    ``address``."""
    with tempfile.TemporaryDirectory() as log:
        per_shard = sessions // shards + 16
        args: dict[str, Any] = {"session_log": log, "coordinators": shards,
                                "coordinator": {"max_sessions": per_shard, "queue_limit": 8 * per_shard}}
        if latency is not None:
            args["engines"] = {"kind": "sim", "latency": latency}
        # Every replica asks Ray for one CPU; logical CPUs, so that all shards get placed on any machine.
        with local_cluster("sim", args=args, num_cpus=8 + shards, address=address) as url:
            before = asyncio.run(_stats(url))
            time.sleep(IDLE_S)
            idle = asyncio.run(_stats(url))
            bodies = [{"tool_source": "airline", "task_id": str(i % 50), "user": "simulated", "trial": i}
                      for i in range(sessions)]
            wall = time.perf_counter()
            results, client_cpu = drive(url, bodies, client_processes)
            wall = time.perf_counter() - wall
            after = asyncio.run(_stats(url))
    steps = max(1, after["committed_steps"])
    shard_steps = [s["committed_steps"] for s in after["shards"]]
    return {
        "shards": shards, "sessions": sessions, "errors": sum(r.status != "done" for r in results) + sessions - len(results),
        "steps": after["committed_steps"], "wall_s": wall, "steps_per_s": after["committed_steps"] / wall,
        "idle_core_pct": 100 * (idle["process_cpu_s"] - before["process_cpu_s"]) / IDLE_S / shards,
        "cpu_ms_per_step": 1000 * (after["process_cpu_s"] - idle["process_cpu_s"]) / steps,
        "client_cpu_ms_per_step": 1000 * client_cpu / steps,
        "overhead_p50_ms": 1000 * (after["overhead_s"].get("p50") or 0),
        "overhead_p99_ms": 1000 * (after["overhead_s"].get("p99") or 0),
        "shares": [n / steps for n in shard_steps],
        "node_ids": sorted({s.get("node_id") or "?" for s in after["shards"]}),  # the Ray nodes holding shards
        "session_steps_per_s": sum(r.steps for r in results) / max(1e-9, sum(r.wall_s for r in results)),
        "bound_steps_per_s": sum(r.steps for r in results) / max(1e-9, sum(r.engine_s for r in results)),
        "per_step": per_step(idle, after, steps),
    }


def parts_table(rows: list[dict[str, Any]]) -> Table:
    """Where the coordinators' CPU went, per committed step: by part of the process, and the calls in
    (from the gateway) and out (to tool hosts and engines) that Ray handled for it."""
    table = Table(title="Coordinator CPU per step, by part", caption="measured on this machine: CPU ms of "
                  "each part's threads (/proc) and calls counted in the replica, per committed step")
    table.add_column("part")
    for r in rows:
        table.add_column(f"{r['shards']} shard(s)", justify="right")
    names = {k: None for r in rows for k in r["per_step"]["cpu_s_by_part"]}
    for name in names:
        table.add_row(f"CPU ms: {name}", *(f"{r['per_step']['cpu_s_by_part'].get(name, 0):.3f}" for r in rows))
    for key, label in (("calls_in", "calls in"), ("calls_out", "calls out")):
        for name in {k: None for r in rows for k in r["per_step"][key]}:
            table.add_row(f"{label}: {name}", *(f"{r['per_step'][key].get(name, 0):.3f}" for r in rows))
    return table


def report_scale(console: Console, shard_counts: tuple[int, ...], sessions: int, latency_sessions: int,
                 client_processes: int = 1, address: str | None = None) -> int:
    rows = []
    where = f"the Ray cluster at {address}" if address else "a fresh local Ray instance"
    if os.environ.get("RAY_SERVE_THROUGHPUT_OPTIMIZED") == "1":
        where += " with RAY_SERVE_THROUGHPUT_OPTIMIZED=1"
    for n in shard_counts:
        console.print(f"{n} coordinator shard(s), {sessions} concurrent sessions, {client_processes} client "
                      f"process(es), on {where}...")
        rows.append(scale_run(n, sessions, client_processes=client_processes, address=address))
    table = Table(title=f"Coordinator shards, sim profile, {sessions} concurrent sessions (SIMULATED engines; "
                        "figures measured on this machine)", caption=f"deployed on {where}")
    for col in ("shards", "errors", "idle % core / shard", "coordinator CPU ms / step", "vs 1 shard",
                "steps/s", "overhead p50 ms", "overhead p99 ms", "shares of steps", "nodes holding shards",
                "client CPU ms / step (all)"):
        table.add_column(col, justify="right")
    base = rows[0]["cpu_ms_per_step"] or 1e-9
    for r in rows:
        table.add_row(str(r["shards"]), str(r["errors"]), f"{r['idle_core_pct']:.1f}", f"{r['cpu_ms_per_step']:.2f}",
                      f"{r['cpu_ms_per_step'] / base:.2f}x", f"{r['steps_per_s']:.1f}", f"{r['overhead_p50_ms']:.2f}",
                      f"{r['overhead_p99_ms']:.1f}", " / ".join(f"{s:.0%}" for s in r["shares"]),
                      str(len(r["node_ids"])),
                      f"{r['client_cpu_ms_per_step']:.2f}")
    console.print(table)
    console.print(parts_table(rows))
    errors = sum(r["errors"] for r in rows)
    if latency_sessions:
        shards = max(shard_counts)
        console.print(f"latency-bound run: {shards} shard(s), {latency_sessions} sessions, GPU-like latencies...")
        r = scale_run(shards, latency_sessions, GPU_LIKE, client_processes, address)
        errors += r["errors"]
        lt = Table(title="Latency-bound run (SIMULATED engines with GPU-like latencies: draft 40 ms/step, verify "
                         "250 ms, strong step 300 ms; measured on this machine)")
        for col in ("shards", "sessions", "errors", "steps/s per session", "bound (latencies)", "ratio",
                    "overhead p99 ms", "coordinator CPU ms / step"):
            lt.add_column(col, justify="right")
        lt.add_row(str(shards), str(latency_sessions), str(r["errors"]), f"{r['session_steps_per_s']:.2f}",
                   f"{r['bound_steps_per_s']:.2f}", f"{r['session_steps_per_s'] / r['bound_steps_per_s']:.0%}",
                   f"{r['overhead_p99_ms']:.1f}", f"{r['cpu_ms_per_step']:.2f}")
        console.print(lt)
    console.print("Goals: coordinator CPU <= 1 ms/step at 1,000 sessions and <= 5 ms at 10; idle < 2 % "
                  "of a core; latency-bound steps/s >= 90 % of the bound with overhead p99 < 5 ms. CPU is the "
                  "coordinator processes' (all threads) summed over shards; on 2 cores, total steps/s cannot "
                  "grow with shards: what must hold is that CPU per step does not grow and the shares are even.")
    return 1 if errors else 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("scale", help="coordinator shards on the sim profile: CPU per step, idle CPU, shares, "
                       "and a latency-bound run", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--shards", type=ints, default=(1, 2, 4), help="coordinator shard counts, one fresh deployment each")
    p.add_argument("--sessions", type=int, default=1000, help="concurrent sessions per shard count")
    p.add_argument("--latency-sessions", type=int, default=1000,
                   help="sessions of the latency-bound run (GPU-like engine latencies; 0 skips it)")
    p.add_argument("--client-processes", type=int, default=1,
                   help="load client processes sharing the sessions, so that the client is not the bottleneck")
    p.add_argument("--address", default=None,
                   help="run on this Ray cluster instead of a fresh local instance, e.g. the multi-node one "
                        "that cluster/local_multinode.py starts (set the environment it prints first)")
    p.add_argument("--serve-throughput-optimized", action="store_true",
                   help="start the local Ray instance with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (Ray Serve's "
                        "high-throughput mode: gRPC between replicas, the router on the caller's loop)")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    if args.serve_throughput_optimized:  # read by every Ray process at start: set before ray.init
        os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"
    return report_scale(console, args.shards, args.sessions, args.latency_sessions, args.client_processes,
                        args.address)
