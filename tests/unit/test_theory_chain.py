"""The three-tier chain's Proposition (costs/theory.py:chain_traffic), its Monte-Carlo check through the real loop
(bench/theory/montecarlo.py), the planner's method ``chain`` (costs/calls.py, planner.py, fleet.py, ``plan --chain``)
and the mid model's deployment (costs/hardware.py)."""

import json

import pytest

from specagent_ray.bench.theory.montecarlo import HAS_MID, ChainWorld, measure_chain
from specagent_ray.cli import main
from specagent_ray.costs import theory
from specagent_ray.costs.fleet import PlanInputs, make_plan
from specagent_ray.costs.hardware import Hardware
from specagent_ray.costs.planner import (
    Acceptance,
    CallShape,
    Chain,
    Engine,
    Shapes,
    Traffic,
    call_at_batch,
    calls_per_step,
    operate,
    step_cost,
    token_model_shapes,
)
from specagent_ray.costs.specs import load_gpu, load_model
from specagent_ray.costs.theory import chain_traffic, r_chain, r_u

GRID = [(p, n) for p in (0.0, 0.3, 0.7, 0.95, 1.0) for n in (1, 2, 4, 8)]


# -- the Proposition ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("p", "n"), GRID)
@pytest.mark.parametrize("q", [None, 0.2, 0.9])
def test_everything_escalated_is_proposition_1(p, n, q):
    """e_a = e_r = 1: every block reaches the strong verifier, whose verdict is final: today's SpecAgent."""
    t = chain_traffic(p, n, 0.4, 0.3, e_accept=1.0, p_mid=q, vm_over_d=0.1, rho_mid=0.7)
    assert t.strong == pytest.approx(r_u(p, n, 0.4, 0.3))
    assert t.escalation == pytest.approx(1.0)
    assert t.steps_per_block == pytest.approx(theory.expected_steps_per_block(p, n))
    assert t.mid == pytest.approx(0.1 / theory.expected_steps_per_block(p, n))


@pytest.mark.parametrize(("p", "n"), GRID)
def test_nothing_escalated_leaves_only_the_repairs(p, n):
    assert r_chain(p, n, 0.4, 0.3, e_accept=0.0) == 0.0
    # with q = p the only strong reads are the settled rejections' missing repairs: rho_mid (1 - p) per step
    assert r_chain(p, n, 0.4, 0.3, e_accept=0.0, rho_mid=0.5) == pytest.approx(0.5 * (1 - p))


@pytest.mark.parametrize(("p", "n"), GRID)
def test_same_acceptance_and_one_rate_scales_r_u(p, n):
    """q = p and e_a = e_r = e: E_c = E(p, n) and R_chain = e R_u + (1 - e) rho_mid (1 - p), increasing in e."""
    es = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0]
    rs = [r_chain(p, n, 0.4, 0.3, e_accept=e, rho_mid=0.2) for e in es]
    for e, r in zip(es, rs):
        assert r == pytest.approx(e * r_u(p, n, 0.4, 0.3) + (1 - e) * 0.2 * (1 - p))
    assert all(b > a for a, b in zip(rs, rs[1:]))  # v/d > 0: more strong traffic with every escalated block


def _enumerated(p, q, n, v, rho, e_a, e_r, vm, rho_mid):
    """The chain's expectations by summing over the mid's and the strong's accepted prefixes (no closed form)."""
    def prefix(x):  # P(j = k) for k in 0..n under Assumption 2
        return [x**k * (1 - x) for k in range(n)] + [x**n]

    steps = strong = 0.0
    for jm, pm in enumerate(prefix(q)):
        esc = e_a if jm == n else e_r
        settled_steps = n if jm == n else jm + 1
        steps += pm * (1 - esc) * settled_steps
        strong += pm * (1 - esc) * (rho_mid if jm < n else 0.0)
        for js, ps in enumerate(prefix(p)):  # Assumption 3: independent of jm
            steps += pm * esc * ps * (n if js == n else js + 1)
            strong += pm * esc * ps * (v + (rho if js < n else 0.0))
    return strong / steps, vm / steps


@pytest.mark.parametrize(("p", "q"), [(0.9, 0.6), (0.5, 0.95), (0.8, 0.8), (0.0, 0.7), (1.0, 0.3)])
@pytest.mark.parametrize(("e_a", "e_r"), [(0.1, 0.6), (0.7, 0.2), (0.0, 1.0)])
def test_closed_form_matches_enumeration(p, q, e_a, e_r):
    for n in (1, 3, 6):
        t = chain_traffic(p, n, 0.3, 0.4, e_accept=e_a, e_reject=e_r, p_mid=q, vm_over_d=0.2, rho_mid=0.25)
        strong, mid = _enumerated(p, q, n, 0.3, 0.4, e_a, e_r, 0.2, 0.25)
        assert t.strong == pytest.approx(strong)
        assert t.mid == pytest.approx(mid)
        assert t.escalation == pytest.approx(q**n * e_a + (1 - q**n) * e_r)


