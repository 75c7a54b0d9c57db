"""Committed steps per second of the protocol loop alone (zero-latency SIMULATED policies, tool time
excluded), SpecAgent next to Strong-only, measured in the same process."""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from ...costs.ledger import Ledger
from ...models.scripted import ScriptedUser
from ...protocol.baselines import run_strong_only
from ...protocol.runtime import Parts, SpecConfig
from ...protocol.speculation import run_specagent
from ...protocol.types import Task, Usage
from .montecarlo import BernoulliVerifier, BlockPolicy, TimedTools, bernoulli_tools

SESSION_STEPS = 60


async def _rate(method, k: int, seconds: float) -> tuple[float, int]:
    """(committed steps per second of loop time, steps) over sessions of SESSION_STEPS steps."""
    usage = Usage(1000, 900, 200)
    verifier = BernoulliVerifier(0.9, 0.3, random.Random(0), Usage(1000, 900, 30))
    steps, loop_s = 0, 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        tools = TimedTools(bernoulli_tools().specs)
        parts = Parts(BlockPolicy(k, usage), BlockPolicy(k, usage), verifier, tools, ScriptedUser(), Ledger())
        start = time.perf_counter()
        traj = await method(Task("t", ""), parts, SpecConfig(k=k, max_steps=SESSION_STEPS))
        loop_s += time.perf_counter() - start - tools.tool_s
        steps += len(traj.steps)
    return steps / loop_s, steps


def measure_throughput(seconds: float = 3.0, k: int = 6) -> dict[str, tuple[float, int]]:
    return {name: asyncio.run(_rate(fn, k, seconds))
            for name, fn in (("specagent", run_specagent), ("strong", run_strong_only))}


def report_throughput(console: Console, seconds: float, k: int) -> int:
    rates = measure_throughput(seconds, k)
    t = Table(title=f"Protocol loop throughput, one process (measured; zero-latency simulated policies, "
                    f"tool time excluded, K={k}, p=0.9)")
    for col in ("method", "committed steps/s", "steps run", "vs strong-only", "goal"):
        t.add_column(col, justify="right")
    base = rates["strong"][0]
    for name, (rate, n) in rates.items():
        t.add_row(name, f"{rate:,.0f}", f"{n:,}", f"{rate / base:.2f}x", ">= 5,000" if name == "specagent" else "")
    console.print(t)
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("throughput", help="committed steps/s of the protocol loop alone (zero-latency policies)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="time budget per method")
    p.add_argument("--k", type=int, default=6)
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    return report_throughput(console, args.seconds, args.k)
