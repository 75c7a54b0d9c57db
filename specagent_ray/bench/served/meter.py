"""``specagent-ray bench meter``: what the GPU meter costs, next to what it meters.

1. **The node meter's CPU.** One node's ``NodeMeter`` samples ``--devices`` devices (two roles: half the
   devices each, as a drafter and a verifier sharing a node would) every ``--period-s`` on its own threads,
   for ``--seconds``; the process's CPU time over the wall time is the meter's share of one core. MEASURED
   on this machine, over a scripted NVML: the Python side of the meter; the driver's own calls (a few
   microseconds each on a real GPU) are not in it.
2. **The attribution's cost per request.** The book (``telemetry/meter_book.py``) takes the windows of that
   node and the spans of ``--rate`` engine calls per second (each 0.05-2 s long, 12 tenants) for
   ``--seconds`` of simulated time, and seals them; its CPU per request, and that cost at the request rate
   as a share of one core. MEASURED CPU on SIMULATED traffic.
The goal: under 1 % of one core at 100 ms sampling, for each.
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from ...telemetry.attribution import Window
from ...telemetry.meter_book import MeterBook, span_of
from ...telemetry.node_meter import NodeMeter

GOAL = 0.01  # of one core


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def meter_cpu(devices: int, period_s: float, seconds: float) -> dict[str, float]:
    """The node meter's CPU share of one core while it samples (this process does nothing else)."""
    meter = NodeMeter("specagent_ray.testing.fake_nvml:ScriptedNvml",
                      {"devices": [[[0, 60, 30]]] * devices}, period_s)
    half = max(devices // 2, 1)
    before, wall = cpu_s(), time.monotonic()
    meter.assign("strong", list(range(half)))
    meter.assign("weak", list(range(half, devices)) or [0])
    time.sleep(seconds)
    used, wall = cpu_s() - before, time.monotonic() - wall
    windows = sum(len(r["windows"]) for r in meter.drain().values())
    meter.stop()
    return {"cpu_s": used, "wall_s": wall, "share": used / wall, "windows": windows}


def attribution_cpu(rate: float, seconds: float, period_s: float, seed: int = 0) -> dict[str, float]:
    """The book's CPU per request for ``rate`` calls/s over ``seconds`` of simulated time."""
    rng = random.Random(seed)
    t0, n = 1_000_000.0, int(rate * seconds)
    spans = []
    for i in range(n):
        start = t0 + rng.uniform(0, seconds)
        spans.append(span_of(f"t{i % 12}", f"s{i % 500}", start, start + rng.uniform(0.05, 2.0), rng.randint(50, 4000)))
    spans.sort(key=lambda s: s.end)
    steps = int(seconds / period_s)
    windows = [Window(t0 + i * period_s, t0 + (i + 1) * period_s, 0.5 * period_s, 1e9) for i in range(steps)]
    book = MeterBook(seal_after_s=30.0)
    book.node_state("strong", "n1", None)
    before = time.process_time()
    per_second = int(1 / period_s)
    for sec in range(int(seconds)):  # one poll a second: a second's windows and spans, then a seal
        book.add_windows("strong", "n1", windows[sec * per_second:(sec + 1) * per_second])
        book.add_spans("strong", [s for s in spans if t0 + sec <= s.end < t0 + sec + 1])
        book.seal(t0 + sec + 1)
    book.seal(t0 + seconds + 60)
    used = time.process_time() - before
    return {"requests": n, "cpu_s": used, "us_per_request": used / max(n, 1) * 1e6, "share": used / seconds}


def report(console: Console, devices: int, period_s: float, seconds: float, rate: float) -> int:
    m = meter_cpu(devices, period_s, seconds)
    a = attribution_cpu(rate, seconds, period_s)
    t = Table(title=f"GPU meter overhead (MEASURED on this machine; scripted NVML, SIMULATED traffic), "
              f"{devices} devices, {period_s * 1000:g} ms sampling, {seconds:g} s")
    for col in ("part", "CPU s", "per", "share of one core", "goal", "ratio to goal"):
        t.add_column(col, justify="right" if col != "part" else "left")
    t.add_row("node meter (sampling)", f"{m['cpu_s']:.3f}", f"{m['windows']} windows", f"{m['share']:.2%}",
              f"{GOAL:.0%}", f"{m['share'] / GOAL:.2f}x")
    t.add_row(f"attribution at {rate:g} requests/s", f"{a['cpu_s']:.3f}", f"{a['us_per_request']:.1f} us/request",
              f"{a['share']:.2%}", f"{GOAL:.0%}", f"{a['share'] / GOAL:.2f}x")
    console.print(t)
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("meter", help="MEASURED: the GPU meter's CPU per node and the attribution's cost per "
                       "request, next to the engines' request rate", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", type=int, default=8, help="GPUs on the metered node")
    p.add_argument("--period-s", type=float, default=0.1, help="NVML sampling period (meter.period_s)")
    p.add_argument("--seconds", type=float, default=10.0, help="how long the meter samples, and the simulated "
                   "traffic's span")
    p.add_argument("--rate", type=float, default=200.0, help="engine calls per second across all coordinator "
                   "shards (one 2-core coordinator shard makes about 150 committed steps/s)")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    return report(console, args.devices, args.period_s, args.seconds, args.rate)
