"""The ``specagent-ray`` command."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

EPILOG = """examples:
  specagent-ray bench tau2 --domain airline --trials 3
  specagent-ray bench tau2 --domain retail --methods strong,weak,specagent --tasks 0,1,2 --k 8
  specagent-ray bench throughput --seconds 3
  specagent-ray bench theory --p 0.5,0.7,0.9

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
    t.add_argument("--domain", default="airline", choices=["airline", "retail"])
    t.add_argument("--methods", type=_csv, default=("strong", "weak", "specagent", "agentcollab", "specactions"),
                   help="comma-separated: strong, weak, specagent, agentcollab, specactions, specagent-exact")
    t.add_argument("--trials", type=int, default=3, help="runs per task (Pass@1 averages over them)")
    t.add_argument("--tasks", type=_csv, default=None, help="comma-separated task ids (default: all)")
    t.add_argument("--k", type=int, default=6, help="most steps drafted per block (paper: 6 for tau2)")
    t.add_argument("--max-steps", type=int, default=100, help="committed-step guard per task")
    t.add_argument("--review-messages", action="store_true",
                   help="stage agent messages for review before the user sees them (default: sent at once, "
                        "as in the paper; a message always ends the block)")
    t.add_argument("--seed", type=int, default=0, help="seed of the simulated error model")
    t.add_argument("--workers", type=int, default=2, help="worker processes")
    t.add_argument("--gpu", default="h20", help="GPU profile for estimates (h20, h200)")
    t.add_argument("--strong-gpus", type=int, default=16, help="GPUs holding the strong model")
    t.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON and PNG")

    th = bench.add_parser("throughput", help="committed steps/s of the protocol loop alone (zero-latency policies)",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    th.add_argument("--seconds", type=float, default=3.0, help="time budget per method")
    th.add_argument("--k", type=int, default=6)

    mc = bench.add_parser("theory", help="Monte-Carlo check of Proposition 1 through the real loop",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    mc.add_argument("--p", type=lambda s: tuple(float(x) for x in _csv(s)), default=(0.5, 0.7, 0.9))
    mc.add_argument("--n", type=int, default=4, help="block length")
    mc.add_argument("--steps", type=int, default=30_000, help="committed steps per point")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(width=max(Console().width, 132))
    try:
        if args.suite == "tau2":
            return _bench_tau2(args, console)
        if args.suite == "throughput":
            from .bench.throughput import report_throughput

            return report_throughput(console, args.seconds, args.k)
        if args.suite == "theory":
            from .bench.montecarlo import report_theory

            return report_theory(console, args.p, args.n, args.steps)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    return 1


def _bench_tau2(args: argparse.Namespace, console: Console) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    from .bench.report import plot, summarize, theory_check, write_json
    from .bench.simulation import SimSettings
    from .bench.tau2 import BenchConfig, Hardware, run_bench, task_ids
    from .protocol.runtime import SpecConfig

    cfg = BenchConfig(
        domain=args.domain, methods=args.methods, trials=args.trials, task_ids=args.tasks,
        spec=SpecConfig(k=args.k, max_steps=args.max_steps, review_messages=args.review_messages),
        sim=SimSettings(seed=args.seed), hardware=Hardware(gpu=args.gpu, strong_gpus=args.strong_gpus),
        workers=args.workers,
    )
    total = len(task_ids(cfg)) * cfg.trials * len(cfg.methods)
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(f"tau2 {cfg.domain} (simulated policies)", total=total)
        results = run_bench(cfg, lambda n: progress.advance(bar, n))
    summary = summarize(results, seed=args.seed)
    theory = [t for m in cfg.methods if m.startswith("specagent") and (t := theory_check(results, m))]
    for table in _summary_tables(summary, cfg):
        console.print(table)
    if theory:
        console.print(_theory_table(theory))
    stem = f"tau2-{cfg.domain}-seed{args.seed}"
    meta = {"domain": cfg.domain, "trials": cfg.trials, "k": args.k, "methods": list(cfg.methods),
            "review_messages": args.review_messages, "seed": args.seed,
            "hardware": vars(cfg.hardware), "command": " ".join(sys.argv)}
    write_json(args.out / f"{stem}.json", results, summary, theory, meta)
    plot(args.out / f"{stem}.png", summary, f"tau2 {cfg.domain}, {cfg.trials} trial(s), simulated policies")
    console.print(f"wrote {args.out / (stem + '.json')} and {args.out / (stem + '.png')}")
    return 0


def _fmt(x: float, spec: str = ".1f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _summary_tables(summary, cfg) -> list[Table]:
    base = next((s for s in summary if s.method == "strong"), None)

    def ratio(x: float, attr: str) -> str:
        y = getattr(base, attr) if base else 0
        return _fmt(x / y, ".2f") if y else "n/a"

    tasks = summary[0].trajectories // cfg.trials
    quality = Table(title=f"tau2 {cfg.domain}: quality, {tasks} tasks x {cfg.trials} trial(s), K={cfg.spec.k} "
                          "[simulated policies; Pass@1 measured by tau2's evaluator]")
    for col in ("method", "Pass@1 %", "Δ vs strong, pts [95% CI]", "gap recovered", "strong calls/task",
                "committed steps/task"):
        quality.add_column(col, justify="left" if col == "method" else "right")
    for s in summary:
        quality.add_row(s.method, _fmt(s.pass_at_1),
                        f"{_fmt(s.diff_vs_strong, '+.1f')} [{_fmt(s.ci_low, '+.1f')}, {_fmt(s.ci_high, '+.1f')}]",
                        _fmt(s.gap_recovered, ".2f"), _fmt(s.strong_calls), _fmt(s.committed_steps))
    cost = Table(title=f"tau2 {cfg.domain}: cost per task [tokens simulated; HBM/FLOPs/latency estimated, strong on "
                       f"{cfg.hardware.strong_gpus}x{cfg.hardware.gpu}; wall measured]")
    for col in ("method", "strong decode tok", "strong prefill tok", "weak tok", "strong HBM TB [range]",
                "HBM / strong", "FLOPs / strong", "GPU latency / strong", "wall ms"):
        cost.add_column(col, justify="left" if col == "method" else "right")
    for s in summary:
        cost.add_row(
            s.method, _fmt(s.strong_decode_tokens, ".0f"), _fmt(s.strong_prefill_tokens, ".0f"),
            _fmt(s.weak_tokens, ".0f"),
            f"{_fmt(s.strong_hbm_tb, '.2f')} [{_fmt(s.strong_hbm_low_tb, '.2f')}-{_fmt(s.strong_hbm_high_tb, '.2f')}]",
            ratio(s.strong_hbm_tb, "strong_hbm_tb"), ratio(s.flops, "flops"),
            ratio(s.gpu_latency_s, "gpu_latency_s"), _fmt(s.wall_ms, ".2f"))
    return [quality, cost]


def _theory_table(theory) -> Table:
    t = Table(title="Propositions 1/2 vs this run (ratios to Strong-only per committed step; HBM and latency "
                    "estimated; prediction applied to the reviewed share f, see docs/simulation.md)")
    for col in ("method", "p_u", "n", "v/d", "rho", "kappa", "f", "R pred.", "R meas.", "L pred.", "L meas."):
        t.add_column(col, justify="right")
    for x in theory:
        t.add_row(x.method, *(_fmt(v, ".3f") for v in (x.p, x.n, x.v_over_d, x.rho, x.kappa, x.reviewed_share,
                                                        x.r_predicted, x.r_measured, x.l_predicted, x.l_measured)))
    return t


if __name__ == "__main__":
    sys.exit(main())
