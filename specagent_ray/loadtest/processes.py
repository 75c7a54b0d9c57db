"""One load run in several client processes, so that the load generator is not what limits the server.

``split`` cuts a run into ``n`` parts: part ``j`` takes workload sessions ``j, j + n, j + 2n, ...``, a
share of the concurrency (each stage's level), of the session cap, of the open-loop rate and of the
error budget, and its own arrival seed; only part 0 runs the baseline. Each part is an ordinary
``LoadRun`` in a spawned process (spawned, not forked: the parent may hold a Ray connection). ``merge``
puts the parts back together as one ``LoadResult`` on one time axis (the earliest part's time 0), with
the summed timeline and the clients' summed CPU time, so the report reads the same as a one-process run.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import queue as queue_mod
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from .runner import LoadConfig, LoadResult, LoadRun

COUNTS = ("in_flight", "started", "done", "steps", "errors", "shed")


def _share(total: int, parts: int, j: int) -> int:
    return total // parts + (1 if j < total % parts else 0)


def split(cfg: LoadConfig, parts: int) -> list[LoadConfig]:
    """The run as ``parts`` runs that together send what ``cfg`` sends."""
    if parts < 1:
        raise ValueError(f"client processes must be >= 1, got {parts}")
    if parts == 1:
        return [cfg]
    low = min(cfg.stages or (cfg.concurrency,))
    if low < parts:
        raise ValueError(f"{parts} client processes need a concurrency of at least {parts} in every stage, got {low}")
    out = []
    for j in range(parts):
        stages = tuple(_share(level, parts, j) for level in cfg.stages)
        if stages and list(stages) != sorted(set(stages)):
            raise ValueError(f"stages {cfg.stages} do not stay ascending over {parts} client processes")
        out.append(dataclasses.replace(
            cfg, concurrency=_share(cfg.concurrency, parts, j), stages=stages,
            sessions=max(1, _share(cfg.sessions, parts, j)), rate=cfg.rate / parts, seed=cfg.seed * parts + j,
            max_errors=max(1, math.ceil(cfg.max_errors / parts)),
            baseline_sessions=cfg.baseline_sessions if j == 0 else 0,
            index_offset=cfg.index_offset + j * cfg.index_stride, index_stride=cfg.index_stride * parts))
    return out


def _shifted(result: LoadResult, by: float) -> LoadResult:
    for r in result.records:
        r.start_s += by
        r.end_s = None if r.end_s is None else r.end_s + by
        r.commits = [(t + by, n) for t, n in r.commits]
    result.timeline = [{**snap, "t": snap["t"] + by} for snap in result.timeline]
    result.wall_s += by
    return result


def merged_timeline(timelines: Sequence[list[dict[str, float]]]) -> list[dict[str, float]]:
    """One sample a second: each part's latest counts at that time, added up."""
    end = max((snap["t"] for tl in timelines for snap in tl), default=0.0)
    out = []
    for second in range(int(end) + 1):
        snap = {"t": float(second), **{k: 0 for k in COUNTS}}
        for tl in timelines:
            seen = [s for s in tl if s["t"] <= second + 0.5]
            if seen:
                for k in COUNTS:
                    snap[k] += seen[-1].get(k, 0)
        out.append(snap)
    return out


def merge(cfg: LoadConfig, results: Sequence[LoadResult]) -> LoadResult:
    """The parts of ``split(cfg, n)`` as one run of ``cfg``."""
    t0 = min(r.started_at for r in results)
    parts = [_shifted(r, r.started_at - t0) for r in results]
    reasons = sorted({r.stopped_because for r in parts if r.stopped_because})
    first, last = min(parts, key=lambda r: r.started_at), max(parts, key=lambda r: r.wall_s)
    levels = LoadRun(cfg).levels() if cfg.mode == "closed" else []
    return LoadResult(cfg, [rec for r in parts for rec in r.records], max(r.wall_s for r in parts), "; ".join(reasons),
                      sum(r.shed for r in parts), merged_timeline([r.timeline for r in parts]), first.stats_before,
                      last.stats_after, levels, t0, sum(r.client_cpu_s or 0.0 for r in parts))


def _part(cfg: LoadConfig, j: int, ticks: Any) -> LoadResult:
    import asyncio

    return asyncio.run(LoadRun(cfg, on_tick=lambda snap: ticks.put((j, snap))).run())


def run_parts(cfg: LoadConfig, parts: int, on_tick: Callable[[dict[str, Any]], None]) -> LoadResult:
    """Run ``cfg`` in ``parts`` spawned processes; ``on_tick`` gets the summed progress about once a second.
    A part that cannot start (``LoadAborted``) raises it here."""
    configs = split(cfg, parts)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(parts, mp_context=ctx) as pool:
        ticks = manager.Queue()
        futures = [pool.submit(_part, c, j, ticks) for j, c in enumerate(configs)]
        latest: dict[int, dict[str, Any]] = {}
        while not all(f.done() for f in futures):
            try:
                j, snap = ticks.get(timeout=0.5)
            except queue_mod.Empty:
                continue
            latest[j] = snap
            on_tick({"t": max(s["t"] for s in latest.values()),
                     **{k: sum(s.get(k, 0) for s in latest.values()) for k in COUNTS}})
        return merge(cfg, [f.result() for f in futures])
