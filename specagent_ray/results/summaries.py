"""Summaries, the Proposition 1/2 check, and the three outputs: a rich table, JSON, and a PNG plot.

Every figure carries its kind: Pass@1 is measured by tau2's evaluator; tokens come from the
simulated token model; FLOPs, HBM-read and GPU latency are estimated; wall time is measured.
HBM, FLOPs and GPU latency count every role (drafter, the chain's mid where a run has one, strong), each
call priced alone; the ``strong_*`` figures count the strong model only.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..costs.theory import expected_steps_per_block, l_u, r_u
from ..storage.local import LocalStore
from .stats import gap_recovered, paired_bootstrap, pass_at_1
from .trial import RoleUsage, TrialResult, by_method

TB = 1e12


@dataclass(frozen=True)
class MethodSummary:
    method: str
    trajectories: int
    pass_at_1: float
    diff_vs_strong: float
    ci_low: float
    ci_high: float
    gap_recovered: float
    strong_calls: float  # per task
    strong_decode_tokens: float
    strong_prefill_tokens: float
    weak_tokens: float
    committed_steps: float
    strong_hbm_tb: float  # per task, estimated (midpoint), strong model only
    strong_hbm_low_tb: float
    strong_hbm_high_tb: float
    flops: float  # per task, every role (weak + mid + strong), estimated
    gpu_latency_s: float  # per task, every role, estimated
    wall_ms: float  # per task, measured
    strong_tokens: float = math.nan  # per task, prompt + decode
    repair_cached_share: float = math.nan  # cached / prompt tokens over all strong repair calls
    dollars: float = math.nan  # per task, list prices of the priced roles; NaN when none is priced
    flops_paper_layout: float = math.nan  # FLOPs had repair prompts shared no prefix with verify prompts
    # HBM read per task, ESTIMATED, each call priced alone; NaN in results written before these fields
    total_hbm_tb: float = math.nan  # every role: weak + mid + strong (midpoint)
    total_hbm_low_tb: float = math.nan
    total_hbm_high_tb: float = math.nan
    weak_hbm_tb: float = math.nan  # the drafter alone
    mid_hbm_tb: float = math.nan  # the chain's mid alone; 0 for a method without one


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _share(part: float, whole: float) -> float:
    return part / whole if whole else math.nan


def _roles(r: TrialResult) -> tuple[RoleUsage, ...]:
    """The roles one trajectory used: drafter, strong, and the chain's mid when it had one."""
    return (r.weak, r.strong) if r.mid is None else (r.weak, r.strong, r.mid)


def _hbm_tb(u: RoleUsage | None, bound: str = "midpoint") -> float:
    """One role's HBM read in TB (estimated): the range's ``low``, ``high`` or midpoint; 0 for no role."""
    if u is None:
        return 0.0
    return {"low": u.hbm_low, "high": u.hbm_high}.get(bound, (u.hbm_low + u.hbm_high) / 2) / TB


def _total_hbm_tb(r: TrialResult, bound: str = "midpoint") -> float:
    return sum(_hbm_tb(u, bound) for u in _roles(r))


def method_summaries(results: Sequence[TrialResult], seed: int = 0) -> list[MethodSummary]:
    """One summary per method, in the order the methods first appear. Pass@1's interval is paired against
    Strong-only's tasks; every cost is a mean per task (trajectory)."""
    groups = by_method(results)
    strong, weak = groups.get("strong"), groups.get("weak")
    p_strong = pass_at_1(strong) if strong else math.nan
    p_weak = pass_at_1(weak) if weak else math.nan
    out = []
    for method, rs in groups.items():
        p = pass_at_1(rs)
        diff, lo, hi = paired_bootstrap(rs, strong, seed=seed) if strong else (math.nan,) * 3
        out.append(MethodSummary(
            method=method, trajectories=len(rs), pass_at_1=p, diff_vs_strong=diff, ci_low=lo, ci_high=hi,
            gap_recovered=gap_recovered(p, p_weak, p_strong),
            strong_calls=_mean([r.strong.calls for r in rs]),
            strong_decode_tokens=_mean([r.strong.decode_tokens for r in rs]),
            strong_prefill_tokens=_mean([r.strong.prompt_tokens - r.strong.cached_prompt_tokens for r in rs]),
            weak_tokens=_mean([r.weak.prompt_tokens + r.weak.decode_tokens for r in rs]),
            committed_steps=_mean([r.committed_steps for r in rs]),
            strong_hbm_tb=_mean([(r.strong.hbm_low + r.strong.hbm_high) / 2 / TB for r in rs]),
            strong_hbm_low_tb=_mean([r.strong.hbm_low / TB for r in rs]),
            strong_hbm_high_tb=_mean([r.strong.hbm_high / TB for r in rs]),
            flops=_mean([sum(u.flops for u in _roles(r)) for r in rs]),
            flops_paper_layout=_mean([(r.flops_paper_layout or r.strong.flops + r.weak.flops)
                                      + (r.mid.flops if r.mid else 0.0) for r in rs]),
            gpu_latency_s=_mean([sum(u.gpu_latency_s for u in _roles(r)) for r in rs]),
            wall_ms=_mean([r.wall_s * 1000 for r in rs]),
            strong_tokens=_mean([r.strong.prompt_tokens + r.strong.decode_tokens for r in rs]),
            repair_cached_share=_share(sum(r.repair_cached_tokens for r in rs), sum(r.repair_prompt_tokens for r in rs)),
            dollars=_mean([r.resources.dollars for r in rs if r.resources and r.resources.dollars is not None]),
            total_hbm_tb=_mean([_total_hbm_tb(r) for r in rs]),
            total_hbm_low_tb=_mean([_total_hbm_tb(r, "low") for r in rs]),
            total_hbm_high_tb=_mean([_total_hbm_tb(r, "high") for r in rs]),
            weak_hbm_tb=_mean([_hbm_tb(r.weak) for r in rs]), mid_hbm_tb=_mean([_hbm_tb(r.mid) for r in rs]),
        ))
    return out


