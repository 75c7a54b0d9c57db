"""``bench beyond`` in totals: each variant's measured call mix priced on fleets sized to 10 and 1,000 sessions
(every role counted), the issue's goals on those figures, and the chain's mid verifier compared across the
model specs that could hold it.

Pass@1 is tau2's evaluator on SIMULATED policies; tokens per call are SIMULATED (the sessions' ledgers); every
cost is ESTIMATED (``costs/totals.py``: the planner's closed loop on a fleet sized to the load, the paper's
deployment: the strong model on 16 H20 a replica, the drafter on 1, the mid on ``--mid-gpus``).

The simulated mid judge does not depend on the mid's model spec (its rates are stated, docs/simulation.md), so
every mid candidate has the same Pass@1 by construction: the comparison is at Pass@1 parity, and it is a
comparison of costs only. Whether a given model reaches the stated rates is not measured here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from ...costs.calls import Acceptance
from ...costs.hardware import Hardware
from ...costs.planner import Engine, Traffic
from ...costs.specs import load_gpu, load_model, model_names
from ...costs.totals import (
    GOAL_HIGH,
    GOAL_LOW,
    ROLES,
    FleetView,
    Goal,
    fleet_view,
    load_goals,
    mix_from_usage,
    mix_shapes,
)

THINK_TIME_S = 1.0  # `plan`'s default: tools and user per committed step
MAX_BATCH = 256  # `plan`'s default (vLLM max_num_seqs)
ACC = Acceptance.from_mean(0.82, 1.6, 0.2, 0.29)  # unused by a measured mix; operate() takes one
GOAL_VARIANT = "specagent+chain"


def usage_of(results: Sequence[Any]) -> dict[str, list[float]]:
    """Each role's (calls, prompt, cached, decode) per session, means over ``results`` (TrialResults)."""
    out = {}
    for role in ROLES:
        used = [getattr(r, role) for r in results if getattr(r, role, None) is not None]
        if used:
            out[role] = [sum(getattr(u, f) for u in used) / len(results)
                         for f in ("calls", "prompt_tokens", "cached_prompt_tokens", "decode_tokens")]
    return out


def engines_of(hardware: Hardware, mid_model: str | None = None) -> dict[str, Engine]:
    """The deployment's roles as planner engines (one replica each; sizing replaces the count)."""
    gpu = load_gpu(hardware.gpu)
    out = {"strong": Engine(load_model(hardware.strong_model), gpu, hardware.strong_gpus, 1, MAX_BATCH),
           "weak": Engine(load_model(hardware.weak_model), gpu, hardware.weak_gpus, 1, MAX_BATCH)}
    mid = mid_model or hardware.mid_model
    if mid is not None:
        out["mid"] = Engine(load_model(mid), gpu, hardware.mid_gpus, 1, MAX_BATCH)
    return out


def view(row: Mapping[str, Any], engines: Mapping[str, Engine], sessions: float) -> FleetView:
    """A variant's row (its ``usage`` per session and committed steps) on a fleet sized for ``sessions``."""
    steps = row["committed_steps"]
    mix = mix_from_usage({r: tuple(v) for r, v in row["usage"].items()}, steps)
    traffic = Traffic(sessions, max(1.0, steps), THINK_TIME_S)
    return fleet_view(mix, engines, traffic, ACC, mix_shapes(mix))


def at_loads(rows: Mapping[str, Mapping[str, Any]], engines: Mapping[str, Engine]) -> dict[str, dict[str, float]]:
    """Per variant, the figures the goals read, at 10 and 1,000 sessions (ESTIMATED)."""
    out = {}
    for name, row in rows.items():
        lo, hi = view(row, engines, GOAL_LOW), view(row, engines, GOAL_HIGH)
        out[name] = {**{f"hbm_{r}_tb": v / 1e12 for r, v in lo.hbm().items()},
                     "gpus": hi.total_gpus, "steps_per_s": hi.steps_per_s, "gpu_s_per_step": hi.gpu_s_per_step,
                     "busy_gpu_s_per_step": hi.busy_gpu_s_per_step, "latency_s": hi.step_latency_s,
                     **{f"gpus_{r}": n for r, n in hi.gpus.items()}}
    return out


def _pass_note(row: Mapping[str, Any]) -> tuple[bool, str]:
    lo, hi = row["ci_low"], row["ci_high"]
    if math.isnan(lo):  # Strong-only itself
        return True, "Pass@1 is Strong-only's"
    return lo <= 0 <= hi, f"Pass@1 {row['pass_at_1']:.1f}, diff CI [{lo:+.1f}, {hi:+.1f}] vs Strong-only"


