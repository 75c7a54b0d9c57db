"""The beyond-the-paper bench: variants, the wrong-critical-write count, and the simulated judges' stated
assumptions (repeated looks, the mid verifier's confidence)."""

from __future__ import annotations

import random

import pytest

from specagent_ray.bench.quality.variants import TABLE, VARIANTS, critical_writes, variant_of
from specagent_ray.sim.judge import Look, confidence
from specagent_ray.protocol.types import Action, Effect, History, Observation, Step, Task, Termination, Tier, \
    ToolCall, Trajectory

PAY = ToolCall("pay", {"amount": 5})
WRONG = ToolCall("pay", {"amount": 6})
READ = ToolCall("look", {})


def traj(*steps):
    return Trajectory(History(Task("t", ""), tuple(steps)), Termination.AGENT_STOP)


def tier_of(call):
    return Tier.CRITICAL if call.name == "pay" else Tier.READ


def test_wrong_critical_writes_count_effects_not_attempts():
    ok = Step(Action(Action.tool("pay").kind, PAY), Observation("paid"), "weak", Effect.WRITE)
    wrong = Step(Action.parallel([WRONG, READ]), Observation.of_calls((WRONG, READ), [Observation("paid"),
                 Observation("x")]), "strong", Effect.WRITE)
    refused = Step(Action.parallel([WRONG]), Observation("Error: no", error=True), "weak", Effect.WRITE)
    staged = Step(Action.parallel([WRONG]), None, "weak", Effect.WRITE)
    assert critical_writes(traj(ok, wrong, refused, staged), tier_of, {PAY.key()}) == (2, 1)
    assert critical_writes(traj(ok), tier_of, set()) == (1, 1)


def test_the_table_has_the_six_rows_and_plain_methods_are_variants_with_nothing_on():
    assert TABLE == ("strong", "specagent", "specagent+parallel", "specagent+tiers", "specagent+chain",
                     "specagent+all")
    assert variant_of("specagent") == variant_of("specagent") and not variant_of("strong").tiers
    every = VARIANTS["specagent+all"]
    assert every.parallel and every.tiers and every.chain
    from specagent_ray.protocol.runtime import SpecConfig
    assert every.spec(SpecConfig()).parallel_calls and VARIANTS["specagent+chain"].spec(SpecConfig()).chain.settles


def test_a_chain_variant_without_a_mid_model_to_price_is_refused():
    from specagent_ray.bench.quality.runs import BenchConfig
    from specagent_ray.costs.hardware import Hardware

    with pytest.raises(ValueError, match="mid model"):
        BenchConfig(methods=("specagent+chain",))
    BenchConfig(methods=("specagent+chain",), hardware=Hardware(mid_model="qwen3-32b"))
    with pytest.raises(ValueError, match="unknown method"):
        BenchConfig(methods=("specagent+vibes",))


@pytest.mark.parametrize("rho, alike", [(1.0, 1.0), (0.0, 0.5), (0.8, None)])
def test_a_second_look_shares_the_first_draw_as_stated(rho, alike):
    same = 0
    n = 4000
    for i in range(n):
        first = Look(random.Random(i), None, rho).random() < 0.3
        second = Look(random.Random(i), random.Random(f"look{i}"), rho).random() < 0.3
        same += first == second
    share = same / n
    if alike == 1.0:
        assert share == 1.0
    elif alike == 0.5:  # independent: P(same) = 0.3^2 + 0.7^2 = 0.58
        assert abs(share - 0.58) < 0.03
    else:
        assert 0.62 < share < 1.0


def test_the_mid_confidence_separates_right_from_wrong_at_its_auc():
    rng = random.Random(1)
    right = [confidence(0.75, False, rng) for _ in range(3000)]
    wrong = [confidence(0.75, True, rng) for _ in range(3000)]
    pairs = random.Random(2)
    auc = sum(pairs.choice(right) > pairs.choice(wrong) for _ in range(20000)) / 20000
    assert abs(auc - 0.75) < 0.02


@pytest.mark.parametrize("auc", [1.0, 0.4, 1.5])
def test_an_auc_outside_half_to_one_is_refused(auc):
    with pytest.raises(ValueError, match="AUC"):
        confidence(auc, False, random.Random(0))
