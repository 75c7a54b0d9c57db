"""``specagent-ray bench calls``: what one call from one of the app's replicas to another costs the caller.

The coordinator reaches its tool hosts and engines through Serve handles (``core/handles.by_grpc``, with
``app.REPLICA``'s settings), about 0.6 calls in and out per committed step (``bench scale``'s per-part
table). This bench prices one such call, and puts next to it the floor of the same exchange over a plain
socket, from the same run:

- **Serve handle**: a caller replica awaits ``echo.remote(payload)`` on an echo replica, ``--concurrency``
  calls in flight;
- **plain socket**: the same caller replica sends the same payload to the same echo replica over one
  length-prefixed asyncio TCP connection per call in flight (loopback, no routing, no auth, no metrics).

What is measured is the caller process's CPU (all its threads, ``getrusage``) per call, as ``bench scale``
measures the coordinator's, and the wall time per call. The two ways alternate, ``--rounds`` times each, and
the table gives their medians and the ratio. MEASURED on this machine; both replicas share its cores.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from rich.console import Console
from rich.table import Table

WAYS = ("serve", "socket")


def summary(runs: dict[str, list[dict[str, float]]], out_per_step: float, in_per_step: float) -> dict[str, float]:
    """Median microseconds per call of each way: the caller's CPU (``out``), the callee's (``in``) and the
    wall time; the CPU ratio Serve / socket of each side; and what Serve's calls alone cost one committed
    step of the coordinator, which makes ``out_per_step`` calls and takes ``in_per_step``, in ms."""
    f: dict[str, float] = {}
    for way in WAYS:
        for side, field in (("out", "cpu_s"), ("in", "callee_cpu_s"), ("wall", "wall_s")):
            f[f"{way}_{side}_us"] = statistics.median(r[field] / r["calls"] * 1e6 for r in runs[way])
    for side in ("out", "in"):
        f[f"{side}_ratio"] = f[f"serve_{side}_us"] / max(f[f"socket_{side}_us"], 1e-9)
    f["serve_ms_per_step"] = (out_per_step * f["serve_out_us"] + in_per_step * f["serve_in_us"]) / 1000
    f["socket_ms_per_step"] = (out_per_step * f["socket_out_us"] + in_per_step * f["socket_in_us"]) / 1000
    return f


def measure(concurrency: tuple[int, ...], calls: int, size: int, rounds: int, out_per_step: float,
            in_per_step: float) -> dict[int, dict[str, float]]:
    from ray import serve

    from ...launch.workload import local_ray
    from .call_probe import CallEcho, CallProbe

    out = {}
    with local_ray(num_cpus=4):
        handle = serve.run(CallProbe.bind(CallEcho.bind()), name="calls", route_prefix=None)
        for c in concurrency:
            for way in WAYS:  # warm both ways: connections, the router's replica cache
                handle.measure.remote(way, 50, c, size).result()
            runs: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
            for _ in range(rounds):
                for way in WAYS:
                    runs[way].append(handle.measure.remote(way, calls, c, size).result())
            out[c] = summary(runs, out_per_step, in_per_step)
    return out


def report(console: Console, concurrency: tuple[int, ...], calls: int, size: int, rounds: int,
           out_per_step: float, in_per_step: float) -> int:
    figures = measure(concurrency, calls, size, rounds, out_per_step, in_per_step)
    t = Table(title=f"One call between two replicas, {size} B each way, {calls} calls x {rounds} rounds per cell; "
              "CPU of the caller (out) and of the callee (in), all threads. MEASURED on this machine")
    for col in ("calls in flight", "Serve out us", "socket out us", "out: Serve / socket", "Serve in us",
                "socket in us", "in: Serve / socket", "Serve wall us", "socket wall us",
                "Serve ms / step", "socket ms / step"):
        t.add_column(col, justify="right")
    for c, f in figures.items():
        t.add_row(str(c), *(f"{f[k]:.0f}" for k in ("serve_out_us", "socket_out_us")), f"{f['out_ratio']:.1f}x",
                  *(f"{f[k]:.0f}" for k in ("serve_in_us", "socket_in_us")), f"{f['in_ratio']:.1f}x",
                  *(f"{f[k]:.0f}" for k in ("serve_wall_us", "socket_wall_us")),
                  f"{f['serve_ms_per_step']:.2f}", f"{f['socket_ms_per_step']:.2f}")
    console.print(t)
    console.print(f"ms / step: the calls' CPU alone for one committed step of a coordinator that makes {out_per_step:g} "
                  f"calls out and takes {in_per_step:g} calls in per step (--calls-out-per-step, "
                  "--calls-in-per-step; bench scale's per-part table gives a run's own figures), against the "
                  "coordinator's goal of 1.0 ms per step for all of its work.")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("calls", help="MEASURED: the caller's CPU per call between two replicas through a Serve "
                       "handle, next to a plain socket, as a ratio", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=lambda s: tuple(int(x) for x in s.split(",")), default=(1, 8, 64),
                   help="calls in flight at once, comma-separated (default 1,8,64)")
    p.add_argument("--calls", type=int, default=2000, help="calls per way, per round, per concurrency")
    p.add_argument("--size", type=int, default=1000, help="payload bytes each way")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of the two ways; medians are reported")
    p.add_argument("--calls-out-per-step", type=float, default=0.40,
                   help="the coordinator's calls out per committed step (bench scale, 300 sessions)")
    p.add_argument("--calls-in-per-step", type=float, default=0.22,
                   help="the coordinator's calls in per committed step (bench scale, 300 sessions)")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    if min(args.concurrency) < 1 or args.calls < 1 or args.rounds < 1 or args.size < 0:
        raise ValueError("--concurrency, --calls and --rounds must be at least 1, --size at least 0")
    return report(console, args.concurrency, args.calls, args.size, args.rounds, args.calls_out_per_step,
                  args.calls_in_per_step)