@pytest.mark.parametrize("bad", [{"e_accept": 1.2}, {"e_accept": 0.5, "e_reject": -0.1},
                                 {"e_accept": 0.5, "p_mid": 1.5}, {"e_accept": 0.5, "rho_mid": 2.0},
                                 {"e_accept": 0.5, "vm_over_d": -1.0}])
def test_out_of_range_rates_are_refused(bad):
    with pytest.raises(ValueError):
        chain_traffic(0.8, 4, 0.3, 0.3, **bad)
    if "vm_over_d" not in bad:  # the planner's rates refuse the same
        with pytest.raises(ValueError):
            Chain(**bad)


# -- Monte-Carlo through the real loop (SIMULATED) -------------------------------------------------------------

NO_MID = pytest.mark.xfail(not HAS_MID, strict=True, raises=NotImplementedError,
                           reason="the loop has no mid verifier yet (protocol.runtime.Parts has no `mid`)")

WORLDS = [ChainWorld(0.7, 0.7, 0.2, 0.2), ChainWorld(0.9, 0.9, 0.5, 0.5, invalid=0.1, missing=0.1),
          ChainWorld(0.6, 0.85, 0.1, 0.6, invalid=0.2, missing=0.3)]


@NO_MID
@pytest.mark.parametrize("world", WORLDS, ids=lambda w: f"p{w.p}-q{w.q}-e{w.e_accept}/{w.e_reject}")
def test_chain_proposition_matches_measurement_within_0_01(world):
    point = measure_chain(world, steps=30_000, seed=3)
    assert point.committed_steps >= 30_000
    assert abs(point.predicted.strong - point.measured_strong) <= 0.01, point
    assert abs(point.predicted.mid - point.measured_mid) <= 0.01, point
    assert abs(point.predicted.escalation - point.measured_escalation) <= 0.02, point


@NO_MID
def test_chain_measurement_moves_with_escalation():
    # guards against a measurement that ignores its inputs
    low = measure_chain(ChainWorld(0.7, 0.7, 0.1, 0.1), steps=5_000)
    high = measure_chain(ChainWorld(0.7, 0.7, 0.9, 0.9), steps=5_000)
    assert high.measured_strong > low.measured_strong + 0.08
    assert high.measured_escalation > low.measured_escalation + 0.6


# -- the planner's method "chain" ------------------------------------------------------------------------------

STEP = CallShape(5000, 4500, 700)
SHAPES = Shapes(STEP, CallShape(5600, 3000, 620), STEP, STEP, 12000)
H20 = load_gpu("h20")
STRONG, WEAK = Engine(load_model("qwen3.5-397b-a17b"), H20, 16), Engine(load_model("qwen3-4b"), H20, 1)
MID = Engine(load_model("qwen3-32b"), H20, 2)


def _acc(chain):
    return Acceptance.from_counts(0.8, {1: 5, 3: 2, 6: 1}, 0.4, 0.6, chain)


def test_chain_at_batch_one_is_its_proposition():
    """Strong HBM per step over Strong-only's is f * R_chain(v/d); the mid's is its verifies priced alone."""
    acc = _acc(Chain(0.3, 0.6, p_mid=0.7, rho_mid=0.2))
    chain = step_cost("chain", acc, SHAPES, STRONG, WEAK, mid=MID)
    so = step_cost("strong", acc, SHAPES, STRONG, WEAK).strong.hbm
    v_over_d = call_at_batch(STRONG, SHAPES.verify, 1).hbm / call_at_batch(STRONG, STEP, 1).hbm
    assert chain.strong.hbm / so == pytest.approx(acc.f * acc.r_chain(v_over_d))
    steps = acc.chain_per_block()[0]
    assert chain.mid.hbm == pytest.approx(acc.f / steps * call_at_batch(MID, SHAPES.verify, 1).hbm)
    assert chain.gpu_s == pytest.approx(chain.strong.gpu_s + chain.mid.gpu_s + chain.weak.gpu_s)


def test_one_length_chain_in_the_planner_is_theory():
    acc = Acceptance(0.75, ((4, 1.0),), 0.3, 1.0, Chain(0.2, 0.5, p_mid=0.9, rho_mid=0.1))
    assert acc.r_chain(0.4) == pytest.approx(r_chain(0.75, 4, 0.4, 0.3, e_accept=0.2, e_reject=0.5, p_mid=0.9,
                                                     rho_mid=0.1))


def test_escalating_everything_prices_like_specagent_plus_the_mid():
    acc = _acc(Chain(1.0))
    chain, spec = (step_cost(m, acc, SHAPES, STRONG, WEAK, mid=MID) for m in ("chain", "specagent"))
    assert chain.strong.hbm == pytest.approx(spec.strong.hbm)
    assert chain.weak.hbm == pytest.approx(spec.weak.hbm)
    assert spec.mid.hbm == 0 and chain.mid.hbm > 0
    calls = calls_per_step("chain", acc, SHAPES)
    assert sum(k for k, _ in calls["mid"]) == pytest.approx(acc.verifies_per_step)


