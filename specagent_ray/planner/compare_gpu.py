"""``specagent-ray plan --compare-gpu``: the same plan on a second GPU profile, next to the first.

Every flag but ``--gpu`` is the same for both runs (``--strong-replicas auto`` sizes each run's verifier
fleet on its own profile, as two separate ``plan`` runs would). The table puts the crossovers (the session
count where a saving falls to <= 1) and the savings at the planned load of run A (``--gpu``) next to run B's
(``--compare-gpu``), with A's difference from B. Each row names its view: the crossovers and those savings
are on today's verifier fleet (``plan``'s "On today's verifier fleet"), the headline's rows on each method's
fleet sized to the load (``planner/fleet_tables.py``, the same function as ``plan``'s headline). Every
figure is ESTIMATED; the two profiles carry the labels ``plan`` gives them (shipped, naming any field
measured, or measured on a device).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from ..costs.fleet import Plan, decode_knee
from ..costs.totals import FleetView
from .fleet_tables import NAME, fleet_dict, fleet_views

METRIC_NAMES = {"hbm": "strong HBM / step (strong model only)", "gpu_s": "busy GPU-s / step (all roles, today's "
                "verifier fleet)", "latency": "step latency (today's verifier fleet)"}
HEADLINE = {"GPUs in all": (lambda v: v.total_gpus, "{:d}"),  # the headline table's rows, as it prints them
            "GPU-s per committed step (GPUs per committed step/s; all roles)": (lambda v: v.gpu_s_per_step, "{:.3f}"),
            "HBM per committed step, TB, all roles": (lambda v: v.hbm()["total"] / 1e12, "{:.2f}")}


@dataclass(frozen=True)
class Side:
    """One run of the comparison: the flag and profile it came from, its label and its plan."""

    flag: str  # "--gpu" or "--compare-gpu"
    profile: str  # the flag's value: a shipped name or a YAML path
    label: str
    plan: Plan


def _rel(a: float | None, b: float | None) -> str:
    """A against B as A / B - 1, in per cent ("-" where either is missing or B is 0)."""
    if a is None or b is None or not b:
        return "-"
    pct = (a / b - 1) * 100
    return f"{0.0 if abs(pct) < 0.05 else pct:+.1f} %"


def _sessions(x: float | None, none: str) -> str:
    return none if x is None else f"{x:,.0f} sessions"


def _crossing(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-" if a is None and b is None else f"only {'B' if a is None else 'A'} within range"
    return f"{a - b:+,.0f} sessions ({_rel(a, b)})"


def rows(a: Plan, b: Plan) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, A against B) for the crossovers, the savings at the planned load and the batch-1
    ratios they rest on."""
    out = []
    for metric, name in METRIC_NAMES.items():
        (a1, a2), (b1, b2) = a.crossover[metric], b.crossover[metric]
        out.append((f"{name} saving <= 1 from", _sessions(a1, "none within range"),
                    _sessions(b1, "none within range"), _crossing(a1, b1)))
        if a1 is not None or b1 is not None:
            out.append((f"{name} saving above 1 again from", _sessions(a2, "not within range"),
                        _sessions(b2, "not within range"), _crossing(a2, b2)))
    load = a.inputs.traffic.sessions
    for metric, name in METRIC_NAMES.items():
        out.append((f"{name} saving at {load:g} sessions", f"{a.saving[metric]:.2f}x", f"{b.saving[metric]:.2f}x",
                    _rel(a.saving[metric], b.saving[metric])))
    ka, kb = (decode_knee(p.inputs.strong, p.inputs.shapes.step.prompt) for p in (a, b))
    out += [("verifier replicas (today's verifier fleet, the sweep's)", str(a.inputs.strong.replicas),
             str(b.inputs.strong.replicas), _rel(a.inputs.strong.replicas, b.inputs.strong.replicas)),
            ("strong compute knee (sequences)", "none" if ka is None else f"{ka:.0f}",
             "none" if kb is None else f"{kb:.0f}", _rel(ka, kb)),
            ("kappa at batch 1 (weak / strong step)", f"{a.kappa:.3f}", f"{b.kappa:.3f}", _rel(a.kappa, b.kappa)),
            ("v/d at batch 1 (strong HBM)", f"{a.v_over_d:.3f}", f"{b.v_over_d:.3f}", _rel(a.v_over_d, b.v_over_d))]
    return out + headline_rows(a, fleet_views(a), fleet_views(b))


def headline_rows(a: Plan, va: dict[str, FleetView], vb: dict[str, FleetView]) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, A against B) of the headline on each GPU: each method on its own fleet sized to the
    planned load, and the saving (Strong-only / the method) there."""
    method, where = a.inputs.method, f"(fleet sized to {a.inputs.traffic.sessions:g} sessions)"
    out = []
    for figure, (get, fmt) in HEADLINE.items():
        for m in ("strong", method):
            x, y = get(va[m]), get(vb[m])
            out.append((f"{figure}, {NAME[m]} {where}", fmt.format(x), fmt.format(y), _rel(x, y)))
        sa, sb = (get(v["strong"]) / get(v[method]) for v in (va, vb))
        out.append((f"{figure} saving {where}", f"{sa:.2f}x", f"{sb:.2f}x", _rel(sa, sb)))
    return out


def compare_table(a: Side, b: Side) -> Table:
    """A's figures next to B's, each row labelled (the profiles' labels in the caption, the rest estimated);
    A against B is A / B - 1 (sessions also as A - B)."""
    t = Table(title=f"{a.flag} {a.profile} (A) against {b.flag} {b.profile} (B): ESTIMATED, every other flag the same",
              caption=f"A's GPU profile: {a.label}. B's: {b.label}.")
    for col in ("figure", f"A: {Path(a.profile).name}", f"B: {Path(b.profile).name}", "A against B", "label"):
        t.add_column(col, justify="left" if col in ("figure", "label") else "right", overflow="fold",
                     min_width=38 if col == "figure" else None)
    ga, gb = a.plan.inputs.strong.gpu, b.plan.inputs.strong.gpu
    t.add_row("HBM bandwidth per GPU, TB/s", f"{ga.hbm_bytes_per_s / 1e12:.2f}", f"{gb.hbm_bytes_per_s / 1e12:.2f}",
              _rel(ga.hbm_bytes_per_s, gb.hbm_bytes_per_s), "see the caption")
    t.add_row("peak_flops per GPU, TFLOP/s", f"{ga.peak_flops / 1e12:.0f}", f"{gb.peak_flops / 1e12:.0f}",
              _rel(ga.peak_flops, gb.peak_flops), "see the caption")
    for row in rows(a.plan, b.plan):
        t.add_row(*row, "estimated")
    return t


def compare_dict(b: Side) -> dict[str, Any]:
    """B's figures for ``plan.json`` (under ``compare``), its headline under ``fleet`` as ``plan.json``'s own;
    all ESTIMATED but the profile."""
    p = b.plan
    return {"flag": b.flag, "gpu_profile": b.profile, "labels": {"gpu": b.label, "outputs": "estimated"},
            "gpu": p.inputs.strong.gpu.model_dump(),
            "estimated": {"crossover": p.crossover, "saving": p.saving, "strong_replicas": p.inputs.strong.replicas,
                          "kappa": p.kappa, "v_over_d": p.v_over_d}, **fleet_dict(fleet_views(p))}
