"""``specagent-ray bench chaos``: sessions on the served path while the infrastructure misbehaves.

N simulated airline sessions (the sim profile's engines and latencies, its real coordinator, session
log, lease and tau2 tool host, in this process: no Ray, no HTTP) arrive over a few seconds, once per
fault, after an unloaded baseline. A one-shot fault strikes at 35% of the arrival window, once a session
is mid-way (has committed a step and not ended). The faults are a chaos engineer's:

  cpu-hog             one process spinning on every core for the whole run (killed at its end, always)
  slow-store          every store operation delayed: 10% by 20-200 ms, 2% by 1-3 s (a p99 of seconds)
  store-errors        5% of store operations raise StoreError
  lease-store-down    every store operation fails for 1.5x the lease period, once, mid-run
  coordinator-killed  the coordinator crashes mid-run (its store and tool host connections cut, its tasks
                      stopped); a successor waits out the lease, replays the log and resumes the sessions
  tool-host-killed    the tool host dies mid-run (calls in flight are lost) and is down for 3 s; a new one
                      starts on the same idempotency records
  mcp-server-killed   sessions on the test bank MCP server (specagent_ray.testing.mcp_server, scripted
                      engines) whose server process is SIGKILLed mid-run; the toolbox reconnects. Its
                      baseline is its own unloaded run, "none (mcp)"

The store (one for the session log, its lease and the tool host's idempotency records) is a local
folder wrapped by the fault. Per fault the table counts, after the bound (--bound-s) has passed:
sessions done, failed with a reason (a status with its error; a create refused for the whole bound
counts here too) and lost (acknowledged, and neither finished nor failed with a reason: must be 0);
the verified writes (intents in the log) that ran 0, 1 or 2+ times by the tool side's own count
(2+ must never happen), and writes that ran with no intent; observations in the logged trajectories
that carry an infrastructure error (must be 0); sessions graded by tau2's evaluator; the p99 latency of
a committed step (time since the session's previous commit, per step) against the unloaded run.

The last line is always ``lost N, duplicated N, error observations N``; the exit code is 1 unless all
three (and the writes with no intent) are 0. MEASURED on this machine: other load on it shows up in
every row, the baseline's included.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ...arguments import texts
from .chaos_run import FAULTS, Row, Settings, one_fault


def plan(faults: tuple[str, ...]) -> list[str]:
    """The runs for ``faults``: the unloaded baseline first, and the MCP baseline before the MCP fault."""
    runs = ["none", *[f for f in faults if f != "mcp-server-killed"]]
    return runs + (["none (mcp)", "mcp-server-killed"] if "mcp-server-killed" in faults else [])


def measure(settings: Settings, where: Path, on_fault: Callable[[str], None], advance: Callable[[], None]
            ) -> list[Row]:
    """Every run of ``plan``, one event loop each; each row's p99 against its baseline's."""
    rows: list[Row] = []
    for i, fault in enumerate(plan(settings.faults)):
        on_fault(fault)
        folder = where / f"{i}-{fault.replace(' ', '').replace('(', '-').replace(')', '')}"
        row = asyncio.run(one_fault(fault, settings, settings.seed + i, folder, advance))
        base = next((r for r in rows if r.fault == ("none (mcp)" if "mcp" in fault else "none")), None)
        if base is not None and base.p99_s > 0:
            row.ratio = row.p99_s / base.p99_s
        rows.append(row)
    return rows


def table(rows: list[Row], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("fault", "n", "done", "failed", "lost", "graded", "ran 0/1/2+", "unlogged", "err obs", "steps",
                "p99 ms", "max ms", "vs none"):
        t.add_column(col, justify="left" if col == "fault" else "right", no_wrap=True)
    for r in rows:
        t.add_row(r.fault, str(r.sessions), str(r.done), str(r.failed), str(r.lost), r.graded,
                  "/".join(map(str, r.writes)), str(r.unlogged), str(r.error_obs), str(r.steps),
                  f"{r.p99_s * 1000:.0f}", f"{r.max_s * 1000:.0f}", "-" if r.ratio is None else f"{r.ratio:.1f}x")
    return t


def report(console: Console, settings: Settings, verbose: bool = False) -> int:
    """Run, print the table, its notes and the totals line last; 1 unless every total is 0."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    runs, s = plan(settings.faults), settings
    quiet = logging.getLogger("specagent_ray"), logging.getLogger("mcp")
    levels = [lg.level for lg in quiet]
    for lg in quiet:  # the pauses' warnings are expected by the hundred; the table counts what matters
        lg.setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="chaos-") as tmp, Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=console, transient=True) as progress:
            bar = progress.add_task("chaos", total=len(runs) * s.sessions)
            rows = measure(s, Path(tmp),
                           lambda f: progress.update(bar, description=f"chaos: {f}"),
                           lambda: progress.advance(bar))
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)
    console.print(table(rows, f"bench chaos: {s.sessions} sessions per fault arriving over {s.spread_s:g} s, lease "
                        f"{s.lease_s:g} s, bound {s.bound_s:g} s per fault, {time.monotonic() - started:.0f} s in "
                        f"all; MEASURED on this machine ({os.cpu_count()} cores)"))
    for r in rows:
        if r.notes:
            console.print(f"  {r.fault}: {'; '.join(r.notes)}", markup=False, highlight=False, soft_wrap=True)
    lost, dup = sum(r.lost for r in rows), sum(r.writes[2] for r in rows)
    errors, unlogged = sum(r.error_obs for r in rows), sum(r.unlogged for r in rows)
    if unlogged:
        console.print(f"{unlogged} write(s) ran with no intent in the log", style="red")
    console.print(f"lost {lost}, duplicated {dup}, error observations {errors}", markup=False, highlight=False)
    return 1 if lost or dup or errors or unlogged else 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("chaos", help="MEASURED: sessions on the served path under CPU hogs, slow and failing "
                       "stores, a lapsed lease and killed coordinators, tool hosts and MCP servers",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--faults", type=texts, default=FAULTS,
                   help=f"comma-separated, from: {', '.join(FAULTS)} (default: all; the baseline always runs)")
    p.add_argument("--sessions", type=int, default=12, help="sessions per fault (default 12)")
    p.add_argument("--tasks", type=texts, default=(),
                   help="airline task ids the sessions run, cycled (default: the first --sessions of tau2's base "
                   "split; 7, 9 and 14 write)")
    p.add_argument("--lease-s", type=float, default=4.0, help="the session log's lease period (default 4; the "
                   "sim profile has 15 s: shorter keeps the lease faults short)")
    p.add_argument("--spread-s", type=float, default=6.0, help="sessions arrive evenly over this many seconds "
                   "(default 6); one-shot faults strike at 35%% of it, once a session is mid-way")
    p.add_argument("--bound-s", type=float, default=60.0, help="per fault: a session not finished by then is "
                   "lost (default 60)")
    p.add_argument("--seed", type=int, default=0, help="seed of the store faults' draws (default 0)")
    p.add_argument("--verbose", action="store_true", help="show the coordinator's warnings (every pause)")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    unknown = [f for f in args.faults if f not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) {', '.join(unknown)}; choose from {', '.join(FAULTS)}")
    if args.sessions < 1 or args.lease_s <= 0 or args.spread_s < 0 or args.bound_s <= 0:
        raise ValueError("--sessions must be at least 1, --lease-s and --bound-s above 0, --spread-s at least 0")
    settings = Settings(args.faults, args.sessions, args.tasks, args.lease_s, args.spread_s, args.bound_s, args.seed)
    return report(console, settings, args.verbose)
