"""``specagent-ray loadtest``: argument parsing and the run, with a progress bar and the outputs."""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .locust_load import LocustLoad
from .locust_run import LocustFailed
from .report import load_summary, print_summary, write_outputs
from .run import LoadAborted, LoadConfig
from .wires import READ_TOOLS, WIRES
from .workload import Workload, parse_mix

EPILOG = """examples:
  specagent-ray loadtest                                       # sim profile on local Ray, 50 sessions, 60 s
  specagent-ray loadtest --concurrency 1000 --sessions 100000 --duration-s 300 --out results/load-1000
  specagent-ray loadtest --concurrency 50,200,1000 --duration-s 180    # three 60 s stages: latency vs load
  specagent-ray loadtest --mode open --rate 20 --duration-s 120
  specagent-ray loadtest --concurrency 1000 --client-processes 4   # the client in 4 processes
  SPECAGENT_API_KEY=... specagent-ray loadtest --url http://specagent.example:8000 --user tau2 --concurrency 64
  specagent-ray loadtest --api responses --concurrency 100   # 100 conversations on both APIs: the overhead
  specagent-ray loadtest --api chat --concurrency 20 --duration-s 20 --sessions 100000   # steps/s vs sessions

Without --url, the load generator deploys --profile on a fresh local Ray instance and targets it on
127.0.0.1 (its dev key is used). With --url, the key comes from the environment variable --api-key-env.
Every run is bounded: no session starts after --duration-s or past --sessions, in-flight sessions get
--drain-s to finish and are then cancelled, and --max-errors errors stop the run early. Exit status: 0
with no errors, 1 with errors or unfinished sessions, 2 when the run could not start."""


def add_parser(sub: Any) -> None:
    lt = sub.add_parser("loadtest", help="load generator against a gateway over HTTP (closed or open loop)",
                        epilog=EPILOG, formatter_class=_Formatter)
    where = lt.add_argument_group("target")
    where.add_argument("--url", default=None, help="gateway base URL; default: deploy --profile locally")
    where.add_argument("--profile", default=None, help="profile deployed when --url is not given (default: sim; "
                       "scripted with --api responses, chat, messages)")
    where.add_argument("--api", choices=("sessions", "responses", "chat", "messages"), default="sessions",
                       help="sessions: the load below; responses: the same conversations through the sessions "
                            "API and the Responses API in one run, and the Responses API's latency overhead; "
                            "chat, messages: a stateless agent loop (the whole history resent each step) on "
                            "/v1/chat/completions or /v1/messages against the same loop on the sessions API, "
                            "in one run: steps/s, step latency, and the sessions each loop saw (one)")
    where.add_argument("--api-key-env", default="SPECAGENT_API_KEY", help="environment variable holding the API key")
    load = lt.add_argument_group("load")
    load.add_argument("--mode", choices=("closed", "open"), default="closed",
                      help="closed: --concurrency sessions always in flight; open: --rate arrivals per second")
    load.add_argument("--concurrency", type=_levels, default=(50,),
                      help="closed: sessions in flight, or ascending levels (e.g. 100,300,1000) run as equal "
                           "stages of --duration-s; open: cap (shed above)")
    load.add_argument("--rate", type=float, default=5.0, help="open loop: session arrivals per second (Poisson)")
    load.add_argument("--sessions", type=int, default=None, help="most sessions started; when unset, 10000 "
                      "(--api responses, chat, messages: 100 conversations, both APIs together)")
    load.add_argument("--duration-s", type=float, default=60.0, help="no session starts after this")
    load.add_argument("--drain-s", type=float, default=60.0, help="time in-flight sessions get to finish afterwards")
    load.add_argument("--ramp-s", type=float, default=None, help="closed loop: start workers over this "
                      "(default: a tenth of --duration-s, at most 10 s)")
    load.add_argument("--max-errors", type=int, default=20, help="stop early at this many errors")
    load.add_argument("--timeout-s", type=float, default=60.0, help="per HTTP request")
    load.add_argument("--seed", type=int, default=0, help="open-loop arrival times")
    load.add_argument("--client-processes", type=int, default=1,
                      help="Locust's distributed mode: a master and this many worker processes (each takes "
                           "every N-th session, a share of the users and of the open-loop rate), so that the "
                           "client is not the bottleneck")
    work = lt.add_argument_group("workload")
    work.add_argument("--tasks", default="airline:0-19,retail:0-19",
                      help="task mix, SOURCE:ID or SOURCE:FIRST-LAST, comma-separated (tool sources of the server)")
    work.add_argument("--user", choices=("simulated", "tau2", "client"), default="simulated",
                      help="simulated: the scripted tau2 customer (sim engines); tau2: tau2's LLM user (model "
                           "engines); client: the load client posts the user's messages")
    work.add_argument("--method", default="specagent", help="method of the load sessions")
    work.add_argument("--k", type=int, default=None, help="most steps drafted per block (server default if unset)")
    work.add_argument("--max-steps", type=int, default=None, help="committed-step guard per session")
    work.add_argument("--baseline-sessions", type=int, default=20,
                      help="afterwards, this many Strong-only sessions on the same (task, trial)s, for the "
                           "strong-token savings (0: skip)")
    work.add_argument("--baseline-method", default="strong", help="the baseline's method")
    work.add_argument("--cancel-every", type=int, default=0,
                      help="cancel every N-th session at its first commit or the first time it waits on the "
                           "client, whichever comes first (0: none)")
    work.add_argument("--client-user-turns", type=int, default=2,
                      help="--user client: the load client answers this many agent messages (the last ends it)")
    work.add_argument("--turns", type=int, default=3, help="--api responses: turns per conversation; --api chat, "
                      "messages: steps per agent loop (tool calls, a read and a write in turn, then a message)")
    lt.add_argument("--out", type=Path, default=Path("results/loadtest"), help="folder for JSON, CSV and PNG")
    lt.set_defaults(run=run_loadtest)


