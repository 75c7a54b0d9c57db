"""Tests for the ESTIMATED cost model: specs, per-call costs, ledger totals, and Propositions 1-2."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from specagent_ray.costs.ledger import Ledger
from specagent_ray.costs.model import CallCost, _sum_max_linear, call_cost, ledger_cost
from specagent_ray.costs.specs import (
    GpuProfile,
    ModelSpec,
    gpu_names,
    load_gpu,
    load_model,
    model_names,
    parse_gpus,
    parse_models,
)
from specagent_ray.costs.theory import expected_steps_per_block, fit_from_counts, l_u, r_u
from specagent_ray.protocol.interfaces import CallRecord
from specagent_ray.protocol.types import Usage

# A tiny made-up MoE: per token 2*100 = 200 matmul FLOPs; attention 4*2*4*8 = 256 FLOPs per context position;
# active weights 100*2 = 200 bytes, all weights 1000*2 = 2000 bytes; KV 2*2*2*8*1 = 64 bytes per token.
TINY = ModelSpec(
    name="tiny", total_params=1000, active_params=100, layers=4, kv_layers=2, n_heads=4, kv_heads=2,
    head_dim=8, bytes_per_param=2, kv_bytes=1, source="made up",
)
TINY_DENSE = TINY.model_copy(update={"name": "tiny-dense", "total_params": 100})


def gpu(bw: float, peak: float) -> GpuProfile:
    return GpuProfile(name="g", hbm_bytes_per_s=bw, peak_flops=peak, memory_bytes=1e9, source="made up")


# prompt 5, cached 2, decode 3: prefill positions 2..4 (contexts 3+4+5 = 12), decode contexts 6+7+8 = 21.
def tiny_call(g: GpuProfile, n_gpus: int = 1) -> CallCost:
    return call_cost(TINY, g, n_gpus, prompt_tokens=5, cached_prompt_tokens=2, decode_tokens=3)


def test_flops_and_bytes_by_hand():
    cost = tiny_call(gpu(1000, 1000))
    # prefill 200*3 + 256*12 = 3672; decode 200*3 + 256*21 = 5976
    assert cost.flops == 3672 + 5976
    # decode bytes 200*3 + 64*21 = 1944; prefill weights 200 (low) .. 2000 (high)
    assert cost.hbm_low == 200 + 1944
    assert cost.hbm_high == 2000 + 1944
    assert cost.hbm_point == (2144 + 3944) / 2


def test_latency_compute_bound_by_hand():
    cost = tiny_call(gpu(1000, 1000), n_gpus=2)  # bw 2000 B/s, peak 2000 FLOP/s in all
    prefill = max(3672 / 2000, 1100 / 2000)
    decode = sum(max((200 + 64 * c) / 2000, (200 + 256 * c) / 2000) for c in (6, 7, 8))
    assert cost.gpu_latency_s == pytest.approx(prefill + decode)
    assert cost.gpu_latency_s == pytest.approx(1.836 + 0.868 + 0.996 + 1.124)


def test_latency_bandwidth_bound_by_hand():
    cost = tiny_call(gpu(1000, 1e6))
    assert cost.gpu_latency_s == pytest.approx(1100 / 1000 + 1944 / 1000)


def test_latency_crossing_inside_decode_by_hand():
    # bytes/bw = 0.2 + 0.064c, flops/peak = (200 + 256c)/3000: they cross at c = 6.25
    cost = tiny_call(gpu(1000, 3000))
    assert cost.gpu_latency_s == pytest.approx(1.224 + 0.584 + 0.664 + 2248 / 3000)


def test_sum_max_linear_matches_brute_force():
    rng = random.Random(7)
    for _ in range(500):
        a1, b1, a2, b2 = (rng.uniform(-5, 5) for _ in range(4))
        if rng.random() < 0.1:
            b2 = b1
        first, count = rng.randint(0, 20), rng.randint(0, 20)
        brute = sum(max(a1 + b1 * c, a2 + b2 * c) for c in range(first, first + count))
        assert _sum_max_linear(a1, b1, a2, b2, first, count) == pytest.approx(brute, abs=1e-9)


def test_moe_interval_is_open_and_dense_is_a_point():
    g = load_gpu("h20")
    moe = call_cost(load_model("qwen3.5-397b-a17b"), g, 16, 4000, 1000, 200)
    assert moe.hbm_low < moe.hbm_high
    dense = call_cost(load_model("qwen3-4b"), g, 1, 4000, 1000, 200)
    assert dense.hbm_low == dense.hbm_high
    tiny_dense = call_cost(TINY_DENSE, g, 1, 5, 2, 3)
    assert tiny_dense.hbm_low == tiny_dense.hbm_high == 200 + 1944


def test_cached_tokens_reduce_flops_and_prefill_bytes():
    g = gpu(1000, 1000)
    cold = call_cost(TINY, g, 1, 100, 0, 10)
    warm = call_cost(TINY, g, 1, 100, 60, 10)
    assert warm.flops < cold.flops
    assert warm.gpu_latency_s < cold.gpu_latency_s
    full = call_cost(TINY, g, 1, 100, 100, 10)  # nothing to prefill: no prefill weight reads
    decode_only = 200 * 10 + 64 * sum(range(101, 111))
    assert full.hbm_low == full.hbm_high == decode_only
    assert cold.hbm_low == decode_only + 200 and cold.hbm_high == decode_only + 2000


def test_empty_call_costs_nothing_and_bad_inputs_raise():
    assert call_cost(TINY, gpu(1, 1), 1, 0, 0, 0) == CallCost()
    for args in [(-1, 0, 0), (0, 0, -1), (3, 4, 0)]:
        with pytest.raises(ValueError):
            call_cost(TINY, gpu(1, 1), 1, *args)
    with pytest.raises(ValueError):
        call_cost(TINY, gpu(1, 1), 0, 1, 0, 1)


def test_callcost_adds_and_sums():
    a, b = CallCost(1, 2, 3, 4), CallCost(10, 20, 30, 40)
    assert a + b == CallCost(11, 22, 33, 44)
    assert sum([a, b]) == a + b
    assert sum([a, b], CallCost()) == a + b


def test_ledger_cost_sums_the_role_and_purpose():
    g = gpu(1000, 3000)
    ledger = Ledger()
    ledger.record(CallRecord("strong", "verify", Usage(5, 2, 3), 1.0))
    ledger.record(CallRecord("weak", "draft", Usage(50, 0, 30), 1.0))
    ledger.record(CallRecord("strong", "repair", Usage(8, 8, 4), 1.0))
    one = call_cost(TINY, g, 1, 5, 2, 3)
    two = call_cost(TINY, g, 1, 8, 8, 4)
    assert ledger_cost(ledger, "strong", TINY, g, 1) == one + two
    assert ledger_cost(ledger, "strong", TINY, g, 1, purposes={"verify"}) == one
    assert ledger_cost(ledger, "weak", TINY, g, 1) == call_cost(TINY, g, 1, 50, 0, 30)
    assert ledger_cost(Ledger(), "strong", TINY, g, 1) == CallCost()


# --- specs and loaders ---


def test_shipped_yaml_entries_all_load():
    assert {"qwen3.5-397b-a17b", "qwen3-4b"} <= set(model_names())
    assert {"h20", "h200"} <= set(gpu_names())
    for name in model_names():
        spec = load_model(name)
        assert spec.name == name and spec.source.strip()
    for name in gpu_names():
        assert load_gpu(name).source.strip()


def test_shipped_numbers():
    small = load_model("qwen3-4b")
    assert (small.layers, small.kv_layers, small.kv_heads, small.head_dim) == (36, 36, 8, 128)
    assert small.total_params == small.active_params == 4_000_000_000 and small.bytes_per_param == 2
    strong = load_model("qwen3.5-397b-a17b")
    assert strong.is_moe and strong.active_params == 17_000_000_000 and strong.kv_layers < strong.layers
    assert load_gpu("h200").hbm_bytes_per_s == 4.8e12 and load_gpu("h20").peak_flops == 148e12
    # the paper's H20 compute/bandwidth balance point: about 37 sequences for bf16 weights
    h20 = load_gpu("h20")
    assert h20.peak_flops / h20.hbm_bytes_per_s == pytest.approx(37)


def test_loaders_reject_unknown_names():
    with pytest.raises(ValueError, match="qwen3-4b"):
        load_model("gpt-9")
    with pytest.raises(ValueError, match="h200"):
        load_gpu("tpu")


GOOD_MODEL = """
models:
  - {name: m, total_params: 10, active_params: 5, layers: 2, kv_layers: 1, n_heads: 2, kv_heads: 1,
     head_dim: 4, bytes_per_param: 2, kv_bytes: 2, source: s}
