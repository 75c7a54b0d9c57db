"""Restart benchmark: a coordinator's time to ready after a long history, before and after compaction.

It serves a few SIMULATED airline sessions in process to harvest real session records, writes a log of
``finished`` finished and ``live`` live sessions made of copies of them (new ids), then starts a
coordinator on it twice, each time as a crash would leave it:
1. before compaction: every segment is read and every session restored (the log as it was written);
   this start stores the opening snapshot, which compacts the log;
2. after compaction: one snapshot of the live sessions is read.
Time to ready is measured (wall clock, this machine): lease, replay, restore of every session and the
opening snapshot. The previous holder hands the lease back before each start, so no lease wait is in the
figure; a successor of a crashed holder waits up to one more lease period (``lease_s``).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ...serve.core.api import CreateSession
from ...serve.core.config import AppConfig, CoordinatorConfig, LatencyModel, SimEngines
from ...serve.log.session_log import SessionLog
from ...serve.sessions.session import FINISHED
from ...storage.local import LocalStore

FAST = LatencyModel(draft_base_s=0, draft_per_request_s=0, verify_base_s=0, verify_per_request_s=0, step_base_s=0)
# Engines that never answer within the measurement: resumed sessions stay live, so both starts see the same log.
STILL = LatencyModel(draft_base_s=3600, verify_base_s=3600, step_base_s=3600)
SESSIONS_PER_SEGMENT = 50


def _config(retain: int, latency: LatencyModel = FAST) -> AppConfig:
    return AppConfig(engines=SimEngines(latency=latency),
                     coordinator=CoordinatorConfig(lease_s=5.0, retain_finished=retain, compact_min=10**12),
                     tool_sources={"airline": {"kind": "tau2", "domain": "airline"}})


def _coordinator(cfg: AppConfig, store: Any):
    from ...serve.core.handles import Local
    from ...serve.engines.engine_client import SimEngineClient
    from ...serve.engines.sim_engine import SimEngine
    from ...serve.sessions.coordinator import Coordinator
    from ...serve.toolhost.tool_host import ToolHost

    engines = SimEngineClient(Local(SimEngine("drafter", cfg.engines)), Local(SimEngine("verifier", cfg.engines)),
                              cfg.engines, cfg.coordinator)
    return Coordinator(cfg, engines, Local(ToolHost(cfg.tool_sources, store)), store)


async def _harvest(root: Path, n: int = 6) -> list[list[dict[str, Any]]]:
    """Record lists of ``n`` real simulated sessions, each ending in ``final``."""
    store = LocalStore(root / "harvest")
    coord = _coordinator(_config(100), store)
    await coord.start()
    sids = [(await coord.create(CreateSession(tool_source="airline", task_id=str(i), user="simulated")))["session_id"]
            for i in range(n)]
    while any(coord.sessions[s].status not in FINISHED for s in sids):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    await coord.log.durable()
    await coord.log.close()
    records = coord.log.replay().sessions
    return [records[s] for s in sids]


async def _write_history(store: LocalStore, samples: list[list[dict]], finished: int, live: int,
                         progress: Progress) -> int:
    log = SessionLog(store, compact_min=10**12)
    await log.open()
    job = progress.add_task("writing the history", total=finished + live)
    written = 0
    for i in range(finished + live):
        records = samples[i % len(samples)]
        if i >= finished:  # live: cut before the end, as a crash would find it
            records = [r for r in records[: len(records) // 2] if r["t"] != "final"]
        sid = secrets.token_hex(8)
        for r in records:
            log.append(sid, r)
        written += len(records)
        if (i + 1) % SESSIONS_PER_SEGMENT == 0:
            await log.durable()
        progress.advance(job)
    await log.durable()
    await log.close()
    return written


async def _time_to_ready(store: LocalStore, retain: int) -> dict[str, Any]:
    coord = _coordinator(_config(retain, STILL), store)
    keys_before = len(store.list("log/")) + len(store.list("snap/"))
    start = time.perf_counter()
    await coord.start()
    ready = time.perf_counter() - start
    stats = coord.stats()
    # Stop as a crash would (nothing more is written), then hand the lease back for the next start.
    coord.log.store = None  # type: ignore[assignment]
    for task in (coord.commits.flusher, coord.log._renewer, *(s.runner for s in coord.sessions.values())):
        if task is not None:
            task.cancel()
    await asyncio.sleep(0.05)
    coord.log.lease.release()
    return {"ready_s": ready, "keys": keys_before, "running": stats["sessions"]["running"],
            "restored": stats["in_memory"], "resumed": stats["resumed"]}


async def measure_restart(finished: int, live: int, root: Path, console: Console) -> dict[str, Any]:
    with Progress(console=console, transient=True) as progress:
        samples = await _harvest(root)
        store = LocalStore(root / "log")
        records = await _write_history(store, samples, finished, live, progress)
    before = await _time_to_ready(store, retain=finished + live)
    after = await _time_to_ready(store, retain=finished + live)
    return {"records": records, "before": before, "after": after}


def report_restart(console: Console, finished: int, live: int, root: str | None) -> int:
    import logging

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # crashed coordinators leave batcher tasks behind
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        out = asyncio.run(measure_restart(finished, live, Path(tmp), console))
    before, after = out["before"], out["after"]
    t = Table(title=f"Coordinator restart after {finished:,} finished and {live:,} live sessions "
                    f"({out['records']:,} records; measured on this machine, local store, simulated sessions)")
    for col in ("log", "log objects", "sessions restored", "live resumed", "time to ready", "vs before", "goal"):
        t.add_column(col, justify="right")
    for name, row, goal in (("before compaction", before, ""), ("after compaction", after, "< 2 s")):
        t.add_row(name, f"{row['keys']:,}", f"{row['restored']:,}", f"{row['resumed']:,}", f"{row['ready_s']:.2f} s",
                  f"{row['ready_s'] / before['ready_s']:.3f}x", goal)
    console.print(t)
    console.print("Finished sessions are archived (archive/ in the store) by the first start, which compacts the "
                  "log; a successor of a crashed holder also waits out its lease (lease_s, 5 s by default).")
    return 0 if after["running"] == live and before["running"] == live else 1


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("restart", help="a coordinator's time to ready after a long history, before and after "
                       "log compaction", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--finished", type=int, default=10_000, help="finished sessions in the log's history")
    p.add_argument("--live", type=int, default=100, help="live sessions a restart must resume")
    p.add_argument("--dir", default=None, help="where the temporary log is written (default: the system temp dir)")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    return report_restart(console, args.finished, args.live, args.dir)