@dataclass(frozen=True)
class TheoryCheck:
    """Propositions 1/2 predicted from the run's own counts, next to the measured (estimated-cost) ratio.

    The paper's formulas cover reviewed blocks. Here a share ``1 - reviewed_share`` of committed steps
    never meets the verifier (read-only blocks, messages sent at once): they cost the strong model
    nothing and the weak model one step (kappa). So the prediction is
    ``R = f * R_u(p, n, v/d, rho)`` and ``L = f * L_u(...) + (1 - f) * kappa`` with f the reviewed share.
    Blocks also vary in length (n is their mean, rounded), so this is a consistency check, not the
    0.01 claim; that is checked under Assumption 2 by ``specagent-ray bench theory``.
    """

    method: str
    p: float
    n: float
    v_over_d: float
    rho: float
    kappa: float
    reviewed_share: float
    r_predicted: float
    r_measured: float
    l_predicted: float
    l_measured: float
    r_predicted_per_task: float = math.nan  # from each task's own p_u and each block's own n
    l_predicted_per_task: float = math.nan


def theory_check(results: Sequence[TrialResult], method: str) -> TheoryCheck | None:
    groups = by_method(results)
    rs, strong = groups.get(method), groups.get("strong")
    if not rs or not strong:
        return None
    b = [r.blocks for r in rs]
    accepted, rejections = sum(x.accepted_steps for x in b), sum(x.rejections for x in b)
    blocks, reviewed = sum(x.reviewed_blocks for x in b), sum(x.reviewed_steps for x in b)
    committed = sum(r.committed_steps for r in rs)
    if blocks == 0 or accepted + rejections == 0 or committed == 0:
        return None
    hbm = lambda u: (u.hbm_low + u.hbm_high) / 2  # noqa: E731
    strong_calls = sum(r.strong.calls for r in strong)
    d = sum(hbm(r.strong) for r in strong) / strong_calls
    d_lat = sum(r.strong.gpu_latency_s for r in strong) / strong_calls
    v = _verify_cost(rs, hbm)
    p = accepted / (accepted + rejections)
    n = max(1, round(reviewed / blocks))
    rho = min(1.0, sum(x.strong_repairs for x in b) / rejections) if rejections else 0.0
    weak_calls = sum(r.weak.calls for r in rs)
    kappa = (sum(r.weak.gpu_latency_s for r in rs) / weak_calls) / d_lat if weak_calls else 0.0
    f = min(1.0, (accepted + rejections) / committed)
    per_step = lambda xs, g: sum(g(r) for r in xs) / sum(r.committed_steps for r in xs)  # noqa: E731
    lat = lambda r: r.strong.gpu_latency_s + r.weak.gpu_latency_s  # noqa: E731
    r_task, l_task = _per_task_prediction(rs, v / d, rho, kappa)
    return TheoryCheck(
        method, p, reviewed / blocks, v / d, rho, kappa, f,
        r_predicted=f * r_u(p, n, v / d, rho),
        r_measured=per_step(rs, lambda r: hbm(r.strong)) / per_step(strong, lambda r: hbm(r.strong)),
        l_predicted=f * l_u(p, n, v / d, rho, kappa) + (1 - f) * kappa,
        l_measured=per_step(rs, lat) / per_step(strong, lat),
        r_predicted_per_task=r_task, l_predicted_per_task=l_task,
    )


