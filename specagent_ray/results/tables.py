"""The tables a bench run prints (and ``results show/compare`` reprint): quality, cost, Propositions 1/2,
edge-cloud dollars, and two runs side by side. Every column names its figure's kind, and HBM, FLOPs and
latency count every role unless the column says "strong model only"."""

from __future__ import annotations

import math

from rich.table import Table


def fmt(x: float, spec: str = ".1f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def bench_name(domain: str, sep: str = " ") -> str:
    """``tau2 airline`` / ``bfcl base`` (with ``sep="-"``: the output files' stem)."""
    return sep.join(domain.split("-", 1)) if domain.startswith("bfcl-") else f"tau2{sep}{domain}"


def summary_tables(summary, cfg, live: bool = False) -> list[Table]:
    """The quality table and two cost tables. The first cost table's headline is HBM read per task of every
    role (drafter + mid + strong) against Strong-only's, with the per-role split beside it; a figure that
    counts the strong model alone says "strong model only". A figure missing from an older result reads n/a."""
    return [_quality_table(summary, cfg, live), _hbm_table(summary, cfg), _compute_table(summary, cfg, live)]


def _ratio_to_strong(summary):
    """``ratio(x, attr)``: x against Strong-only's ``attr`` as ``0.00``; n/a without Strong-only or a figure."""
    base = next((s for s in summary if s.method == "strong"), None)

    def ratio(x: float, attr: str) -> str:
        y = getattr(base, attr) if base else 0
        return fmt(x / y, ".2f") if y else "n/a"

    return ratio


def _quality_table(summary, cfg, live: bool) -> Table:
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
    return quality


def _hbm_table(summary, cfg) -> Table:
    ratio = _ratio_to_strong(summary)
    t = Table(title=f"{bench_name(cfg.domain)}: HBM read per task, every role (ESTIMATED, each call priced alone; "
                    f"strong on {cfg.hardware.strong_gpus}x{cfg.hardware.gpu})")
    for col in ("method", "HBM TB, all roles", "range", "x strong-only, all roles", "weak TB", "mid TB", "strong TB",
                "strong x strong-only (strong model only)"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for s in summary:
        t.add_row(s.method, fmt(s.total_hbm_tb, ".2f"), _range(s.total_hbm_low_tb, s.total_hbm_high_tb),
                  ratio(s.total_hbm_tb, "total_hbm_tb"), fmt(s.weak_hbm_tb, ".2f"), fmt(s.mid_hbm_tb, ".2f"),
                  fmt(s.strong_hbm_tb, ".2f"), ratio(s.strong_hbm_tb, "strong_hbm_tb"))
    return t


def _compute_table(summary, cfg, live: bool) -> Table:
    ratio = _ratio_to_strong(summary)
    tokens = "tokens measured from engine usage" if live else "tokens simulated"
    t = Table(title=f"{bench_name(cfg.domain)}: compute, latency and tokens per task ({tokens}; FLOPs and GPU "
                    "latency estimated, every role; wall measured)")
    for col in ("method", "FLOPs x strong-only, all roles", "FLOPs x strong-only, paper's layout",
                "GPU latency x strong-only, all roles", "strong decode tok", "strong prefill tok", "weak tok",
                "wall ms"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for s in summary:
        t.add_row(s.method, ratio(s.flops, "flops"), ratio(s.flops_paper_layout, "flops"),
                  ratio(s.gpu_latency_s, "gpu_latency_s"), fmt(s.strong_decode_tokens, ".0f"),
                  fmt(s.strong_prefill_tokens, ".0f"), fmt(s.weak_tokens, ".0f"), fmt(s.wall_ms, ".2f"))
    return t


def theory_table(theory) -> Table:
    t = Table(title="Propositions 1/2 vs this run (ratios to Strong-only per committed step; R: strong-model HBM "
                    "only, as Proposition 1 defines it; L: GPU latency of drafter and strong; both estimated; "
                    "prediction applied to the reviewed share f, see docs/simulation.md)")
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
    for col in ("method", "strong tokens (strong model only)", "vs strong-only", "strong decode vs strong-only",
                "$ / task", "$ vs strong-only", "repair prompt cached",
                "FLOPs vs strong-only, all roles (est.; paper +30-87 %)"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for s in summary:
        t.add_row(s.method, fmt(s.strong_tokens, ".0f"), ratio(s.strong_tokens, base and base.strong_tokens),
                  ratio(s.strong_decode_tokens, base and base.strong_decode_tokens), fmt(s.dollars, ".4f"),
                  ratio(s.dollars, base and base.dollars), fmt(100 * s.repair_cached_share, ".0f") + " %"
                  if not math.isnan(s.repair_cached_share) else "no repairs",
                  ratio(s.flops, base and base.flops))
    return t


def _range(low: float, high: float) -> str:
    return "n/a" if "n/a" in (fmt(low), fmt(high)) else f"{low:.2f}-{high:.2f}"


COMPARED = (("pass_at_1", "Pass@1 %", ".1f"), ("total_hbm_tb", "HBM TB, all roles", ".2f"),
            ("strong_hbm_tb", "strong HBM TB (strong model only)", ".2f"), ("flops", "FLOPs, all roles", ".3g"),
            ("strong_decode_tokens", "strong decode tok (strong model only)", ".0f"))


def compare_table(a: list, b: list) -> Table:
    """Two runs per method, one row per figure as A, B and B/A (n/a where a run lacks the method or the
    figure): HBM and FLOPs of every role first, the strong model's own figures labelled so."""
    by_a, by_b = {s.method: s for s in a}, {s.method: s for s in b}
    methods = list(by_a) + [m for m in by_b if m not in by_a]
    t = Table(title="A vs B per task (Pass@1 measured by tau2's evaluator; HBM/FLOPs estimated, every role unless "
                    "labelled strong model only; tokens as labelled in each file)")
    for col in ("method", "figure", "A", "B", "B/A"):
        t.add_column(col, justify="left" if col in ("method", "figure") else "right")
    for m in methods:
        sa, sb = by_a.get(m), by_b.get(m)
        for i, (attr, name, spec) in enumerate(COMPARED):
            x, y = (getattr(sa, attr) if sa else None), (getattr(sb, attr) if sb else None)
            t.add_row(m, name, fmt(x, spec), fmt(y, spec), fmt(y / x, ".2f") if x and y is not None else "n/a",
                      end_section=i == len(COMPARED) - 1)
    return t
