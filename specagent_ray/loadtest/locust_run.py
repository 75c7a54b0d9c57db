"""One load run on Locust: its command, its run in a child process, and what it leaves behind.

Locust runs headless in a child process (it patches the standard library with gevent, which must not
happen to a process that holds a Ray connection), on ``locustfile.py``, with ``--processes N`` for N
client processes (Locust's distributed mode: a master and N workers on this machine). Its statistics
come back as ``--json-file`` (every entry with its response-time histogram) and the locustfile's
``failures.json``; each process's session records come back as JSON lines. A session
still running when Locust's drain (``--stop-timeout``) ended is cancelled on the server afterwards.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .records import SessionRecord

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
ERROR = re.compile(r"""LoadError\(['"]([a-z][a-z0-9_]*): (.*)['"]\)$""", re.S)


@dataclass
class LocustStats:
    """Locust's statistics of one run: entries by (type, name), and failures."""

    entries: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)  # type, name, kind, message, occurrences

    def times_s(self, kind: str, name: str | None = None) -> list[float]:
        """Every recorded response time of the entries of ``kind`` (and ``name``), seconds (Locust keeps
        them rounded: to 1 ms below 100 ms, to 2 significant digits above)."""
        out: list[float] = []
        for (k, n), e in self.entries.items():
            if k == kind and (name is None or n == name):
                for ms, count in e.get("response_times", {}).items():
                    out.extend([float(ms) / 1000] * count)
        return out

    def count(self, kind: str, name: str | None = None) -> int:
        return sum(e["num_requests"] for (k, n), e in self.entries.items() if k == kind and (name is None or n == name))


def locust_command(url: str, folder: Path, options: dict[str, Any], processes: int, stop_timeout_s: float) -> list[str]:
    """The headless Locust command line of a run (``options``: the locustfile's ``--sa-*`` flags)."""
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", url, "--only-summary",
           "--loglevel", "WARNING", "--stop-timeout", str(max(1, math.ceil(stop_timeout_s))),  # whole seconds
           "--json-file", str(folder / "stats"),  # Locust adds .json
           "--sa-records", str(folder), "--sa-workers", str(processes)]
    if processes > 1:
        cmd += ["--processes", str(processes)]
    for name, value in options.items():
        cmd += [f"--sa-{name.replace('_', '-')}", str(value)]
    return cmd


def run_locust(cmd: list[str], folder: Path, bound_s: float, api_key: str,
               on_tick: Callable[[dict[str, Any]], None] = lambda snap: None) -> tuple[int, float]:
    """Run Locust until it exits (killed past ``bound_s`` plus a margin); ``on_tick`` gets the sessions
    ended so far once a second. Returns its exit status and the CPU seconds of its processes."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPECAGENT_LOADTEST_KEY": api_key}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begun, progress = time.monotonic(), _Progress(folder)
    with open(folder / "locust.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        while proc.poll() is None:
            if time.monotonic() - begun > bound_s + 60:
                proc.kill()
                break
            time.sleep(1.0)
            on_tick({"t": time.monotonic() - begun, **progress.read()})
        proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc.returncode, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class _Progress:
    """Sessions ended and failed so far, from the records files; each read takes only the lines added
    since the last one (a long run's files are not read again every second)."""

    def __init__(self, folder: Path):
        self.folder, self.offsets = folder, {}
        self.ended = self.errors = 0

    def read(self) -> dict[str, int]:
        for path in self.folder.glob("records-*.jsonl"):
            with path.open("rb") as f:
                f.seek(self.offsets.get(path, 0))
                chunk = f.read()
            whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next read
            self.offsets[path] = self.offsets.get(path, 0) + len(whole)
            for line in whole.splitlines():
                self.ended += 1
                self.errors += b'"error_kind": null' not in line
        return {"ended": self.ended, "errors": self.errors}


def read_records(folder: Path) -> list[SessionRecord]:
    out = []
    for path in sorted(folder.glob("records-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(SessionRecord.from_json(json.loads(line)))
    return sorted(out, key=lambda r: (r.phase, r.index))


def read_stats(folder: Path) -> LocustStats:
    """Locust's statistics files of a run in ``folder``."""
    stats = LocustStats()
    path = folder / "stats.json"
    for e in json.loads(path.read_text()) if path.exists() else []:
        stats.entries[(e["method"] or "", e["name"])] = e
    failures = folder / "failures.json"
    for row in json.loads(failures.read_text()) if failures.exists() else []:
        m = ERROR.match(row["error"])
        kind, message = (m.group(1), m.group(2)) if m else ("locust", row["error"])
        stats.failures.append({"type": row["method"], "name": row["name"], "kind": kind, "message": message,
                               "occurrences": int(row["occurrences"])})
    return stats


class LocustFailed(RuntimeError):
    """Locust exited without running (bad arguments, a broken install): the end of its log says why."""


def stopped_because(folder: Path, returncode: int) -> str:
    """Why the run stopped (the locustfile's ``run.json``); ``LocustFailed`` if Locust never ran it."""
    log = folder / "locust.log"
    if not (folder / "run.json").exists() and returncode not in (0, 1):
        tail = log.read_text().strip().splitlines()[-5:] if log.exists() else []
        raise LocustFailed(f"locust exited {returncode} without running: " + " | ".join(tail))
    path = folder / "run.json"
    reason = json.loads(path.read_text())["stopped_because"] if path.exists() else "locust did not report"
    if returncode not in (0, 1):  # 1: Locust saw failures, which the report counts itself
        reason += f" (locust exited {returncode}; its log: {folder / 'locust.log'})"
    return reason


def cancel_unfinished(url: str, api_key: str, records: list[SessionRecord]) -> None:
    """Best effort, bounded: the server stops sessions that nobody follows any more."""
    ids = [r.session_id for r in records if r.outcome == "unfinished" and r.session_id]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=10) as http:
        for sid in ids:
            try:
                http.delete(f"/v1/sessions/{sid}")
            except httpx.HTTPError:
                pass


def clock_start(folder: Path, default: float) -> float:
    """When the run's clock started (the locustfile's ``run.json``): its stages and duration count from
    there, not from Locust's start-up, which takes a second or more on a busy machine."""
    path = folder / "run.json"
    return float(json.loads(path.read_text()).get("started_at", default)) if path.exists() else default
