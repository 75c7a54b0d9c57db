"""The tables a bench run prints (and ``results show/compare`` reprint): quality, cost, Propositions 1/2,
edge-cloud dollars, and two runs side by side. Every column names its figure's kind."""

from __future__ import annotations

import math

from rich.table import Table


def fmt(x: float, spec: str = ".1f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def bench_name(domain: str, sep: str = " ") -> str:
    """``tau2 airline`` / ``bfcl base`` (with ``sep="-"``: the output files' stem)."""
    return sep.join(domain.split("-", 1)) if domain.startswith("bfcl-") else f"tau2{sep}{domain}"


def summary_tables(summary, cfg, live: bool = False) -> list[Table]:
    base = next((s for s in summary if s.method == "strong"), None)

    def ratio(x: float, attr: str) -> str:
        y = getattr(base, attr) if base else 0
        return fmt(x / y, ".2f") if y else "n/a"

    tasks = summary[0].trajectories // cfg.trials
    quality = Table(title=f"{bench_name(cfg.domain)}: quality, {tasks} tasks x {cfg.trials} trial(s), K={cfg.spec.k} "
                          f"({'real engines' if live else 'simulated policies'}; Pass@1 measured by "
                          f"{'BFCL' if cfg.domain.startswith('bfcl-') else 'tau2'}'s evaluator)")
    for col in ("method", "Pass@1 %", "Δ vs strong, pts (95% CI)", "gap recovered", "strong calls/task",
                "committed steps/task"):
        quality.add_column(col, justify="left" if col == "method" else "right")
    for s in summary:
        quality.add_row(s.method, fmt(s.pass_at_1),
                        f"{fmt(s.diff_vs_strong, '+.1f')} [{fmt(s.ci_low, '+.1f')}, {fmt(s.ci_high, '+.1f')}]",
                        fmt(s.gap_recovered, ".2f"), fmt(s.strong_calls), fmt(s.committed_steps))
    tokens = "tokens measured from engine usage" if live else "tokens simulated"
    cost = Table(title=f"{bench_name(cfg.domain)}: cost per task ({tokens}; HBM/FLOPs/latency estimated, strong on "
                       f"{cfg.hardware.strong_gpus}x{cfg.hardware.gpu}; wall measured)")
    for col in ("method", "strong decode tok", "strong prefill tok", "weak tok", "strong HBM TB (range)",
                "HBM / strong", "FLOPs / strong", "FLOPs / strong, paper's layout", "GPU latency / strong",
                "wall ms"):
        cost.add_column(col, justify="left" if col == "method" else "right")
    for s in summary:
        cost.add_row(
            s.method, fmt(s.strong_decode_tokens, ".0f"), fmt(s.strong_prefill_tokens, ".0f"),
            fmt(s.weak_tokens, ".0f"),
            f"{fmt(s.strong_hbm_tb, '.2f')} [{fmt(s.strong_hbm_low_tb, '.2f')}-{fmt(s.strong_hbm_high_tb, '.2f')}]",
            ratio(s.strong_hbm_tb, "strong_hbm_tb"), ratio(s.flops, "flops"),
            ratio(s.flops_paper_layout, "flops"),
            ratio(s.gpu_latency_s, "gpu_latency_s"), fmt(s.wall_ms, ".2f"))
    return [quality, cost]


def theory_table(theory) -> Table:
    t = Table(title="Propositions 1/2 vs this run (ratios to Strong-only per committed step; HBM and latency "
                    "estimated; prediction applied to the reviewed share f, see docs/simulation.md)")
    for col in ("method", "p_u", "n", "v/d", "rho", "kappa", "f", "R pred.", "R pred. per task", "R meas.",
                "L pred.", "L pred. per task", "L meas."):
        t.add_column(col, justify="right")
    for x in theory:
        t.add_row(x.method, *(fmt(v, ".3f") for v in (
            x.p, x.n, x.v_over_d, x.rho, x.kappa, x.reviewed_share, x.r_predicted, x.r_predicted_per_task,
            x.r_measured, x.l_predicted, x.l_predicted_per_task, x.l_measured)))
    return t


def edge_cloud_table(summary, args) -> Table:
    base = next((s for s in summary if s.method == "strong"), None)

    def ratio(x: float, y: float | None) -> str:
        return fmt(x / y, ".2f") if y and not math.isnan(y) and not math.isnan(x) else "n/a"

    t = Table(title=f"edge-cloud cost per task (tokens and cache hits measured from engine usage; $ at "
                    f"{args.strong_price} list prices for the strong model, weak model local)")
    for col in ("method", "strong tokens", "vs strong-only", "strong decode vs strong-only", "$ / task",
                "$ vs strong-only", "repair prompt cached", "FLOPs vs strong-only (est.; paper +30-87 %)"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for s in summary:
        t.add_row(s.method, fmt(s.strong_tokens, ".0f"), ratio(s.strong_tokens, base and base.strong_tokens),
                  ratio(s.strong_decode_tokens, base and base.strong_decode_tokens), fmt(s.dollars, ".4f"),
                  ratio(s.dollars, base and base.dollars), fmt(100 * s.repair_cached_share, ".0f") + " %"
                  if not math.isnan(s.repair_cached_share) else "no repairs",
                  ratio(s.flops, base and base.flops))
    return t


def compare_table(a: list, b: list) -> Table:
    by_a, by_b = {s.method: s for s in a}, {s.method: s for s in b}
    methods = list(by_a) + [m for m in by_b if m not in by_a]
    t = Table(title="A vs B per task (Pass@1 measured by tau2's evaluator; HBM/FLOPs estimated; tokens as "
                    "labelled in each file)")
    t.add_column("method", justify="left")
    for name in ("Pass@1 %", "strong HBM TB", "FLOPs", "strong decode tok"):
        for col in (f"{name} A", f"{name} B", "B/A"):
            t.add_column(col, justify="right")
    fields = (("pass_at_1", ".1f"), ("strong_hbm_tb", ".2f"), ("flops", ".3g"), ("strong_decode_tokens", ".0f"))
    for m in methods:
        sa, sb = by_a.get(m), by_b.get(m)
        row = [m]
        for attr, spec in fields:
            x, y = (getattr(sa, attr) if sa else None), (getattr(sb, attr) if sb else None)
            row += [fmt(x, spec), fmt(y, spec), fmt(y / x, ".2f") if x and y is not None else "n/a"]
        t.add_row(*row)
    return t
