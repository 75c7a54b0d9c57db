"""The speculation controller (control/controller.py): K per block from acceptance and engine load, pure."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from specagent_ray.control.controller import (
    OBJECTIVES,
    Choice,
    Controller,
    Estimate,
    Load,
    capped_acceptance,
    write_share_for,
)
from specagent_ray.costs.fleet import make_plan, weak_for
from specagent_ray.control.online import AdaptiveK, OnlineEstimate, Prior
from specagent_ray.costs.planner import Engine
from specagent_ray.costs.specs import load_gpu, load_model
from specagent_ray.protocol.types import (
    Action,
    Effect,
    History,
    Observation,
    Step,
    Task,
)

H20 = load_gpu("h20")
STRONG = Engine(load_model("qwen3.5-397b-a17b"), H20, 16)
WEAK = Engine(load_model("qwen3-4b"), H20, 1)


def default_plan_inputs():
    """`specagent-ray plan`'s inputs with every default."""
    from specagent_ray.planner.command import add_parser, resolve

    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    return resolve(sub.choices["plan"].parse_args([])).inputs


def test_past_the_planners_gpu_seconds_crossover_it_picks_k0():
    """The planner says SpecAgent costs more GPU-seconds than Strong-only past its crossover (same fleet);
    there the controller lets the strong model write, and at a light load it speculates."""
    plan = make_plan(default_plan_inputs())
    i = plan.inputs
    first, _ = plan.crossover["gpu_s"]
    assert first is not None
    est = Estimate(i.acceptance.p, (0.3,), i.acceptance.rho)
    for sessions, speculates in ((1.5 * first, False), (10, True)):
        controller = Controller(i.strong, weak_for(i, sessions), "gpu_seconds")
        assert (controller.choose(est, Load(sessions)) > 0) is speculates, sessions


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_at_batch_1_with_high_acceptance_it_drafts_more_than_one_step(objective):
    assert Controller(STRONG, WEAK, objective).choose(Estimate(0.9, (0.3,), 0.2), Load(1)) > 1


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("p", [0.1, 0.01, 0.0])
def test_as_acceptance_goes_to_zero_it_picks_k0(objective, p):
    controller = Controller(STRONG, WEAK, objective)
    assert controller.choose(Estimate(p, (0.3,), 0.2), Load(1)) == 0
    assert controller.choose_quantized(Estimate(0.95, (0.3,), 0.2), Load(1)) > 0  # it speculates when that pays


def test_a_fixed_table_maps_the_strong_batch_to_k():
    controller = Controller(STRONG, WEAK, table=((4, 6), (32, 3), (128, 1), (1e9, 0)), k_max=5)
    assert [controller.choose(Estimate(0.0, (0.3,), 0.2), Load(1, b)) for b in (1, 4, 5, 32, 100, 500)] == [
        5, 5, 3, 3, 1, 0]


def test_a_table_that_does_not_rise_is_refused():
    with pytest.raises(ValueError, match="rising"):
        Controller(STRONG, WEAK, table=((32, 3), (4, 6)))


def test_the_block_accounting_matches_proposition_1_when_every_block_ends_in_a_write():
    acc = capped_acceptance(1, 0.8, (1.0,), 0.2)
    assert acc.blocks == ((1, 1.0),) and acc.f == pytest.approx(1.0) and acc.extra_drafts == pytest.approx(0.0)
    acc = capped_acceptance(3, 0.8, (0.0,), 0.2)  # no write ever: nearly every block is 3 unreviewed reads
    assert acc.f < 0.01 and acc.drafts_per_step == pytest.approx(1 / 0.8, rel=0.01)  # 1 - p of them wasted
    acc = capped_acceptance(3, 0.8, (0.5, 1.0), 0.2)  # a write first or second: every block is reviewed
    assert [(n, round(w, 6)) for n, w in acc.blocks] == [(1, 0.5), (2, 0.5), (3, 0.0)] and acc.f == pytest.approx(1.0)


def test_the_online_estimate_starts_at_the_prior_and_follows_the_session():
    est = OnlineEstimate(Prior(p_read=0.8, p_write=0.6, write_share=0.5, rho=0.5, weight=2), positions=4)
    assert (est.p("read"), est.p("write")) == (0.8, 0.6) and est.estimate().p == pytest.approx(0.7)
    assert est.hazards() == (0.5, 0.5, 0.5, 0.5)
    for _ in range(50):  # read, read, staged write: the second read is rejected, no fused repair
        est.drafted(["read", "read", "write"], staged=True)
        est.reviewed(["read", "read", "write"], accepted=1, separate_repair=True)
    assert est.p("read") == pytest.approx((50 + 1.6) / (100 + 2))
    assert est.p("write") == 0.6  # no write was judged: a rejection stops the judging
    e = est.estimate()
    assert e.hazards == pytest.approx(((0 + 1) / 52, (0 + 1) / 52, (50 + 1) / 52, 0.5))  # writes come third
    assert e.rho == pytest.approx((50 + 1) / (50 + 2))
    assert e.blocks == 50 and OnlineEstimate().estimate().blocks == 0  # the drafted blocks behind it


