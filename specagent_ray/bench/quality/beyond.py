"""``specagent-ray bench beyond``: Strong-only, today's SpecAgent, and SpecAgent with parallel calls, with risk
tiers, with the three-tier chain and with all three, on each tau2 domain, in one run; one table per domain and
the goals checked against it, in totals (every role: drafter, mid, strong).

Pass@1 is graded by tau2's evaluator on SIMULATED policies; HBM per role (weak, mid, strong) and its total are
ESTIMATED by the cost model, each call priced alone (the mid verifier as ``--mid-model`` on ``--mid-gpus``);
the goals price each variant's call mix on fleets sized to 10 and 1,000 sessions (``bench/quality/beyond_totals.py``,
ESTIMATED); wall is measured on this machine; wrong critical writes per 1,000 sessions are SIMULATED (critical
calls by the domain's tier table that executed with effect and match no gold call). ``--from-json`` prices a
written run again (new goals, another mid) without running the sessions.
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

from ...costs.hardware import Hardware
from ...protocol.review import CriticalCheck
from ...protocol.runtime import SpecConfig
from ...results.summaries import method_summaries
from ...results.trial import by_method
from ...sim.gold import SimSettings
from .beyond_totals import (
    at_loads,
    engines_of,
    goal_table,
    goals_of,
    mid_comparison,
    mid_table,
    usage_of,
)
from .runs import BenchConfig, run_bench, task_ids
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
    p.add_argument("--from-json", type=Path, default=None, metavar="JSON", help="print and check a written run "
                   "again (its rows priced with this code and --mid-model), running no session")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    unknown = [d for d in args.domains if d not in DOMAINS]
    if unknown or args.trials < 1 or (args.tasks is not None and args.tasks < 1):
        raise ValueError(f"--domains from {', '.join(DOMAINS)}; --trials and --tasks at least 1")
    hardware = Hardware(mid_model=args.mid_model, mid_gpus=args.mid_gpus)
    if args.from_json is not None:
        return _again(json.loads(args.from_json.read_text()), hardware, console)
    spec = SpecConfig(critical=CriticalCheck(args.critical_check))
    configs = [_config(d, args, spec, hardware) for d in args.domains]
    total = sum(len(task_ids(c)) * c.trials * len(c.methods) for c in configs)
    out: dict[str, Any] = {"command": "bench beyond", "critical_check": args.critical_check,
                           "repeat_correlation": args.repeat_correlation, "error_correlation": args.error_correlation,
                           "mid_model": args.mid_model, "mid_gpus": args.mid_gpus, "seed": args.seed,
                           "labels": LABELS, "domains": {}}
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("beyond the paper (simulated policies)", total=total)
        for cfg in configs:
            results = run_bench(cfg, lambda n: progress.advance(bar, n))
            rows = rows_of(results, args.seed)
            out["domains"][cfg.domain] = rows
            console.print(table(cfg.domain, rows))
    out.update(_report(out["domains"], hardware, console))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"beyond-seed{args.seed}-{args.critical_check}-{args.mid_model}.json"
    path.write_text(json.dumps(out, indent=1))
    console.print(f"wrote {path}")
    return 0


LABELS = {"pass_at_1": "tau2's evaluator on SIMULATED policies", "usage": "SIMULATED tokens per session",
          "hbm": "ESTIMATED (cost model, each call alone; every role and the total)",
          "at_load": "ESTIMATED (fleets sized to 10 and 1,000 sessions; costs/totals.py)",
          "wall_ms": "measured on this machine", "wrong_critical_per_1000": "SIMULATED"}


def _report(domains: dict[str, Any], hardware: Hardware, console: Console) -> dict[str, Any]:
    """The goals (the variants' own, and the issue's in totals) and the mid comparison, printed; returned
    for the JSON."""
    console.print(goals(domains))
    met = goals_of(domains, hardware)
    console.print(goal_table(met))
    mids = mid_comparison(domains, hardware)
    console.print(mid_table(mids))
    engines = engines_of(hardware)
    return {"at_load": {d: at_loads(rows, engines) for d, rows in domains.items()},
            "goals": [{"goal": g.name, "scope": g.scope, "figure": g.figure, "verdict": g.verdict} for g in met],
            "mid_comparison": mids}


def _again(doc: dict[str, Any], hardware: Hardware, console: Console) -> int:
    """A written run's tables, goals and mid comparison again, priced with this code."""
    for domain, rows in doc["domains"].items():
        console.print(table(domain, rows))
    _report(doc["domains"], hardware, console)
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
    """Each variant's row: the summary's figures plus strong calls, HBM per role and in total (per session,
    each call priced alone), each role's mean tokens per session (``usage``) and wrong critical writes."""
    groups = by_method(results)
    rows = {}
    for s in method_summaries(results, seed=seed):
        rs = groups[s.method]
        mids = [r.mid for r in rs if r.mid is not None]
        rows[s.method] = {
            "pass_at_1": s.pass_at_1, "ci_low": s.ci_low, "ci_high": s.ci_high, "sessions": len(rs),
            "committed_steps": s.committed_steps, "strong_calls": s.strong_calls, "strong_hbm_tb": s.strong_hbm_tb,
            "mid_hbm_tb": sum((m.hbm_low + m.hbm_high) / 2 / TB for m in mids) / len(rs) if mids else 0.0,
            "weak_hbm_tb": sum((r.weak.hbm_low + r.weak.hbm_high) / 2 / TB for r in rs) / len(rs),
            "usage": usage_of(rs),
            "wall_ms": s.wall_ms, "critical_writes": sum(r.critical_writes for r in rs) / len(rs),
            "wrong_critical_per_1000": 1000 * sum(r.wrong_critical_writes for r in rs) / len(rs),
        }
        row = rows[s.method]
        row["total_hbm_tb"] = row["weak_hbm_tb"] + row["mid_hbm_tb"] + row["strong_hbm_tb"]
    return rows


