"""`bench adaptive` and `plan --check-batch`: the pricing of realized call mixes and the goal checks."""

from __future__ import annotations

import argparse

import pytest
from rich.console import Console

from specagent_ray.planner.adaptive import (
    Level,
    Session,
    add_parser,
    call_mix,
    fitted_tokens,
    goals,
    priced,
    run_from_args,
)
from specagent_ray.planner.check_batch import predicted_batch
from specagent_ray.control.controller import TokenModel
from specagent_ray.costs.planner import role_cost


def session(steps, calls, reward=1.0, task="0"):
    return Session(task, 0, reward, steps, tuple(calls))


def test_a_call_mix_is_calls_per_committed_step_with_their_mean_tokens():
    runs = [session(4, [("strong", "verify", 100, 50, 10), ("weak", "draft", 80, 60, 20)] + [("weak", "draft", 40, 20, 0)]),
            session(6, [("strong", "verify", 300, 150, 30)])]
    mix, longest = call_mix(runs)
    (rate, shape), = mix["strong"]
    assert rate == pytest.approx(2 / 10) and (shape.prompt, shape.cached, shape.decode) == (200, 100, 20)
    (rate, shape), = mix["weak"]
    assert rate == pytest.approx(2 / 10) and shape.prompt == 60 and longest == 330


def test_a_mix_of_only_strong_steps_prices_like_strong_only():
    from dataclasses import replace

    from specagent_ray.planner.adaptive import default_inputs
    from specagent_ray.costs.planner import operate

    inputs = default_inputs()
    step = inputs.shapes.step
    runs = [session(10, [("strong", "step", step.prompt, step.cached, step.decode)] * 10)]
    shapes = replace(inputs.shapes, max_context=step.prompt + step.decode)
    plain = operate("strong", replace(inputs.traffic, sessions=100, steps_per_session=10), inputs.acceptance,
                    shapes, inputs.strong, inputs.weak)
    op = priced(runs, inputs, 100)
    assert op.cost.gpu_s == pytest.approx(plain.cost.gpu_s, rel=1e-6) and op.cost.weak.gpu_s == 0


def test_the_token_model_is_fitted_on_the_ledgers():
    """First prompts give the system prompt, the drafts' prompt slope the tokens per step, the decodes the
    step and verdict tokens."""
    def run(first, per_step, n):
        calls = [("weak", "draft", first + per_step * i, 0, 700) for i in range(n)]
        return session(n, calls + [("strong", "verify", first + per_step * n, 0, 1400)])

    tokens = fitted_tokens([run(4000, 100, 10), run(3000, 200, 5), run(5000, 150, 8)])
    assert (tokens.system, tokens.new, tokens.step, tokens.verdict) == pytest.approx((4000, 150, 700, 1400))
    assert fitted_tokens([session(1, [])]) == TokenModel()  # nothing to fit: the defaults


def level(strong, fixed, adaptive, pass_fixed=(90.0, 80.0, 100.0), pass_adaptive=90.0):
    figures = {m: {"gpu_seconds": v, "pass_at_1": pass_adaptive if m == "adaptive" else pass_fixed[0],
                   "pass_low": pass_fixed[1], "pass_high": pass_fixed[2]} for m, v in
               (("strong", strong), ("fixed", fixed), ("adaptive", adaptive))}
    return Level(10, "given", figures, {})


def test_the_goals_ask_for_a_margin_to_beat_both_and_no_more_than_3_percent_to_lose():
    met = dict(goals([level(2.0, 1.0, 1.0), level(1.0, 2.0, 1.0299)], "gpu_seconds"))
    assert list(met.values()) == [True, False, True]  # equal to the better is not beating it
    met = dict(goals([level(2.0, 1.0, 0.99), level(1.0, 2.0, 1.031)], "gpu_seconds"))
    assert list(met.values()) == [False, True, True]
    met = dict(goals([level(2.0, 1.0, 1.0, pass_adaptive=79.0)], "gpu_seconds"))
    assert list(met.values())[2] is False


def test_the_planners_batch_solves_littles_law():
    from dataclasses import replace

    from specagent_ray.planner.adaptive import default_inputs

    inputs = default_inputs()
    inputs = replace(inputs, strong=replace(inputs.strong, replicas=1))
    for x in (0.5, 5.0, 20.0):
        b = predicted_batch(inputs, "strong", x)
        s = role_cost("specagent", "strong", inputs.acceptance, inputs.shapes, inputs.strong, b).latency_s
        assert b == pytest.approx(x * s, rel=1e-3)


def parsed(argv):
    """The command's arguments as its parser gives them, defaults included."""
    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    return sub.choices["adaptive"].parse_args(argv)


