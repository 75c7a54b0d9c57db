"""``specagent-ray bench beyond``: Strong-only, today's SpecAgent, and SpecAgent with parallel calls, with risk
tiers, with the three-tier chain and with all three, on each tau2 domain, in one run; one table per domain and
the issue's goals checked against it.

Pass@1 is graded by tau2's evaluator on SIMULATED policies; strong and mid HBM are ESTIMATED by the cost model
(the mid verifier priced as ``--mid-model`` on ``--mid-gpus``); wall is measured on this machine; wrong
critical writes per 1,000 sessions are SIMULATED (critical calls by the domain's tier table that executed with
effect and match no gold call).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from ..costs.hardware import Hardware
from ..models.gold import SimSettings
from ..protocol.review import CriticalCheck
from ..protocol.runtime import SpecConfig
from .report import method_summaries
from .tau2 import BenchConfig, by_method, run_bench, task_ids
from .variants import MID_MODEL, TABLE

TB = 1e12
DOMAINS = ("airline", "retail", "telecom")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("beyond", help="SIMULATED: parallel calls, risk tiers and the verifier chain against "
                       "SpecAgent and Strong-only, one table per tau2 domain", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--domains", type=lambda s: tuple(s.split(",")), default=DOMAINS,
                   help="comma-separated tau2 domains (default airline,retail,telecom)")
    p.add_argument("--trials", type=int, default=3, help="trials per task (default 3)")
    p.add_argument("--tasks", type=int, default=None, help="only the first N tasks of each domain (default all)")
    p.add_argument("--critical-check", choices=("agree", "verdicts"), default="agree",
                   help="the second check of a critical call: the strong policy's agreement, or a second verdict")
    p.add_argument("--repeat-correlation", type=float, default=None,
                   help="how alike a second verdict is to the first (1 = a copy, the stated default; 0 = independent)")
    p.add_argument("--error-correlation", type=float, default=None,
                   help="override the sim's correlation between the models' errors at a state (airline and retail "
                        "are calibrated at 0.8, telecom at 0): how often the strong policy makes the weak's mistake")
    p.add_argument("--mid-model", default=MID_MODEL, help="the mid verifier's model spec, for its cost")
    p.add_argument("--mid-gpus", type=int, default=2, help="GPUs of one mid-verifier replica")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--out", type=Path, default=Path("results"), help="where the JSON goes")
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    unknown = [d for d in args.domains if d not in DOMAINS]
    if unknown or args.trials < 1 or (args.tasks is not None and args.tasks < 1):
        raise ValueError(f"--domains from {', '.join(DOMAINS)}; --trials and --tasks at least 1")
    hardware = Hardware(mid_model=args.mid_model, mid_gpus=args.mid_gpus)
    spec = SpecConfig(critical=CriticalCheck(args.critical_check))
    configs = [_config(d, args, spec, hardware) for d in args.domains]
    total = sum(len(task_ids(c)) * c.trials * len(c.methods) for c in configs)
    out: dict[str, Any] = {"command": "bench beyond", "critical_check": args.critical_check,
                           "repeat_correlation": args.repeat_correlation, "error_correlation": args.error_correlation,
                           "mid_model": args.mid_model, "seed": args.seed,
                           "labels": {"pass_at_1": "tau2's evaluator on SIMULATED policies",
                                      "hbm": "ESTIMATED (cost model)", "wall_ms": "measured on this machine",
                                      "wrong_critical_per_1000": "SIMULATED"}, "domains": {}}
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("beyond the paper (simulated policies)", total=total)
        for cfg in configs:
            results = run_bench(cfg, lambda n: progress.advance(bar, n))
            rows = rows_of(results, args.seed)
            out["domains"][cfg.domain] = rows
            console.print(table(cfg.domain, rows))
    console.print(goals(out["domains"]))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"beyond-seed{args.seed}-{args.critical_check}-{args.mid_model}.json"
    path.write_text(json.dumps(out, indent=1))
    console.print(f"wrote {path}")
    return 0


def _config(domain: str, args: argparse.Namespace, spec: SpecConfig, hardware: Hardware) -> BenchConfig:
    sim = SimSettings.for_domain(domain, seed=args.seed)
    if args.repeat_correlation is not None:
        sim = replace(sim, verifier=replace(sim.verifier, repeat_correlation=args.repeat_correlation))
    if args.error_correlation is not None:
        sim = replace(sim, error_correlation=args.error_correlation)
    cfg = BenchConfig(domain=domain, methods=TABLE, trials=args.trials, spec=spec, sim=sim, hardware=hardware,
                      workers=args.workers)
    if args.tasks is not None:
        cfg = replace(cfg, task_ids=tuple(task_ids(cfg)[:args.tasks]))
    return cfg


def rows_of(results, seed: int) -> dict[str, dict[str, float]]:
    """Each variant's row: the summary's figures plus strong calls, mid HBM and wrong critical writes."""
    groups = by_method(results)
    rows = {}
    for s in method_summaries(results, seed=seed):
        rs = groups[s.method]
        mids = [r.mid for r in rs if r.mid is not None]
        rows[s.method] = {
            "pass_at_1": s.pass_at_1, "ci_low": s.ci_low, "ci_high": s.ci_high, "sessions": len(rs),
            "committed_steps": s.committed_steps, "strong_calls": s.strong_calls, "strong_hbm_tb": s.strong_hbm_tb,
            "mid_hbm_tb": sum((m.hbm_low + m.hbm_high) / 2 / TB for m in mids) / len(rs) if mids else 0.0,
            "wall_ms": s.wall_ms, "critical_writes": sum(r.critical_writes for r in rs) / len(rs),
            "wrong_critical_per_1000": 1000 * sum(r.wrong_critical_writes for r in rs) / len(rs),
        }
    return rows


def table(domain: str, rows: dict[str, dict[str, float]]) -> Table:
    t = Table(title=f"tau2 {domain}: beyond the paper (SIMULATED policies, ESTIMATED costs)")
    for c in ("variant", "Pass@1 [95% CI vs strong]", "steps", "strong calls", "strong HBM TB (x strong)",
              "mid HBM TB", "wall ms", "wrong critical /1k"):
        t.add_column(c, justify="left" if c == "variant" else "right")
    base = rows.get("strong", {}).get("strong_hbm_tb", math.nan)
    for name, r in rows.items():
        ci = "" if math.isnan(r["ci_low"]) else f" [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]"
        t.add_row(name, f"{r['pass_at_1']:.1f}{ci}", f"{r['committed_steps']:.2f}", f"{r['strong_calls']:.2f}",
                  f"{r['strong_hbm_tb']:.1f} ({r['strong_hbm_tb'] / base:.2f}x)", f"{r['mid_hbm_tb']:.1f}",
                  f"{r['wall_ms']:.0f}", f"{r['wrong_critical_per_1000']:.0f}")
    return t


def goals(domains: dict[str, dict[str, dict[str, float]]]) -> Table:
    """The issue's goals, each PASS or MISS with its numbers (reported; not an exit code)."""
    t = Table(title="goals (SIMULATED policies, ESTIMATED costs)")
    for c in ("goal", "domain", "figure", "verdict"):
        t.add_column(c)
    for domain, rows in domains.items():
        spec, par = rows.get("specagent"), rows.get("specagent+parallel")
        tiers, chain, strong = rows.get("specagent+tiers"), rows.get("specagent+chain"), rows.get("strong")
        if spec and par and domain == "retail":
            cut = 1 - par["committed_steps"] / spec["committed_steps"]
            t.add_row("parallel: steps -15 %", domain, f"{-cut:+.1%}", _ok(cut >= 0.15))
        if spec and tiers:
            fewer = spec["wrong_critical_per_1000"] / max(tiers["wrong_critical_per_1000"], 1e-9)
            more = tiers["strong_hbm_tb"] / spec["strong_hbm_tb"] - 1
            t.add_row("tiers: wrong critical /5, HBM +10 % at most", domain,
                      f"{spec['wrong_critical_per_1000']:.0f} -> {tiers['wrong_critical_per_1000']:.0f} per 1k "
                      f"({fewer:.1f}x fewer), HBM {more:+.1%}", _ok(fewer >= 5 and more <= 0.10))
        if chain and strong and spec and domain == "airline":
            ratio = chain["strong_hbm_tb"] / strong["strong_hbm_tb"]
            gap = chain["pass_at_1"] - spec["pass_at_1"]
            t.add_row("chain: strong HBM <= 0.30x, Pass@1 within 1 pt", domain,
                      f"{ratio:.2f}x, Pass@1 {gap:+.1f} pts vs SpecAgent", _ok(ratio <= 0.30 and abs(gap) <= 1))
    return t


def _ok(passed: bool) -> str:
    return "PASS" if passed else "MISS"
