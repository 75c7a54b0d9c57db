"""The planner's plot: the saving on today's verifier fleet against concurrent sessions, with the crossover marked
(ESTIMATED)."""

from __future__ import annotations

from pathlib import Path

from ..costs.fleet import Plan
from ..costs.totals import ROLES
from .chain import NAMES as METHOD

VIEW = "today's verifier fleet"  # the sweep keeps Strong-only's verifier replicas: plan's "On today's verifier fleet"
COLORS = {"hbm": "tab:blue", "gpu_s": "tab:orange", "latency": "tab:green"}


def plot(path: Path, plan: Plan) -> Path:
    """Two panels: the savings (Strong-only / the method) on today's verifier fleet against sessions, log x,
    with y = 1, each metric's crossover (dotted line, labelled) and the planned load; and each method's strong
    batch per replica. The legend and the axis name the roles and the view of each saving."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    i = plan.inputs
    xs = [p.sessions for p in plan.sweep]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), dpi=110)
    for metric, name in names(plan).items():
        left.plot(xs, [p.saving[metric] for p in plan.sweep], color=COLORS[metric], label=name)
        first, back = plan.crossover[metric]
        for n, what in ((first, "<= 1 from"), (back, "> 1 again from")):
            if n is not None:
                left.axvline(n, color=COLORS[metric], linestyle=":", linewidth=1)
                left.annotate(f"{what} {n:,.0f}", (n, 1.0), textcoords="offset points", xytext=(4, 8),
                              color=COLORS[metric], fontsize=8, rotation=90)
    left.axhline(1.0, color="black", linewidth=0.8)
    left.set_ylim(bottom=0)
    left.axvline(i.traffic.sessions, color="gray", linestyle="--", linewidth=0.8)
    left.annotate(f"planned load ({i.traffic.sessions:g})", (i.traffic.sessions, 1), xycoords=("data", "axes fraction"),
                  textcoords="offset points", xytext=(-4, -4), ha="right", va="top", fontsize=8, color="gray")
    left.set_xscale("log")
    left.set_xlabel("concurrent sessions")
    left.set_ylabel(f"saving on {VIEW}:\nStrong-only / {METHOD[i.method]} (ESTIMATED)")
    left.legend(fontsize=8, loc="best")
    left.grid(alpha=0.3)
    for method, style in (("strong", "-"), (i.method, "--")):
        right.plot(xs, [p.batch_strong[method] for p in plan.sweep], style, color="tab:purple",
                   label={"strong": "Strong-only", "specagent": "SpecAgent", "chain": "chain"}[method])
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("concurrent sessions")
    right.set_ylabel("strong batch per verifier replica (ESTIMATED)")
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    acc = i.acceptance
    fig.suptitle(f"Capacity plan (ESTIMATED): {i.strong.spec.name} on {i.strong.replicas} x {i.strong.gpus} "
                 f"{i.strong.gpu.name}, drafter {i.weak.spec.name}; p {acc.p:.2f}, n {acc.mean_n:.2f}, "
                 f"rho {acc.rho:.2f}, f {acc.f:.2f}; think {i.traffic.think_time_s:g} s/step", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def names(plan: Plan) -> dict[str, str]:
    """Each plotted saving's legend: what it counts (which roles) and on which fleet."""
    roles = " + ".join(r for r in ROLES if r != "mid" or plan.inputs.mid is not None)
    return {"hbm": "strong HBM per committed step (strong model only)",
            "gpu_s": f"busy GPU-s per committed step ({roles}; {VIEW})", "latency": f"step latency ({VIEW})"}