@pytest.mark.slow
def test_the_bench_runs_end_to_end_and_writes_its_figures(tmp_path):
    """Without a mid verifier (the planner's SpecAgent crossover is the premise): K = 0 for some blocks past it."""
    args = parsed(["--levels", "10,1000", "--tasks", "8", "--trials", "1", "--mid-model", "none",
                   "--out", str(tmp_path / "adaptive.json")])
    run_from_args(args, Console(record=True))
    import json

    doc = json.loads(args.out.read_text())
    chosen = {lv["sessions"]: lv["chosen_k"] for lv in doc["levels"]}
    assert "0" not in chosen[10.0]  # 10 sessions: it speculates
    assert chosen[1000.0].get("0", 0) > 0  # past the crossover the strong model writes for some sessions
    assert doc["goals"]["gpu_seconds: adaptive within 3% of the best fixed method at every level"]


def test_the_route_sets_the_mid_verifier_for_the_blocks_sent_to_the_chain():
    from types import SimpleNamespace

    from specagent_ray.planner.adaptive import mid_switch

    parts, mid, heard = SimpleNamespace(mid="judge"), "judge", []
    route = mid_switch(parts, mid, heard)
    route(False)
    assert parts.mid is None  # the strong verifier alone reviews this block
    route(True)
    assert parts.mid == "judge" and heard == [False, True]


def test_the_chains_escalation_is_measured_as_strong_over_mid_verifies():
    from specagent_ray.planner.adaptive import chain_rates

    runs = [session(5, [("mid", "verify", 1, 0, 1)] * 4 + [("strong", "verify", 1, 0, 1)]),
            session(5, [("mid", "verify", 1, 0, 1)] * 6 + [("strong", "verify", 1, 0, 1), ("strong", "repair", 1, 0, 1)])]
    rates = chain_rates(runs)
    assert rates.e_accept == pytest.approx(2 / 10) and rates.e_reject is None and rates.rho_mid == 0.0


def totals_level(sessions, hbm, gpus, latency):
    """A level with the fleet figures the goals in totals read, per method (Pass@1 all alike)."""
    figures = {m: {"fleet_hbm_total": hbm[m], "fleet_gpu_s_per_step": gpus[m], "fleet_latency": latency[m],
                   "pass_at_1": 90.0, "pass_low": 80.0, "pass_high": 100.0} for m in hbm}
    return Level(sessions, "given", figures, {})


def test_the_goals_in_totals_hold_the_chain_and_adaptive_against_strong_only():
    from specagent_ray.planner.adaptive_report import total_goals_of

    ms = ("strong", "fixed", "chain", "adaptive")
    low = totals_level(10, dict(zip(ms, (10.0, 4.0, 2.5, 3.1), strict=True)), dict.fromkeys(ms, 1.0),
                       dict.fromkeys(ms, 1.0))
    high = totals_level(1000, dict.fromkeys(ms, 1.0), dict(zip(ms, (1.0, 0.9, 0.7, 0.7), strict=True)),
                        dict(zip(ms, (3.0, 2.0, 2.0, 2.1), strict=True)))
    goals = total_goals_of([low, high])
    assert [(g.scope, g.verdict) for g in goals] == [
        ("fixed K", "MISS"), ("fixed K", "MISS"), ("chain, fixed K", "PASS"), ("chain, fixed K", "PASS"),
        ("adaptive", "MISS"), ("adaptive", "PASS")]
    assert goals[2].figure.startswith("0.25x") and "latency 1.50x" in goals[3].figure


def test_a_levels_table_prints_every_role_and_the_chain():
    from specagent_ray.planner.adaptive_report import ROWS, level_table

    keys = [k for k, _, _ in ROWS]
    figures = {m: {**dict.fromkeys(keys, 1.0), "pass_at_1": 1.0, "pass_low": 0.0, "pass_high": 2.0}
               for m in ("strong", "fixed", "chain", "adaptive")}
    console = Console(record=True, width=400)
    console.print(level_table(Level(10, "given", figures, {"3 chain": 5, "0": 2}), "hbm"))
    text = console.export_text()
    for label in ("busy GPU-s, all roles", "HBM all roles, TB (objective)", "of which mid, TB",
                  "of which strong (strong model only), TB", "chain, fixed K", "3 chain: 5, 0: 2"):
        assert label in text, label


@pytest.mark.slow
def test_with_a_mid_verifier_the_bench_routes_blocks_to_the_chain_and_checks_it_in_totals(tmp_path):
    import json

    args = parsed(["--levels", "10", "--tasks", "4", "--trials", "1", "--objective", "hbm",
                   "--out", str(tmp_path / "adaptive.json")])
    run_from_args(args, Console(record=True))
    doc = json.loads(args.out.read_text())
    (level,) = [lv for lv in doc["levels"] if lv["sessions"] == 10.0]
    assert any(key.endswith(" chain") for key in level["chosen_k"])  # an MoE mid saves HBM in total at 10
    f = level["figures"]
    assert f["chain"]["mid_hbm"] > 0 and f["fixed"]["mid_hbm"] == 0 == f["strong"]["mid_hbm"]
    for m in ("strong", "fixed", "chain", "adaptive"):
        assert f[m]["hbm_total"] == pytest.approx(f[m]["weak_hbm"] + f[m]["mid_hbm"] + f[m]["strong_hbm"])