def _levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or comma-separated numbers") from None


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def config_from(args: argparse.Namespace, url: str, api_key: str) -> LoadConfig:
    workload = Workload(parse_mix(args.tasks), user=args.user, method=args.method, k=args.k, max_steps=args.max_steps,
                        client_user_turns=args.client_user_turns, cancel_every=args.cancel_every)
    ramp = args.ramp_s if args.ramp_s is not None else min(10.0, args.duration_s / 10)
    levels = tuple(args.concurrency)
    return LoadConfig(url=url, api_key=api_key, workload=workload, mode=args.mode, concurrency=levels[-1],
                      stages=levels if len(levels) > 1 else (),
                      rate=args.rate, sessions=10_000 if args.sessions is None else args.sessions,
                      duration_s=args.duration_s, drain_s=args.drain_s,
                      ramp_s=ramp, max_errors=args.max_errors, baseline_sessions=args.baseline_sessions,
                      baseline_method=args.baseline_method, request_timeout_s=args.timeout_s, seed=args.seed)


def run_loadtest(args: argparse.Namespace, console: Console) -> int:
    LocustLoad(config_from(args, "http://127.0.0.1", "-"), args.client_processes)  # bad arguments fail before
    run = {"responses": _run_apis, "chat": _run_wire, "messages": _run_wire}.get(args.api, _run)
    args.profile = args.profile or ("sim" if args.api == "sessions" else "scripted")
    if args.url:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ValueError(f"set the API key in ${args.api_key_env} (or pick another variable with --api-key-env)")
        return run(config_from(args, args.url, key), args.out, console, args.client_processes, args)
    from ..launch.workload import local_cluster

    console.print(f"deploying the {args.profile} profile on a local Ray instance...")
    with tempfile.TemporaryDirectory(prefix="specagent-loadtest-log-") as log:
        overrides = {"session_log": log,  # a fresh log: nothing from earlier runs is replayed
                     "coordinator": {"max_sessions": max(2000, 2 * max(args.concurrency)),
                                     "queue_limit": max(4096, 8 * max(args.concurrency))}}
        if args.api in WIRES:  # the agent loops' reads go out as drafted; their writes are verified first
            overrides["tool_sources"] = {"app": {"read_tools": list(READ_TOOLS)}}
        with local_cluster(args.profile, args=overrides) as url:
            key = os.environ.get(args.api_key_env) or "dev-key"
            return run(config_from(args, url, key), args.out, console, args.client_processes, args)


