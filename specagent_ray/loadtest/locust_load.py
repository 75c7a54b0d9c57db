"""A bounded load run on Locust against one gateway: preflight, the load phase, the Strong-only baseline.

``LocustLoad(cfg, processes).run()`` checks the gateway (an unreachable URL or a refused key raises
``LoadAborted`` before anything is sent), reads ``/v1/stats``, runs the load phase as one Locust run
(``locust_run.py``; ``processes`` > 1: Locust's distributed mode), reads ``/v1/stats`` again, then runs
``baseline_sessions`` Strong-only sessions on the (task, trial)s of the first sessions that finished,
as a second Locust run. The result's records are in seconds since the load phase started.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ..launch.client import gateway_error
from .locust_run import (
    cancel_unfinished,
    clock_start,
    locust_command,
    read_records,
    read_stats,
    run_locust,
    stopped_because,
)
from .run import LoadAborted, LoadConfig, LoadResult


class LocustLoad:
    """One run of ``cfg`` in ``processes`` Locust client processes; ``on_tick`` gets progress each second."""

    def __init__(self, cfg: LoadConfig, processes: int = 1,
                 on_tick: Callable[[dict[str, Any]], None] = lambda snap: None, keep: Path | None = None):
        if processes < 1:
            raise ValueError(f"client processes must be >= 1, got {processes}")
        low = min(cfg.stages or (cfg.concurrency,))
        if low < processes:
            raise ValueError(f"{processes} client processes need a concurrency of at least {processes} in every "
                             f"stage, got {low}")
        self.cfg, self.processes, self.on_tick, self.keep = cfg, processes, on_tick, keep

    def options(self, phase: str, method: str) -> dict[str, Any]:
        cfg = self.cfg
        stages = cfg.stages or (cfg.concurrency,)
        return {"tasks": ",".join(f"{s}:{t}" for s, t in cfg.workload.mix),
                "workload": json.dumps({**cfg.workload.options(), "method": method, "phase": phase}),
                "mode": cfg.mode if phase == "load" else "closed", "stages": ",".join(map(str, stages)),
                "rate": cfg.rate, "ramp_s": cfg.ramp_s, "duration_s": cfg.duration_s, "sessions": cfg.sessions,
                "max_errors": cfg.max_errors, "seed": cfg.seed, "timeout_s": cfg.request_timeout_s}

    def run(self) -> LoadResult:
        cfg = self.cfg
        before = preflight(cfg.url, cfg.api_key)
        with tempfile.TemporaryDirectory(prefix="specagent-locust-") as tmp:
            root = self.keep or Path(tmp)
            load = root / "load"
            started_at = time.time()
            cmd = locust_command(cfg.url, load, self.options("load", cfg.workload.method), self.processes, cfg.drain_s)
            code, cpu = run_locust(cmd, load, cfg.duration_s + cfg.drain_s, cfg.api_key, self.on_tick)
            records, stats = read_records(load), read_stats(load)
            started_at = clock_start(load, started_at)
            cancel_unfinished(cfg.url, cfg.api_key, records)
            after = stats_or_none(cfg.url, cfg.api_key)
            reason = stopped_because(load, code)
            if cfg.baseline_sessions and not reason.startswith("stopped early"):
                records += self._baseline(root / "baseline", records)
        records = [r.shifted(started_at) for r in records]
        wall = max((r.end_s or 0.0 for r in records if r.phase == "load"), default=0.0)
        levels = _levels(cfg) if cfg.mode == "closed" else []
        return LoadResult(cfg, records, wall, reason, stats.count("ARRIVAL", "shed"), _timeline(records),
                          before, after, levels, started_at, cpu, stats)

    def _baseline(self, folder: Path, records: list) -> list:
        """Strong-only (``baseline_method``) on the (task, trial)s of the first load sessions that finished."""
        cfg = self.cfg
        done = sorted((r for r in records if r.phase == "load" and r.outcome == "done"), key=lambda r: r.index)
        picked = [r.index for r in done[: cfg.baseline_sessions]]
        if not picked:
            return []
        options = {**self.options("baseline", cfg.baseline_method), "indices": ",".join(map(str, picked)),
                   "stages": str(min(cfg.concurrency, len(picked))), "ramp_s": 0,
                   "duration_s": max(cfg.drain_s, cfg.duration_s)}
        cmd = locust_command(cfg.url, folder, options, 1, cfg.drain_s)
        run_locust(cmd, folder, 2 * max(cfg.drain_s, cfg.duration_s), cfg.api_key)
        base = read_records(folder)
        cancel_unfinished(cfg.url, cfg.api_key, base)
        return base


def preflight(url: str, api_key: str) -> dict[str, Any]:
    """The gateway's ``/v1/stats`` (``{}`` for a tenant's key), or ``LoadAborted`` with one line."""
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=10) as http:
            health = http.get("/healthz")
            if health.status_code != 200:
                raise LoadAborted(f"{url}/healthz answered HTTP {health.status_code}; is this a specagent-ray gateway?")
            stats = http.get("/v1/stats")
    except httpx.ConnectError as exc:
        raise LoadAborted(f"cannot reach {url}: {exc or 'connection refused'}") from None
    except httpx.TimeoutException:
        raise LoadAborted(f"{url} did not answer within 10 s") from None
    except httpx.HTTPError as exc:
        raise LoadAborted(f"cannot talk to {url}: {type(exc).__name__}: {exc}") from None
    if stats.status_code == 401:
        raise LoadAborted(f"the gateway at {url} refused the API key (HTTP 401): {gateway_error(stats).detail}")
    if stats.status_code == 403:  # a tenant's key, not an operator's: the run goes on without the server's stats
        return {}
    if stats.status_code != 200:
        raise LoadAborted(f"{url}/v1/stats answered HTTP {stats.status_code}: {gateway_error(stats).detail}")
    return stats.json()


def stats_or_none(url: str, api_key: str) -> dict[str, Any] | None:
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=10) as http:
            r = http.get("/v1/stats")
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _levels(cfg: LoadConfig) -> list[tuple[float, float, int]]:
    """The closed loop's stages: (from s, to s, concurrency); one stage without ``stages``."""
    stages = cfg.stages or (cfg.concurrency,)
    share = cfg.duration_s / len(stages)
    return [(i * share, (i + 1) * share, c) for i, c in enumerate(stages)]


def _timeline(records: list) -> list[dict[str, float]]:
    """One sample a second of the load phase, from the session records: in flight, started, done, steps,
    errors (each a count of sorted times up to the sample)."""
    load = [r for r in records if r.phase == "load"]
    end = max((r.end_s or r.start_s for r in load), default=0.0)
    starts = sorted(r.start_s for r in load)
    ends = sorted(r.end_s for r in load if r.end_s is not None)
    done = sorted(r.end_s for r in load if r.outcome == "done" and r.end_s is not None)
    failed = sorted(r.end_s for r in load if r.error_kind is not None and r.end_s is not None)
    commits = sorted((t, n) for r in load for t, n in r.commits)
    steps = list(itertools.accumulate(n for _, n in commits))
    upto = lambda times, t: bisect.bisect_right(times, t)  # noqa: E731
    out = []
    for second in range(math.ceil(end) + 1):  # the last sample after every session's end
        t = float(second)
        k = bisect.bisect_right(commits, (t, math.inf))
        out.append({"t": t, "in_flight": upto(starts, t) - upto(ends, t), "started": upto(starts, t),
                    "done": upto(done, t), "steps": steps[k - 1] if k else 0, "errors": upto(failed, t), "shed": 0})
    return out