@pytest.mark.parametrize("bad", [{"weight": 0}, {"p_read": 1.2}, {"hazards": (0.5, -0.1)}])
def test_a_prior_out_of_range_is_refused(bad):
    with pytest.raises(ValueError):
        Prior(**bad)


def near_the_crossover(mult: float):
    """A controller at ``mult`` times the planner's GPU-seconds crossover, its load, and an estimate maker
    at the plan's write hazard (solved from its f at K = 6, as `plan` does)."""
    plan = make_plan(default_plan_inputs())
    i, acc = plan.inputs, plan.inputs.acceptance
    sessions = mult * plan.crossover["gpu_s"][0]
    hazard = write_share_for(acc.f, acc.p, 6, acc.rho)
    return (Controller(i.strong, weak_for(i, sessions), "gpu_seconds"), Load(sessions),
            lambda p, blocks: Estimate(p, (hazard,), acc.rho, blocks))


def k0_over_cheapest(controller, est, load):
    costs = controller.costs(est, load.sessions)
    return costs[Choice(0)] / min(c for choice, c in costs.items() if choice.k >= 1)


def test_past_the_crossover_each_session_decides_on_its_own_estimate():
    """One load, two sessions with evidence: the one that drafts well speculates, the other does not."""
    controller, load, est = near_the_crossover(1.2)
    assert controller.choose(est(0.98, 5), load) > 0 and controller.choose(est(0.6, 5), load) == 0


def test_a_session_drafts_until_its_estimate_has_blocks_behind_it():
    """Where K = 0 wins at the prior by less than explore_margin, a new session still drafts its exploring
    blocks; where it wins by more, or once the blocks are drafted, the strong model writes."""
    controller, load, est = near_the_crossover(0.8)
    assert controller.switch_margin < 1 - k0_over_cheapest(controller, est(0.6, 0), load) < controller.explore_margin
    assert controller.choose(est(0.6, 0), load) > 0 and controller.choose(est(0.6, 1), load) > 0
    assert controller.choose(est(0.6, controller.explore_blocks), load) == 0
    assert replace(controller, explore_blocks=0).choose(est(0.6, 0), load) == 0
    assert 1 - k0_over_cheapest(controller, est(0.3, 0), load) > controller.explore_margin
    assert controller.choose(est(0.3, 0), load) == 0


def test_adaptive_k_learns_from_blocks_and_reads_the_load_each_time():
    loads = iter([Load(1), Load(1)])
    chosen = []
    k = AdaptiveK(Controller(STRONG, WEAK, "latency"), lambda: next(loads), Prior(weight=1), chosen.append)
    h = History(Task("t", "x"))
    assert k.next_k(h) > 0
    read = Step(Action.tool("find"), Observation("ok"), "weak", Effect.READ)
    write = Step(Action.tool("book"), None, "weak", Effect.WRITE)
    for _ in range(40):  # every block rejected at its first step
        k.drafted([read, write], True)
        k.reviewed([read, write], 0, True)
    assert k.next_k(h) == 0 and chosen[-1] == 0 and len(chosen) == 2
    with pytest.raises(StopIteration):
        k.next_k(h)  # asked the load again


@pytest.mark.parametrize("bad", [{"explore_blocks": -1}, {"explore_margin": 1.0}, {"explore_margin": -0.1}])
def test_exploring_knobs_out_of_range_are_refused(bad):
    from pydantic import ValidationError

    from specagent_ray.serve.core.tuning import SpeculationConfig

    with pytest.raises(ValueError, match="explore"):
        Controller(STRONG, WEAK, **bad)
    with pytest.raises(ValidationError):
        SpeculationConfig(mode="adaptive", **bad)


def test_a_profiles_token_model_takes_only_known_non_negative_counts():
    from pydantic import ValidationError

    from specagent_ray.serve.core.tuning import SpeculationConfig

    assert SpeculationConfig(tokens={"system": 3906, "new": 167}).tokens.new == 167
    for bad in ({"new": -1}, {"prompt": 100}):
        with pytest.raises(ValidationError):
            SpeculationConfig(tokens=bad)