def table(domain: str, rows: dict[str, dict[str, float]]) -> Table:
    """Per variant: Pass@1, HBM per session in total (every role, x Strong-only's total) with the split
    weak / mid / strong beside it, per call priced alone."""
    t = Table(title=f"tau2 {domain}: beyond the paper (SIMULATED policies, ESTIMATED costs; HBM per session, "
                    "each call priced alone)")
    for c in ("variant", "Pass@1 [95% CI vs strong]", "steps", "strong calls", "HBM TB all roles (x strong)",
              "weak / mid / strong HBM TB", "wall ms", "wrong critical /1k"):
        t.add_column(c, justify="left" if c == "variant" else "right")
    base = rows.get("strong", {}).get("total_hbm_tb", math.nan)
    for name, r in rows.items():
        ci = "" if math.isnan(r["ci_low"]) else f" [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]"
        total = r.get("total_hbm_tb", r["strong_hbm_tb"] + r["mid_hbm_tb"])
        t.add_row(name, f"{r['pass_at_1']:.1f}{ci}", f"{r['committed_steps']:.2f}", f"{r['strong_calls']:.2f}",
                  f"{total:.1f} ({total / base:.2f}x)",
                  f"{r.get('weak_hbm_tb', math.nan):.1f} / {r['mid_hbm_tb']:.1f} / {r['strong_hbm_tb']:.1f}",
                  f"{r['wall_ms']:.0f}", f"{r['wrong_critical_per_1000']:.0f}")
    return t


def goals(domains: dict[str, dict[str, dict[str, float]]]) -> Table:
    """The variants' own goals, each PASS or MISS with its numbers (reported; not an exit code). HBM is the
    total of every role, except the chain's issue-42 goal, which counted the strong model alone and says so."""
    t = Table(title="the variants' goals (SIMULATED policies, ESTIMATED costs)")
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
            more = _total(tiers) / _total(spec) - 1
            t.add_row("tiers: wrong critical /5, all-role HBM +10 % at most", domain,
                      f"{spec['wrong_critical_per_1000']:.0f} -> {tiers['wrong_critical_per_1000']:.0f} per 1k "
                      f"({fewer:.1f}x fewer), HBM {more:+.1%}", _ok(fewer >= 5 and more <= 0.10))
        if chain and strong and spec and domain == "airline":
            ratio = chain["strong_hbm_tb"] / strong["strong_hbm_tb"]
            gap = chain["pass_at_1"] - spec["pass_at_1"]
            t.add_row("chain (issue 42, strong model only): strong HBM <= 0.30x, Pass@1 within 1 pt", domain,
                      f"{ratio:.2f}x, Pass@1 {gap:+.1f} pts vs SpecAgent", _ok(ratio <= 0.30 and abs(gap) <= 1))
    return t


def _total(row: dict[str, float]) -> float:
    return row.get("total_hbm_tb", row["strong_hbm_tb"] + row["mid_hbm_tb"])


def _ok(passed: bool) -> str:
    return "PASS" if passed else "MISS"
