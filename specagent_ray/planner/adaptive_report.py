"""What ``bench adaptive`` prints and checks: a table per load level (every figure in total over the roles, the
split weak / mid / strong beside it, a strong-only figure labelled so), the adaptive controller's own goals,
and the issue's goals in totals (``costs/totals.py``), each PASS or MISS with its figure.

Labels: GPU-s, HBM and latency ESTIMATED (cost model; SIMULATED tokens), Pass@1 SIMULATED (tau2's evaluator
on simulated policies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from ..costs.totals import GOAL_HIGH, GOAL_LOW, Goal, total_goals

NAMES = {"strong": "Strong-only", "fixed": "fixed K", "chain": "chain, fixed K", "adaptive": "adaptive"}
FIXED = ("strong", "fixed", "chain")  # the methods adaptive is held against, where the run has them
GOAL_WITHIN = 0.03  # adaptive within 3 % of the best fixed method on the objective, at every level
BEATS = 0.005  # "beats them all": lower than the best fixed method by more than rounding (0.5 %)
FIGURE = {"hbm": "hbm_total"}  # the figure of an objective whose name is not its figure's
LABELS = {
    "gpu_seconds, hbm_total, weak_*, mid_*, strong_*, latency": "estimated (cost model at each method's operating "
    "point on the plan's fleet; simulated tokens; gpu_seconds and hbm_total count every role, strong_hbm the "
    "strong model only)",
    "fleet_*": "estimated (the method's mix on a fleet sized to the level, costs/totals.py)",
    "pass_at_1": "simulated (tau2 evaluator on simulated policies)",
    "chosen": "blocks per route the controller chose: K, and 'K chain' for the mid verifier first"}


@dataclass(frozen=True)
class Level:
    sessions: float
    label: str
    figures: dict[str, dict[str, float]]  # method -> figure -> value
    chosen_k: dict[str, int]  # "K" or "K chain" -> blocks


def methods(lv: Level) -> list[str]:
    """The level's methods in table order."""
    return [m for m in NAMES if m in lv.figures]


def best_fixed(f: dict[str, dict[str, float]], key: str) -> float:
    return min(f[m][key] for m in FIXED if m in f)


def goals(levels: Sequence[Level], objective: str) -> list[tuple[str, bool]]:
    """The controller's goals, each with whether this run met it."""
    within, beats, quality = [], [], []
    key = FIGURE.get(objective, objective)
    for lv in levels:
        f = lv.figures
        best = best_fixed(f, key)
        within.append(f["adaptive"][key] <= best * (1 + GOAL_WITHIN))
        beats.append(f["adaptive"][key] < best * (1 - BEATS))
        quality.append(f["fixed"]["pass_low"] <= f["adaptive"]["pass_at_1"] <= f["fixed"]["pass_high"])
    return [(f"{objective}: adaptive within {GOAL_WITHIN:.0%} of the best fixed method at every level", all(within)),
            (f"{objective}: adaptive beats every fixed method by {BEATS:.1%} or more at one level or more", any(beats)),
            ("Pass@1 of adaptive within fixed K's bootstrap interval at every level", all(quality))]


def total_goals_of(levels: Sequence[Level]) -> list[Goal]:
    """The issue's goals in totals for fixed K, the fixed chain and adaptive, where the run has the 10- and
    1,000-session levels (fleets sized to each; Pass@1 inside Strong-only's bootstrap interval)."""
    by = {lv.sessions: lv.figures for lv in levels}
    if GOAL_LOW not in by or GOAL_HIGH not in by or "fleet_gpu_s_per_step" not in by[GOAL_LOW]["strong"]:
        return []
    low, high = by[GOAL_LOW], by[GOAL_HIGH]
    out = []
    for m in ("fixed", "chain", "adaptive"):
        if m not in low or m not in high:
            continue
        ok = high["strong"]["pass_low"] <= high[m]["pass_at_1"] <= high["strong"]["pass_high"]
        note = f"Pass@1 {high[m]['pass_at_1']:.1f} in Strong-only's [{high['strong']['pass_low']:.1f}, " \
               f"{high['strong']['pass_high']:.1f}]: {'yes' if ok else 'no'}"
        out += total_goals(NAMES[m], low[m]["fleet_hbm_total"] / low["strong"]["fleet_hbm_total"],
                           high[m]["fleet_gpu_s_per_step"] / high["strong"]["fleet_gpu_s_per_step"],
                           high["strong"]["fleet_latency"] / high[m]["fleet_latency"], ok, note)
    return out


ROWS = [("gpu_seconds", "busy GPU-s, all roles", "{:.3f}"), ("weak_gpu_s", "  of which weak", "{:.3f}"),
        ("mid_gpu_s", "  of which mid", "{:.3f}"), ("strong_gpu_s", "  of which strong", "{:.3f}"),
        ("hbm_total", "HBM all roles, TB", "{:.3f}"), ("weak_hbm", "  of which weak, TB", "{:.3f}"),
        ("mid_hbm", "  of which mid, TB", "{:.3f}"),
        ("strong_hbm", "  of which strong (strong model only), TB", "{:.3f}"),
        ("latency", "step latency, s", "{:.2f}"), ("batch_strong", "strong batch / replica", "{:.1f}")]
FLEET_ROWS = [("fleet_gpu_s_per_step", "fleet sized to this load: GPUs per committed step/s", "{:.3f}"),
              ("fleet_hbm_total", "fleet sized to this load: HBM all roles, TB", "{:.3f}"),
              ("fleet_latency", "fleet sized to this load: step latency, s", "{:.2f}")]


def level_table(lv: Level, objective: str) -> Table:
    """One level's figures per method, adaptive against the best fixed method (Strong-only, fixed K, chain)."""
    t = Table(title=f"{lv.sessions:,.0f} sessions ({lv.label}): per committed step; GPU-s, HBM, latency ESTIMATED "
                    "(simulated tokens), Pass@1 SIMULATED")
    ms, f = methods(lv), lv.figures
    for col in ("figure", *(NAMES[m] for m in ms), "adaptive / best fixed"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    rows = ROWS + (FLEET_ROWS if "fleet_gpu_s_per_step" in f["strong"] else [])
    for key, name, fmt in rows:
        scale = 1e-12 if "hbm" in key else 1
        best = best_fixed(f, key)
        t.add_row(name + (" (objective)" if key == FIGURE.get(objective, objective) else ""),
                  *(fmt.format(f[m].get(key, 0.0) * scale) for m in ms),
                  f"{f['adaptive'][key] / best:.3f}" if key != "batch_strong" and best > 0 else "")
    t.add_row("Pass@1 % [95 % interval]", *(f"{f[m]['pass_at_1']:.1f} [{f[m]['pass_low']:.1f}, {f[m]['pass_high']:.1f}]"
                                            for m in ms), "")
    t.add_row("route chosen (blocks)", *([""] * (len(ms) - 1)),
              ", ".join(f"{k}: {n}" for k, n in lv.chosen_k.items()), "")
    return t


def print_goals(console: Any, met: list[tuple[str, bool]], totals: list[Goal]) -> None:
    for text, ok in met:
        console.print(f"  goal: {text}: {'[green]met[/green]' if ok else '[red]not met[/red]'}")
    for g in totals:
        console.print(f"  goal in totals ({g.scope}): {g.name}: {g.figure}: {g.verdict}")