def _per_task_prediction(rs: Sequence[TrialResult], v_over_d: float, rho: float, kappa: float
                         ) -> tuple[float, float]:
    """Propositions 1/2 as the paper applies them: each task with its own acceptance rate p_u, each
    reviewed block with its own length n, averaged over committed steps. Per task, a block of length n
    costs one verdict (v/d) and commits ``expected_steps_per_block(p_u, n)`` steps on average; the
    drafter spends n steps of weak latency (kappa) on it."""
    by_task: dict[str, list[TrialResult]] = {}
    for r in rs:
        by_task.setdefault(r.task_id, []).append(r)
    r_sum = l_sum = committed_all = 0.0
    for runs in by_task.values():
        b = [r.blocks for r in runs]
        accepted, rejections = sum(x.accepted_steps for x in b), sum(x.rejections for x in b)
        committed = sum(r.committed_steps for r in runs)
        lengths = [n for x in b for n in x.block_lengths]
        committed_all += committed
        if not lengths or accepted + rejections == 0 or committed == 0:
            l_sum += committed * kappa  # nothing reviewed: every step is a weak step
            continue
        p_t = accepted / (accepted + rejections)
        expected = sum(expected_steps_per_block(p_t, n) for n in lengths)
        f_t = min(1.0, (accepted + rejections) / committed)
        r_t = f_t * (len(lengths) * v_over_d / expected + rho * (1 - p_t))
        r_sum += committed * r_t
        l_sum += committed * (r_t + f_t * kappa * sum(lengths) / expected + (1 - f_t) * kappa)
    return (r_sum / committed_all, l_sum / committed_all) if committed_all else (math.nan, math.nan)


def _verify_cost(rs: Sequence[TrialResult], hbm) -> float:
    """Mean strong HBM per verify call: strong cost not spent on repairs, over reviewed blocks."""
    total = sum(hbm(r.strong) for r in rs)
    calls = sum(r.strong.calls for r in rs)
    repairs = sum(r.blocks.strong_repairs for r in rs)
    blocks = sum(r.blocks.reviewed_blocks for r in rs)
    per_call = total / calls if calls else 0.0
    return (total - per_call * repairs) / blocks if blocks else math.nan


SIMULATED_LABELS = {"policies": "simulated", "pass_at_1": "measured (tau2 evaluator)", "tokens": "simulated",
                    "flops_hbm_gpu_latency": "estimated", "wall": "measured"}
LIVE_LABELS = {"policies": "live engines", "pass_at_1": "measured (tau2 evaluator)",
               "tokens": "measured (engine usage)", "flops_hbm_gpu_latency": "estimated", "wall": "measured",
               "dollars": "estimated from list prices"}


def write_json(path: Path, results: Sequence[TrialResult], summary: Sequence[MethodSummary],
               theory: Sequence[TheoryCheck], meta: dict, labels: dict = SIMULATED_LABELS) -> None:
    doc = {
        "labels": labels,
        "meta": meta,
        "summary": [asdict(s) for s in summary],
        "theory": [asdict(t) for t in theory],
        "results": [r.model_dump() for r in results],
    }
    LocalStore(path.parent).put(path.name, json.dumps(doc, indent=1, default=str).encode())  # atomic


def plot(path: Path, summary: Sequence[MethodSummary], title: str) -> None:
    """Pass@1 against HBM read per task of every role (drafter + mid + strong), each with its estimated range:
    the paper's operating points, counted in total."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    placed: list[tuple[float, float]] = []
    x_span = max((s.total_hbm_high_tb for s in summary), default=1.0) or 1.0
    for s in summary:
        x = s.total_hbm_tb
        ax.errorbar(x, s.pass_at_1, xerr=[[x - s.total_hbm_low_tb], [s.total_hbm_high_tb - x]], fmt="o", capsize=3)
        # labels of coinciding points (e.g. Speculative Actions sits on Strong-only) stack downwards
        near = sum(abs(px - x) < 0.03 * x_span and abs(py - s.pass_at_1) < 0.5 for px, py in placed)
        placed.append((x, s.pass_at_1))
        ax.annotate(s.method, (x, s.pass_at_1), textcoords="offset points", xytext=(6, 4 - 12 * near))
    ax.set_xlabel("HBM read per task, all roles (drafter + mid + strong), TB (estimated)")
    ax.set_ylabel("Pass@1, % (tau2 evaluator)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
