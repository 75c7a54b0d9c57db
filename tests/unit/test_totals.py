"""Savings in total (costs/totals.py, bench/quality/beyond_totals.py, planner/fleet_tables.py): every role counted, one
fleet view in the planner, the goals stated in totals, the chain's mid chosen by the total."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import pytest

from specagent_ray.bench.quality import beyond_totals as bt
from specagent_ray.bench.quality.beyond import table
from specagent_ray.planner.command import add_parser, resolve
from specagent_ray.planner.fleet_tables import fleet_views
from specagent_ray.bench.quality.variants import MID_MODEL
from specagent_ray.costs.fleet import make_plan, size
from specagent_ray.costs.hardware import Hardware
from specagent_ray.costs.planner import operate
from specagent_ray.costs.totals import mix_from_usage, total_goals


def _plan(*flags: str):
    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    return make_plan(resolve(sub.choices["plan"].parse_args(list(flags))).inputs, points=4)


@pytest.mark.parametrize("flags", [(), ("--chain", "--mid-model", "qwen3-30b-a3b"), ("--sessions", "50")])
def test_the_fleet_table_derives_from_the_load_tables_operating_point_on_the_sized_fleet(flags):
    plan = _plan(*flags)
    i = plan.inputs
    for method, v in fleet_views(plan).items():
        s = size(i, method)  # the replicas table's sizing
        assert v.replicas["strong"] == s.strong_replicas
        if method != "strong":
            assert v.replicas["weak"] == s.weak_replicas and v.replicas.get("mid", 0) == s.mid_replicas
        sized = {r: replace(e, replicas=v.replicas.get(r, 1)) for r, e in
                 (("strong", i.strong), ("weak", i.weak), ("mid", i.mid)) if e is not None}
        op = operate(method, i.traffic, i.acceptance, i.shapes, sized["strong"], sized["weak"], mid=sized.get("mid"))
        assert op.steps_per_s == pytest.approx(v.steps_per_s) and op.cost == v.op.cost  # the load table's code
        gpus = sum(n * e.gpus for r, e in sized.items() if (n := v.replicas.get(r)))
        assert v.total_gpus == gpus and v.gpu_s_per_step == pytest.approx(gpus / op.steps_per_s)
        assert v.hbm()["total"] == pytest.approx(op.cost.strong.hbm + op.cost.mid.hbm + op.cost.weak.hbm)


def test_the_issues_two_answers_now_are_one_the_chain_headline_is_gpus_per_step_per_s():
    plan = _plan("--chain", "--escalate", "0.3", "--mid-model", "qwen3-30b-a3b")
    v = fleet_views(plan)
    # one figure, one meaning: GPU-s per committed step IS the GPUs held per committed step/s
    for m in ("strong", "chain"):
        assert v[m].gpu_s_per_step == pytest.approx(v[m].total_gpus / v[m].steps_per_s)
    assert v["chain"].gpus["mid"] > 0 and v["chain"].gpus["weak"] > 0


def test_a_mix_from_usage_is_calls_per_step_at_the_mean_shape_and_every_role_counts():
    mix = mix_from_usage({"strong": (2, 2000, 1000, 100), "weak": (10, 30000, 25000, 7000)}, steps=5)
    (k, s), = mix["strong"]
    assert k == pytest.approx(0.4) and (s.prompt, s.cached, s.decode) == (1000, 500, 50)
    assert mix["mid"] == [] and mix["weak"][0][0] == pytest.approx(2.0)
    with pytest.raises(ValueError):
        mix_from_usage({"strong": (1, 1, 0, 1)}, 0)


@pytest.mark.parametrize("hbm, gpus, lat, ok, verdicts", [
    (0.29, 0.79, 1.5, True, ("PASS", "PASS")), (0.31, 0.79, 1.5, True, ("MISS", "PASS")),
    (0.29, 0.81, 1.5, True, ("PASS", "MISS")), (0.29, 0.79, 1.3, True, ("PASS", "MISS")),
    (0.29, 0.79, 1.5, False, ("MISS", "MISS"))])
def test_the_goals_are_stated_in_totals_and_print_pass_or_miss_with_the_figure(hbm, gpus, lat, ok, verdicts):
    goals = total_goals("airline", hbm, gpus, lat, ok, "note")
    assert tuple(g.verdict for g in goals) == verdicts
    assert "all-role HBM" in goals[0].name and f"{hbm:.2f}x" in goals[0].figure
    assert "fleet sized to the load" in goals[1].name and f"{gpus:.2f}x" in goals[1].figure


def _row(calls, steps=10.0, ci=(math.nan, math.nan)):
    return {"committed_steps": steps, "usage": calls, "pass_at_1": 90.0, "ci_low": ci[0], "ci_high": ci[1]}


STRONG = _row({"strong": [10, 50_000, 45_000, 7_000]})
CHAIN = _row({"strong": [1, 6_000, 4_000, 1_400], "mid": [3, 18_000, 12_000, 4_200],
              "weak": [11, 60_000, 55_000, 8_000]}, 11.0, (-2.0, 3.0))


def test_the_mid_share_counts_in_the_goal_a_dense_mid_costs_more_than_an_moe_one():
    doms = {"airline": {"strong": STRONG, "specagent+chain": CHAIN}}
    cmp = bt.mid_comparison(doms, Hardware(mid_model="qwen3-32b"))
    assert {"qwen3-32b", "qwen3-30b-a3b", "qwen3.5-35b-a3b"} <= set(cmp)
    assert "qwen3-235b-a22b" not in cmp  # 470 GB does not fit two H20s
    assert cmp["qwen3-32b"]["airline"]["hbm_x"] > cmp["qwen3-30b-a3b"]["airline"]["hbm_x"]
    assert cmp["qwen3-32b"]["airline"]["mid_share"] > 0.1
    assert bt.best_mid(cmp) != "qwen3-32b"
    goals = bt.goals_of(doms, Hardware(mid_model="qwen3-32b"))
    assert len(goals) == 2 and all(g.scope == "airline: specagent+chain" for g in goals)


def test_the_beyond_table_prints_the_total_with_the_split_beside_it():
    from rich.console import Console

    rows = {"strong": {**STRONG, "strong_calls": 10, "strong_hbm_tb": 100.0, "mid_hbm_tb": 0.0, "weak_hbm_tb": 0.0,
                       "total_hbm_tb": 100.0, "wall_ms": 1, "wrong_critical_per_1000": 0},
            "specagent+chain": {**CHAIN, "strong_calls": 1, "strong_hbm_tb": 10.0, "mid_hbm_tb": 40.0,
                                "weak_hbm_tb": 20.0, "total_hbm_tb": 70.0, "wall_ms": 1, "wrong_critical_per_1000": 0}}
    console = Console(record=True, width=300)
    console.print(table("airline", rows))
    out = console.export_text()
    assert "70.0 (0.70x)" in out and "20.0 / 40.0 / 10.0" in out and "HBM TB all roles" in out


def test_the_default_mid_is_the_one_the_total_chose():
    from pathlib import Path

    import yaml

    from specagent_ray.planner.chain import add_chain_args

    p = argparse.ArgumentParser()
    add_chain_args(p)
    assert p.parse_args([]).mid_model == MID_MODEL
    profile = yaml.safe_load(Path("deployments/gpu-tp16-chain.yaml").read_text())
    sources = [c["model_loading_config"]["model_source"] for a in profile["applications"]
               for c in a.get("args", {}).get("llm_configs", [])]
    assert any(s.endswith("/" + MID_MODEL) for s in sources)
