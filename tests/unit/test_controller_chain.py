"""The speculation controller knows the three-tier chain: per block it weighs Strong-only, SpecAgent at each K and
the chain at each K by the operator's objective over every role, and its choice is the one the capacity
planner's table gives for the same inputs (control/controller.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specagent_ray.control.controller import (
    Choice,
    Controller,
    Estimate,
    Load,
    capped_acceptance,
    pick,
)
from specagent_ray.control.online import AdaptiveK, Prior
from specagent_ray.costs.calls import Chain, calls_per_step
from specagent_ray.costs.fleet import PlanInputs, at
from specagent_ray.costs.planner import Engine, Traffic, token_model_shapes
from specagent_ray.costs.specs import load_gpu, load_model
from specagent_ray.protocol.types import History, Task

H20 = load_gpu("h20")
STRONG = Engine(load_model("qwen3.5-397b-a17b"), H20, 16)
WEAK = Engine(load_model("qwen3-4b"), H20, 1)
MOE_MID = Engine(load_model("qwen3.5-35b-a3b"), H20, 2)  # the chain's default mid (docs/benchmarks.md)
DENSE_MID = Engine(load_model("qwen3-32b"), H20, 2)
RATES = Chain(0.3)
EST = Estimate(0.82, (0.3,), 0.2, blocks=5)  # past its exploring blocks


def planner_figure(choice: Choice, controller: Controller, est: Estimate, sessions: float) -> float:
    """``choice``'s objective per committed step in the planner's own table (``fleet.at``: the at-load
    operating points ``make_plan`` prints) for the controller's inputs: the same fleets, traffic, acceptance
    and token model."""
    chain = controller.chain if choice.chain else None
    acc = capped_acceptance(max(1, choice.k), est.p, est.hazards, est.rho, chain)
    t = controller.tokens
    inputs = PlanInputs(controller.strong, controller.weak,
                        Traffic(sessions, controller.steps_per_session, controller.think_time_s), acc,
                        token_model_shapes(acc, controller.steps_per_session, t.system, t.new, t.step, t.verdict),
                        auto_weak=False, auto_strong=False, mid=controller.mid if choice.chain else None,
                        auto_mid=False)
    op = at(inputs, sessions)[choice.method]  # type: ignore[index]  # make_plan's at_load, without its sweep
    c = op.cost
    return {"latency": op.step_latency_s, "gpu_seconds": c.strong.gpu_s + c.mid.gpu_s + c.weak.gpu_s,
            "hbm": c.strong.hbm + c.mid.hbm + c.weak.hbm, "strong_hbm": c.strong.hbm}[controller.objective]


def derived_choice(table: dict[Choice, float], slack: float, margin: float) -> Choice:
    """The controller's rule read off the planner's figures: Strong-only iff cheaper than every speculating
    option by ``margin``; else the cheaper route, and on it the largest K within ``slack`` of its cheapest."""
    best = min((c for c in table if c.k >= 1), key=table.__getitem__)
    if table[Choice(0)] < table[best] * (1 - margin):
        return Choice(0)
    return Choice(max(c.k for c in table if c.k >= 1 and c.chain == best.chain
                      and table[c] <= table[best] * (1 + slack)), best.chain)


CASES = [  # (mid, objective, sessions, the route the planner's table gives)
    (MOE_MID, "hbm", 10, True),  # an MoE mid reads little: the chain saves HBM in total
    (DENSE_MID, "hbm", 10, False),  # a dense 32B mid reads more than the strong verifies it saves
    (DENSE_MID, "strong_hbm", 10, True),  # counted on the strong model alone, the dense mid looks cheap
    (MOE_MID, "latency", 10, True),
    (DENSE_MID, "gpu_seconds", 10, False),
]


@pytest.mark.parametrize(("mid", "objective", "sessions", "chain"), CASES)
def test_the_controllers_route_is_the_planners_table_for_the_same_inputs(mid, objective, sessions, chain):
    controller = Controller(STRONG, WEAK, objective, k_max=4, mid=mid, chain=RATES)
    table = {c: planner_figure(c, controller, EST, sessions) for c in controller.options()}
    costs = controller.costs(EST, sessions)
    assert set(costs) == set(table) and len(table) == 1 + 2 * 4
    for c, v in table.items():
        assert costs[c] == pytest.approx(v, rel=1e-3), c
    derived = derived_choice(table, controller.review_slack, controller.switch_margin)
    assert controller.decide(EST, Load(sessions)) == derived
    assert derived.k >= 1 and derived.chain is chain


def test_past_the_crossover_the_strong_model_writes_whatever_the_route():
    controller = Controller(STRONG, WEAK, "gpu_seconds", k_max=3, mid=MOE_MID, chain=RATES)
    table = {c: planner_figure(c, controller, EST, 1000) for c in controller.options()}
    assert derived_choice(table, controller.review_slack, controller.switch_margin) == Choice(0)
    assert controller.decide(EST, Load(1000)) == Choice(0)


def test_without_a_mid_verifier_the_chain_is_never_weighed_nor_chosen():
    alone = Controller(STRONG, WEAK, "hbm", k_max=4)
    assert all(not c.chain for c in alone.options()) and len(alone.options()) == 5
    with_mid = replace(alone, mid=MOE_MID, chain=RATES)
    assert with_mid.decide(EST, Load(10)).chain  # the same session would take the chain with a mid
    choice = alone.decide(EST, Load(10))
    assert not choice.chain and choice.k >= 1 and choice.k == alone.choose(EST, Load(10))


def test_a_chain_needs_both_its_mid_engine_and_its_rates():
    with pytest.raises(ValueError, match="mid"):
        Controller(STRONG, WEAK, mid=MOE_MID)
    with pytest.raises(ValueError, match="mid"):
        Controller(STRONG, WEAK, chain=RATES)


def test_a_fixed_table_never_routes_to_the_chain():
    controller = Controller(STRONG, WEAK, "hbm", table=((1e9, 3),), mid=MOE_MID, chain=RATES)
    assert controller.decide(EST, Load(10)) == Choice(3)


def test_escalating_every_block_makes_the_chain_cost_more_than_specagent():
    """With e = 1 the chain is SpecAgent plus a mid verify per block (theory.chain_traffic's check): never
    cheaper, so SpecAgent's route is kept."""
    controller = Controller(STRONG, WEAK, "hbm", k_max=4, mid=MOE_MID, chain=Chain(1.0))
    costs = controller.costs(EST, 10)
    for k in range(1, 5):
        assert costs[Choice(k, True)] > costs[Choice(k)]
    assert not controller.decide(EST, Load(10)).chain


@pytest.mark.parametrize(("mid", "chain"), [(MOE_MID, True), (DENSE_MID, False)])
def test_a_sessions_block_size_reports_its_route_before_the_block(mid, chain):
    routes: list[bool] = []
    ks: list[int] = []
    size = AdaptiveK(Controller(STRONG, WEAK, "hbm", k_max=4, mid=mid, chain=RATES), lambda: Load(10),
                     Prior(weight=1), ks.append, routes.append)
    k = size.next_k(History(Task("t", "x")))
    assert k >= 1 and ks == [k] and routes == [chain] and size.chain is chain


def test_the_route_is_chosen_first_then_the_largest_k_within_the_slack_on_it():
    """SpecAgent K = 1 is cheapest: its route is kept, and K = 2 is within 3 % of it on that route; the chain's
    K = 3 is within 3 % too, but another route's K is never taken for its size."""
    costs = {Choice(0): 2.0, Choice(1): 1.0, Choice(2): 1.02, Choice(3): 1.2, Choice(1, True): 1.01,
             Choice(3, True): 1.025}
    assert pick(costs, 0.03, 0.01) == Choice(2)
    assert pick({**costs, Choice(1, True): 0.999}, 0.03, 0.01) == Choice(3, True)
    assert pick({**costs, Choice(0): 0.98}, 0.03, 0.01) == Choice(0)  # cheaper than every option by 2 %
    assert pick({**costs, Choice(0): 0.995}, 0.03, 0.01) == Choice(2)  # by less than the margin


@pytest.mark.parametrize("k", [1, 3, 6])
def test_escalating_every_block_the_chain_drafts_and_verifies_as_specagent_does(k):
    """With e = 1 every block is SpecAgent's block plus a mid verify (theory.chain_traffic's check), so per useful
    committed step the chain drafts what SpecAgent drafts: the reads that commit unreviewed although the strong
    model would have rejected them (``CappedAcceptance.extra_drafts``) are drafted on either route."""
    spec = capped_acceptance(k, 0.8, (0.2, 0.1), 0.2)
    chained = capped_acceptance(k, 0.8, (0.2, 0.1), 0.2, Chain(1.0))
    assert spec.extra_drafts > 0.05  # some drafted reads commit unreviewed at p = 0.8
    assert chained.f == pytest.approx(spec.f) and chained.extra_drafts == pytest.approx(spec.extra_drafts)
    shapes = token_model_shapes(spec, 14.0, 2600, 460, 723, 1420)
    alone, chain = calls_per_step("specagent", spec, shapes), calls_per_step("chain", chained, shapes)
    for role in ("strong", "weak"):
        assert [n for n, _ in chain[role]] == pytest.approx([n for n, _ in alone[role]], rel=1e-9), role
    assert chain["mid"][0][0] == pytest.approx(alone["strong"][0][0])  # a mid verify where SpecAgent verifies