"""


def test_parsers_reject_extra_keys_duplicates_and_bad_specs():
    assert parse_models(GOOD_MODEL)["m"].active_params == 5
    with pytest.raises(ValidationError):
        parse_models(GOOD_MODEL.replace("source: s", "source: s, experts: 8"))
    with pytest.raises(ValidationError):
        parse_gpus("gpus:\n  - {name: g, hbm_bytes_per_s: 1, peak_flops: 1, memory_bytes: 1, source: s, tdp: 700}\n")
    with pytest.raises(ValueError, match="duplicate"):
        parse_models(GOOD_MODEL + GOOD_MODEL.replace("models:\n", ""))
    with pytest.raises(ValidationError):
        parse_models(GOOD_MODEL.replace("active_params: 5", "active_params: 50"))
    with pytest.raises(ValueError):
        parse_models("specs: []\n")


# --- Propositions 1 and 2 ---


def test_expected_steps_per_block():
    assert expected_steps_per_block(0.5, 3) == 1.75
    assert expected_steps_per_block(1.0, 4) == 4
    assert expected_steps_per_block(0.0, 4) == 1
    for p in (0.1, 0.5, 0.9, 0.999):
        assert expected_steps_per_block(p, 5) == pytest.approx((1 - p**5) / (1 - p))


def test_r_u_by_hand_and_at_the_p_to_1_limit():
    # p = 0.5, n = 3: (1-p)/(1-p^3) = 0.5/0.875 = 4/7
    assert r_u(0.5, 3, 1.0, 0.5) == pytest.approx(4 / 7 + 0.25)
    assert r_u(0.5, 3, 0.3, 0.0) == pytest.approx(0.3 * 4 / 7)
    assert r_u(0.0, 3, 0.3, 0.5) == pytest.approx(0.8)  # every block: one verdict, a repair half the time
    assert r_u(1.0, 4, 0.8, 0.5) == pytest.approx(0.2)  # limit 1/n, no rejections
    assert r_u(1 - 1e-12, 4, 0.8, 0.5) == pytest.approx(0.2)
    for p in (0.2, 0.7, 0.95):
        assert r_u(p, 4, 0.8, 0.3) == pytest.approx((1 - p) / (1 - p**4) * 0.8 + 0.3 * (1 - p))


def test_l_u_by_hand_and_never_below_r_u():
    assert l_u(0.5, 3, 1.0, 0.5, 0.1) == pytest.approx(4 / 7 + 0.25 + 0.1 * 3 * 4 / 7)
    assert l_u(1.0, 4, 0.8, 0.5, 0.25) == pytest.approx(0.2 + 0.25)
    for p in (0.0, 0.3, 0.8, 1.0):
        for n in (1, 2, 5):
            for kappa in (0.0, 0.1, 1.0):
                assert l_u(p, n, 0.5, 0.4, kappa) >= r_u(p, n, 0.5, 0.4)
    assert l_u(0.6, 3, 0.5, 0.4, 0.0) == r_u(0.6, 3, 0.5, 0.4)


def test_theory_rejects_bad_inputs():
    for bad in [(-0.1, 3), (1.1, 3), (0.5, 0), (0.5, 2.5)]:
        with pytest.raises(ValueError):
            expected_steps_per_block(*bad)
    with pytest.raises(ValueError):
        r_u(0.5, 3, -1.0, 0.1)
    with pytest.raises(ValueError):
        r_u(0.5, 3, 1.0, 1.5)
    with pytest.raises(ValueError):
        l_u(0.5, 3, 1.0, 0.1, -0.1)


def test_fit_from_counts():
    fitted = fit_from_counts(accepted_steps=30, rejections=10, separate_repairs=4)
    assert fitted.p == 0.75 and fitted.rho == 0.4
    assert fit_from_counts(0, 0, 0).p == 1.0 and fit_from_counts(5, 0, 0).rho == 0.0
    with pytest.raises(ValueError):
        fit_from_counts(1, 1, 2)


def test_tensor_parallel_collectives_add_latency_per_forward_pass():
    from specagent_ray.costs.model import call_cost
    from specagent_ray.costs.specs import load_gpu, load_model

    spec, gpu = load_model("qwen3.5-397b-a17b"), load_gpu("h20")
    one_node = call_cost(spec, gpu, 8, 1000, 0, 100).gpu_latency_s
    two_nodes = call_cost(spec, gpu, 16, 1000, 0, 100).gpu_latency_s
    per_token = gpu.internode_collective_latency_s * spec.layers * 4
    assert two_nodes > per_token * 100  # every decode token pays the inter-node collectives
    assert gpu.collective_s(1) == 0.0 and gpu.collective_s(16) > gpu.collective_s(8) > 0
    assert one_node > 0


def test_price_lists_load_and_reject_bad_files():
    from specagent_ray.costs.pricing import load_price, load_prices

    assert load_price("local").decode_per_mtok == 0.0
    assert load_price("example-frontier").decode_per_mtok > load_price("example-frontier").prompt_per_mtok
    with pytest.raises(ValueError, match="unknown price list 'nope'; known: .*local"):
        load_price("nope")
    entry = "{name: a, prompt_per_mtok: 1, cached_per_mtok: 1, decode_per_mtok: 1, source: x}"
    with pytest.raises(ValueError, match="duplicate name 'a'"):
        load_prices(f"prices: [{entry}, {entry}]")
    with pytest.raises(ValueError, match="single key 'prices'"):
        load_prices("price: []")