def test_fewer_escalations_fewer_strong_calls():
    counts = [sum(k for k, _ in calls_per_step("chain", _acc(Chain(e)), SHAPES)["strong"]) for e in (0.0, 0.3, 1.0)]
    assert counts[0] < counts[1] < counts[2]
    assert counts[0] == 0.0  # no escalations, rho_mid 0: the strong engine is idle


def test_chain_needs_its_mid_engine_and_rates():
    acc = _acc(Chain(0.3))
    with pytest.raises(ValueError, match="mid"):
        step_cost("chain", acc, SHAPES, STRONG, WEAK)
    with pytest.raises(ValueError, match="no chain"):
        calls_per_step("chain", _acc(None), SHAPES)
    with pytest.raises(ValueError, match="chain"):
        PlanInputs(STRONG, WEAK, Traffic(10, 14, 1.0), acc, SHAPES)  # rates without the mid engine


def test_operating_point_has_a_mid_batch():
    acc = Acceptance.from_mean(0.82, 1.6, 0.2, 0.29, Chain(0.3))
    shapes = token_model_shapes(acc, 14)
    weak = Engine(WEAK.spec, H20, 1, 20)
    one = operate("chain", Traffic(200, 14, 1.0), acc, shapes, STRONG, weak, mid=MID)
    assert one.capped == "mid"  # one 2-GPU mid replica cannot verify 200 sessions' blocks: they queue for it
    op = operate("chain", Traffic(200, 14, 1.0), acc, shapes, STRONG, weak, mid=Engine(MID.spec, H20, 2, 8))
    assert op.capped is None and op.steps_per_s > one.steps_per_s
    assert op.batch_mid > 1 and op.cost.mid.hbm > 0
    assert op.step_latency_s == pytest.approx(op.cost.latency_s)
    spec = operate("specagent", Traffic(200, 14, 1.0), acc, shapes, STRONG, WEAK, mid=MID)
    assert spec.batch_mid == 0 and spec.cost.mid.hbm == 0  # the mid engine idles without the chain


def test_plan_compares_strong_only_with_the_chain():
    acc = Acceptance.from_mean(0.82, 1.6, 0.2, 0.29, Chain(0.3))
    shapes = token_model_shapes(acc, 14)
    plan = make_plan(PlanInputs(STRONG, WEAK, Traffic(100, 14, 1.0), acc, shapes, mid=MID), points=4)
    assert set(plan.at_load) == {"strong", "chain"} and set(plan.sizing) == {"strong", "chain"}
    assert plan.sizing["chain"].mid_replicas >= 1 and plan.inputs.mid.replicas >= 1
    assert plan.r_predicted == pytest.approx(acc.f * acc.r_chain(plan.v_over_d))


def test_plan_command_chain_flags(tmp_path):
    out = tmp_path / "plan"
    assert main(["plan", "--chain", "--escalate", "0.4", "--mid-model", "qwen3-32b", "--mid-gpus", "4",
                 "--sessions", "50", "--points", "4", "--out", str(out)]) == 0
    doc = json.loads((out / "plan.json").read_text())
    assert doc["inputs"]["acceptance"]["chain"]["e_accept"] == 0.4
    assert doc["chain"]["mid"] == {"model": "qwen3-32b", "gpus": 4, "replicas": doc["chain"]["mid"]["replicas"]}
    assert set(doc["estimated"]["at_load"]) == {"strong", "chain"}
    assert main(["plan", "--chain", "--escalate", "1.5", "--out", str(out)]) == 2
    assert main(["plan", "--p-mid", "0.5", "--out", str(out)]) == 2  # a chain flag without --chain
    assert main(["plan", "--chain", "--check-sim", "--out", str(out)]) == 2  # the sim checks price SpecAgent


# -- the mid model's spec and deployment ----------------------------------------------------------------------


def test_qwen3_32b_spec():
    spec = load_model("qwen3-32b")
    assert (spec.layers, spec.kv_layers, spec.n_heads, spec.kv_heads, spec.head_dim) == (64, 64, 64, 8, 128)
    assert spec.total_params == spec.active_params == 32_800_000_000 and not spec.is_moe
    assert "Qwen/Qwen3-32B" in spec.source


def test_hardware_deploys_a_mid_only_with_a_mid_model():
    assert set(Hardware().deployments()) == {"strong", "weak"}
    d = Hardware(mid_model="qwen3-32b", mid_gpus=4).deployments()
    assert set(d) == {"strong", "weak", "mid"}
    assert d["mid"].spec.name == "qwen3-32b" and d["mid"].n_gpus == 4 and d["mid"].gpu.name == "h20"
    with pytest.raises(ValueError, match="unknown model spec"):
        Hardware(mid_model="qwen9-1t")