def _run_apis(cfg: LoadConfig, out: Path, console: Console, processes: int, args: argparse.Namespace) -> int:
    """``--api responses``: ``--sessions`` conversations (100 unless given), ``--concurrency`` at a time."""
    from .apis import ApiLoad, compare_apis, summary, write

    conversations = 100 if args.sessions is None else args.sessions
    load = ApiLoad(cfg.url, cfg.api_key, conversations, cfg.concurrency, args.turns, timeout_s=cfg.request_timeout_s)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        bar = progress.add_task("turns", total=conversations * args.turns)
        result = asyncio.run(compare_apis(load, lambda done: progress.update(bar, completed=done)))
    s = summary(load, result)
    for api, st in s["apis"].items():
        console.print(f"{api:>9} API: {st['turns']} turns, p50 {st.get('p50_ms', 0):.1f} ms, "
                      f"p95 {st.get('p95_ms', 0):.1f} ms")
    over = s["responses_overhead"]
    if over:
        console.print(f"Responses API overhead: p50 {over['p50_ms']:+.1f} ms, p95 {over['p95_ms']:+.1f} ms "
                      f"({s['label']}; goal: p50 within +2 ms)")
    for error in s["errors"][:5]:
        console.print(f"[red]error:[/red] {escape(error)}", soft_wrap=True)
    console.print(f"wrote {write(s, out)}")
    return 0 if not s["errors"] else 1


def _run_wire(cfg: LoadConfig, out: Path, console: Console, processes: int, args: argparse.Namespace) -> int:
    """``--api chat`` / ``--api messages``: agent loops on the wire and on the sessions API, ``--concurrency``
    workers for ``--duration-s`` (at most ``--sessions`` loops, 100 unless given)."""
    from .wires import WireLoad, compare_wire, summary, write

    load = WireLoad(cfg.url, cfg.api_key, args.api, 100 if args.sessions is None else args.sessions,
                    cfg.concurrency, args.turns, cfg.duration_s, timeout_s=cfg.request_timeout_s)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        bar = progress.add_task("steps", total=None)
        result = asyncio.run(compare_wire(load, lambda done: progress.update(bar, completed=done)))
    s = summary(load, result)
    for api, st in s["apis"].items():
        console.print(f"{api:>9} API: {st['loops']} loops, {st['steps']} steps, {st['steps_per_s']:.1f} steps/s, "
                      f"step p50 {st.get('p50_ms', 0):.1f} ms, p95 {st.get('p95_ms', 0):.1f} ms")
    vs, per = s["wire_against_sessions"], s["sessions_per_loop"]
    if vs:
        ratio = "-" if vs["steps_per_s_ratio"] is None else f"{vs['steps_per_s_ratio']:.2f}x"
        console.print(f"{args.api} against the sessions API: steps/s {ratio}, step p50 {vs['p50_ms']:+.1f} ms, "
                      f"p95 {vs['p95_ms']:+.1f} ms ({s['label']})")
    console.print(f"sessions per {args.api} loop: {per['one_session']} of {per['loops']} loops were one session "
                  f"(most: {per['max']})")
    for error in s["errors"][:5]:
        console.print(f"[red]error:[/red] {escape(error)}", soft_wrap=True)
    console.print(f"wrote {write(s, out)}")
    return 0 if not s["errors"] else 1


def _run(cfg: LoadConfig, out: Path, console: Console, processes: int = 1, args: Any = None) -> int:
    bound = cfg.duration_s + cfg.drain_s
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        bar = progress.add_task("starting", total=bound)

        def tick(snap: dict[str, Any]) -> None:
            progress.update(bar, completed=min(snap["t"], bound),
                            description=f"locust: sessions ended {snap['ended']:>6}  errors {snap['errors']}")
        try:
            result = LocustLoad(cfg, processes, tick).run()
        except (LoadAborted, LocustFailed) as exc:
            console.print(f"[red]load test not started:[/red] {escape(str(exc))}", soft_wrap=True)
            return 2
    summary = load_summary(result)
    paths = write_outputs(result, summary, out)
    print_summary(console, summary)
    console.print("wrote " + ", ".join(str(p) for p in paths))
    return 0 if summary["sessions"]["errors"] == 0 and summary["sessions"]["unfinished"] == 0 else 1