def goals_of(domains: Mapping[str, Mapping[str, Mapping[str, Any]]], hardware: Hardware,
             variant: str = GOAL_VARIANT) -> list[Goal]:
    """The issue's goals in totals for ``variant`` on each domain (SIMULATED policies, ESTIMATED costs)."""
    engines = engines_of(hardware)
    out: list[Goal] = []
    for domain, rows in domains.items():
        if "strong" not in rows or variant not in rows:
            continue
        so, me = rows["strong"], rows[variant]
        ok, note = _pass_note(me)
        out += load_goals(f"{domain}: {variant}", (view(so, engines, GOAL_LOW), view(me, engines, GOAL_LOW)),
                          (view(so, engines, GOAL_HIGH), view(me, engines, GOAL_HIGH)), ok, note)
    return out


def goal_table(goals: Sequence[Goal]) -> Table:
    t = Table(title="goals in totals (every role counted; SIMULATED policies, ESTIMATED costs)")
    for c in ("goal", "domain / variant", "figure", "verdict"):
        t.add_column(c, overflow="fold")
    for g in goals:
        t.add_row(g.name, g.scope, g.figure, g.verdict)
    return t


def mid_candidates(hardware: Hardware) -> list[str]:
    """The dense default and every MoE spec (other than the strong and weak models) whose weights and one
    session's KV fit ``mid_gpus`` GPUs of the profile."""
    out = []
    for name in model_names():
        spec = load_model(name)
        if name in (hardware.strong_model, hardware.weak_model) or not (spec.is_moe or name == "qwen3-32b"):
            continue
        try:
            Engine(spec, load_gpu(hardware.gpu), hardware.mid_gpus).batch_cap(16_384)
        except ValueError:
            continue
        out.append(name)
    return out


def mid_comparison(domains: Mapping[str, Mapping[str, Mapping[str, Any]]], hardware: Hardware,
                   variant: str = GOAL_VARIANT) -> dict[str, dict[str, dict[str, float]]]:
    """Per mid candidate, per domain: all-role HBM at 10 sessions and GPUs per committed step/s at 1,000 (each
    x Strong-only), the mid's share of that HBM and the latency saving, with the chain's ``variant`` mix."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in mid_candidates(hardware):
        engines = engines_of(hardware, name)
        per = {}
        for domain, rows in domains.items():
            if "strong" not in rows or variant not in rows:
                continue
            so = (view(rows["strong"], engines, GOAL_LOW), view(rows["strong"], engines, GOAL_HIGH))
            me = (view(rows[variant], engines, GOAL_LOW), view(rows[variant], engines, GOAL_HIGH))
            hbm = me[0].hbm()
            per[domain] = {"hbm_x": hbm["total"] / so[0].hbm()["total"], "mid_share": hbm["mid"] / hbm["total"],
                           "gpus_x": me[1].gpu_s_per_step / so[1].gpu_s_per_step,
                           "latency_saving": so[1].step_latency_s / me[1].step_latency_s,
                           "mid_gpus": me[1].gpus.get("mid", 0), "pass_at_1": rows[variant]["pass_at_1"]}
        out[name] = per
    return out


def eligible(name: str, hardware: Hardware) -> bool:
    """A mid that can be the default: weights at the strong model's precision. A candidate whose weights ship
    in another precision (gpt-oss-120b: MXFP4) is compared but not chosen: its saving would be the precision's,
    which the strong model and the drafter could have too, and its tokenizer differs from the drafter's, whose
    token counts price it here."""
    return load_model(name).bytes_per_param == load_model(hardware.strong_model).bytes_per_param


def best_mid(comparison: Mapping[str, Mapping[str, Mapping[str, float]]], hardware: Hardware | None = None) -> str:
    """The eligible candidate with the lowest mean over domains of (all-role HBM x + GPUs per step/s x): the
    two totals the operator pays, weighted alike."""
    def score(per: Mapping[str, Mapping[str, float]]) -> float:
        return sum(d["hbm_x"] + d["gpus_x"] for d in per.values()) / max(1, len(per))
    hw = hardware or Hardware()
    return min((n for n in comparison if eligible(n, hw)), key=lambda name: score(comparison[name]))


def mid_table(comparison: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Table:
    t = Table(title=f"the chain's mid verifier by the total ({GOAL_VARIANT}; Pass@1 identical by construction; "
                    "ESTIMATED costs, SIMULATED tokens)")
    for c in ("mid model", "domain", f"all-role HBM x ({GOAL_LOW:g} sessions)", "mid share of it",
              f"GPUs per step/s x ({GOAL_HIGH:,.0f})", "latency saving", "mid GPUs"):
        t.add_column(c, justify="left" if c in ("mid model", "domain") else "right")
    winner = best_mid(comparison) if comparison else None
    for name, per in comparison.items():
        for domain, d in per.items():
            mark = " (chosen)" if name == winner else "" if eligible(name, Hardware()) else " (not eligible)"
            t.add_row(name + mark, domain, f"{d['hbm_x']:.2f}x",
                      f"{d['mid_share']:.0%}", f"{d['gpus_x']:.2f}x", f"{d['latency_saving']:.2f}x",
                      str(int(d["mid_gpus"])))
    return t
