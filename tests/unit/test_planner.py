"""Tests for the capacity planner (costs/planner.py, costs/fleet.py) and its command (bench/plan*.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specagent_ray.planner.command import gpu_profile, parse_blocks
from specagent_ray.planner.bench_inputs import inputs_from_results, load_results
from specagent_ray.cli import main
from specagent_ray.costs import theory
from specagent_ray.costs.fleet import (
    PlanInputs,
    amortizing_batch,
    at,
    crossovers,
    make_plan,
    per_call_hbm,
    size,
    sweep,
)
from specagent_ray.costs.model import call_cost
from specagent_ray.costs.planner import (
    Acceptance,
    CallShape,
    Engine,
    Shapes,
    Traffic,
    call_at_batch,
    operate,
    savings,
    step_cost,
    token_model_shapes,
)
from specagent_ray.costs.measured_gpus import estimated_knee, write_profile
from specagent_ray.costs.specs import GpuProfile, ModelSpec, load_gpu, load_model

DENSE = ModelSpec(name="dense-8b", total_params=8_000_000_000, active_params=8_000_000_000, layers=36, kv_layers=36,
                  n_heads=32, kv_heads=8, head_dim=128, bytes_per_param=2, kv_bytes=2, source="made up")
# 1e9 bf16 weights (2 GB) and a negligible KV cache and attention: pass time is 2 GB / bw while bandwidth-bound
FLAT = DENSE.model_copy(update={"name": "flat", "total_params": 1_000_000_000, "active_params": 1_000_000_000,
                                "kv_layers": 1, "kv_heads": 1, "n_heads": 1, "head_dim": 1, "kv_bytes": 1e-6})
SMALL = FLAT.model_copy(update={"name": "small", "total_params": 100_000_000, "active_params": 100_000_000})


def gpu(peak: float, bw: float = 2e12, memory: float = 1e12) -> GpuProfile:
    return GpuProfile(name=f"g{peak:g}", hbm_bytes_per_s=bw, peak_flops=peak, memory_bytes=memory, source="made up")


def paper_inputs(sessions: float = 100, think: float = 1.0, gpu_name: str = "h20") -> PlanInputs:
    acc = Acceptance.from_mean(0.9, 1.8, 0.2, 0.3)
    g = load_gpu(gpu_name)
    return PlanInputs(Engine(load_model("qwen3.5-397b-a17b"), g, 16), Engine(load_model("qwen3-4b"), g, 1),
                      Traffic(sessions, 14, think), acc, token_model_shapes(acc, 14))


# -- Proposition 1/2 over the block mix -------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.0, 0.3, 0.9, 1.0])
@pytest.mark.parametrize("n", [1, 2, 6])
def test_one_block_length_gives_theory_r_u_and_l_u(p, n):
    acc = Acceptance(p, ((n, 1.0),), rho=0.3, f=1.0)
    assert acc.r_u(0.8) == pytest.approx(theory.r_u(p, n, 0.8, 0.3))
    assert acc.l_u(0.8, 0.25) == pytest.approx(theory.l_u(p, n, 0.8, 0.3, 0.25))


def test_per_step_counts_by_hand():
    acc = Acceptance(0.5, ((2, 1.0),), rho=0.4, f=1.0)  # E = 1 + 0.5 = 1.5 committed steps per block
    assert acc.verifies_per_step == pytest.approx(2 / 3)
    assert acc.repairs_per_step == pytest.approx(0.4 * 0.5)
    assert acc.drafts_per_step == pytest.approx(2 / 1.5)
    half = Acceptance(0.5, ((2, 1.0),), rho=0.4, f=0.5)  # half the steps never meet the verifier
    assert half.verifies_per_step == pytest.approx(1 / 3)
    assert half.drafts_per_step == pytest.approx(0.5 * 2 / 1.5 + 0.5)


def test_block_mix_from_a_mean_and_from_counts():
    acc = Acceptance.from_mean(0.9, 1.8, 0.2, 0.3)
    assert acc.blocks == ((1, pytest.approx(0.2)), (2, pytest.approx(0.8)))
    assert acc.mean_n == pytest.approx(1.8)
    mix = Acceptance.from_counts(0.9, {1: 3, 4: 1}, 0.2, 0.3)
    assert mix.per_block == pytest.approx(0.75 * 1 + 0.25 * theory.expected_steps_per_block(0.9, 4))
    assert parse_blocks("1:75,2:39") == {1: 75, 2: 39} and parse_blocks("1.8") == 1.8


@pytest.mark.parametrize("bad", [{"p": 1.2}, {"rho": -0.1}, {"f": 0.0}, {"blocks": ((0, 1.0),)},
                                 {"blocks": ((1, 0.5),)}, {"blocks": ((1.5, 1.0),)}])
def test_bad_acceptance_is_refused(bad):
    args = {"p": 0.9, "blocks": ((2, 1.0),), "rho": 0.2, "f": 0.5} | bad
    with pytest.raises(ValueError):
        Acceptance(**args)


def test_bad_inputs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="n must be >= 1"):
        Acceptance.from_mean(0.9, 0.5, 0.2, 0.3)
    with pytest.raises(ValueError, match="cached <= prompt"):
        CallShape(10, 20, 5)
    with pytest.raises(ValueError, match="sessions >= 1"):
        Traffic(0, 10, 1)
    with pytest.raises(ValueError, match="gpus, replicas"):
        Engine(DENSE, gpu(1e14), gpus=0)
    with pytest.raises(ValueError, match="do not fit"):
        Engine(load_model("qwen3.5-397b-a17b"), load_gpu("h20"), gpus=1).batch_cap(4000)
    with pytest.raises(ValueError, match="LENGTH:COUNT"):
        parse_blocks("1:x")
    with pytest.raises(ValueError, match="unknown GPU"):
        gpu_profile("h100-typo")


# -- the roofline at a batch ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [CallShape(5000, 4000, 700), CallShape(6000, 0, 600), CallShape(3000, 3000, 20)])
def test_batch_one_equals_call_cost(shape):
    for spec, g, n in ((load_model("qwen3.5-397b-a17b"), load_gpu("h20"), 16), (DENSE, gpu(3e13), 1)):
        ours = call_at_batch(Engine(spec, g, n), shape, 1)
        ref = call_cost(spec, g, n, shape.prompt, shape.cached, shape.decode)
        assert ours.hbm == pytest.approx(ref.hbm_point)
        assert ours.latency_s == pytest.approx(ref.gpu_latency_s)
        assert ours.gpu_s == pytest.approx(ref.gpu_latency_s * n)
        assert ours.flops == pytest.approx(ref.flops)


def test_weight_reads_are_shared_by_the_batch():
    engine = Engine(FLAT, gpu(1e18), 1)
    shape = CallShape(100, 100, 10)  # decode only
    for b in (1, 4, 16):
        assert call_at_batch(engine, shape, b).hbm == pytest.approx(10 * 2e9 / b, rel=1e-6)
        assert call_at_batch(engine, shape, b).latency_s == pytest.approx(10 * 2e9 / 2e12, rel=1e-6)
    moe = Engine(load_model("qwen3.5-397b-a17b"), load_gpu("h20"), 16)
    per_call = [call_at_batch(moe, CallShape(5000, 4000, 700), b).hbm for b in (1, 2, 8, 64, 512)]
    assert per_call == sorted(per_call, reverse=True)


def test_planner_at_batch_one_is_proposition_1():
    """With the repair shaped like a strong step, SpecAgent's strong HBM per step over Strong-only's is
    exactly f * R_u(v/d) with v/d the verify's HBM over the step's."""
    acc = Acceptance.from_counts(0.8, {1: 5, 3: 2, 6: 1}, 0.4, 0.6)
    step = CallShape(5000, 4500, 700)
    shapes = Shapes(step, CallShape(5600, 3000, 620), step, step, 12000)
    strong = Engine(load_model("qwen3.5-397b-a17b"), load_gpu("h20"), 16)
    weak = Engine(load_model("qwen3-4b"), load_gpu("h20"), 1)
    sa = step_cost("specagent", acc, shapes, strong, weak).strong.hbm
    so = step_cost("strong", acc, shapes, strong, weak).strong.hbm
    v_over_d = call_at_batch(strong, shapes.verify, 1).hbm / call_at_batch(strong, step, 1).hbm
    assert sa / so == pytest.approx(acc.f * acc.r_u(v_over_d))


# -- load, crossover, sizing ----------------------------------------------------------------------------


def test_operating_point_obeys_littles_law():
    i = paper_inputs(sessions=150)
    weak = Engine(i.weak.spec, i.weak.gpu, 1, replicas=10)
    for method in ("strong", "specagent"):
        o = operate(method, i.traffic, i.acceptance, i.shapes, i.strong, weak)
        assert o.capped is None
        assert o.batch_strong == pytest.approx(o.steps_per_s * o.cost.strong.latency_s / i.strong.replicas, rel=1e-3)
        cycle = i.traffic.think_time_s + o.cost.strong.latency_s + o.cost.weak.latency_s
        assert o.steps_per_s * cycle == pytest.approx(150, rel=1e-3)


def test_a_full_replica_makes_sessions_queue():
    i = paper_inputs(sessions=2000)
    strong = Engine(i.strong.spec, i.strong.gpu, 16, max_batch=32)
    o = operate("strong", i.traffic, i.acceptance, i.shapes, strong, i.weak)
    assert o.capped == "strong" and o.batch_strong == pytest.approx(32, rel=1e-3)
    assert o.step_latency_s == pytest.approx(2000 / o.steps_per_s - i.traffic.think_time_s)
    assert o.step_latency_s > o.cost.strong.latency_s * 5  # mostly queueing


def test_saving_is_proposition_1_at_low_load_and_shrinks_as_batches_grow():
    i = paper_inputs()
    low = at(i, 1)
    assert savings(low["strong"], low["specagent"])["hbm"] == pytest.approx(
        step_cost("strong", i.acceptance, i.shapes, i.strong, i.weak).strong.hbm
        / step_cost("specagent", i.acceptance, i.shapes, i.strong, i.weak).strong.hbm)
    high = at(i, 300)
    assert high["strong"].batch_strong > high["specagent"].batch_strong > 1
    assert savings(high["strong"], high["specagent"])["hbm"] < 0.6 * savings(low["strong"], low["specagent"])["hbm"]


def compute_heavy(peak: float) -> PlanInputs:
    """A dense strong model whose verify prefills 6,000 tokens: fewer weight reads than Strong-only, more FLOPs."""
    acc = Acceptance.from_mean(0.9, 4, 0.0, 1.0)
    shapes = Shapes(step=CallShape(2000, 1900, 500), verify=CallShape(6000, 0, 50), repair=CallShape(6000, 6000, 500),
                    draft=CallShape(2000, 1900, 500), max_context=4000)
    g = gpu(peak)
    return PlanInputs(Engine(DENSE, g, 1, 1, 4096), Engine(SMALL, g, 1, 1, 4096), Traffic(10, 20, 0.0), acc, shapes,
                      auto_strong=False)


def test_crossover_moves_out_as_the_gpu_gets_more_flops_per_byte():
    found = []
    for peak in (1e14, 2e14, 4e14):
        i = compute_heavy(peak)
        first, _ = crossovers(i, sweep(i, 3000, 16))["gpu_s"]
        assert first is not None
        found.append(first)
    assert found[0] < found[1] < found[2]
    i = compute_heavy(1e16)  # compute is nearly free: SpecAgent's extra prefill FLOPs never catch up
    assert crossovers(i, sweep(i, 3000, 16))["gpu_s"] == (None, None)


def test_replicas_and_shards_by_hand():
    """FLAT on a GPU that is never compute-bound: a pass takes 2 GB / 1 TB/s = 2 ms at any batch, a step
    decodes 100 tokens, so a step takes 0.2 s in the strong engine; think 0.8 s makes a 1 s cycle. 95
    sessions ask 95 steps/s and keep 95 x 0.2 = 19 sequences in the engine: 2 replicas at batch 10 (19,000
    decode tokens/s... 9,500 needed against 5,000 per replica); 95 steps/s need 1 shard of 100, 2 of 50."""
    acc = Acceptance.from_mean(0.9, 2, 0.0, 1.0)
    step = CallShape(100, 100, 100)
    shapes = Shapes(step, step, step, step, 200)
    g = gpu(1e18, bw=1e12, memory=1e12)
    i = PlanInputs(Engine(FLAT, g), Engine(FLAT, g), Traffic(95, 10, 0.8), acc, shapes, target_batch_strong=10,
                   target_batch_weak=10)
    s = size(i, "strong")
    assert s.steps_per_s == pytest.approx(95, rel=1e-6)
    assert (s.strong_replicas, s.weak_replicas, s.shards) == (2, 0, 1)
    assert s.strong_decode_tokens_per_s == pytest.approx(9500, rel=1e-6)
    assert s.strong_replica_tokens_per_s == pytest.approx(5000, rel=1e-6)
    assert size(PlanInputs(**{**i.__dict__, "shard_steps_per_s": 50}), "strong").shards == 2


def test_target_batch_of_a_dense_model_is_the_balance_point():
    """Without KV reads, a dense bf16 model's sequence costs 2 x params FLOPs against the pass's 2 x params
    bytes: the target batch is peak / bw, the balance point ``profiles.estimated_knee`` gives."""
    g = gpu(1e14, bw=1e12)
    assert amortizing_batch(Engine(FLAT, g), 100) == pytest.approx(100, rel=1e-4)
    assert amortizing_batch(Engine(FLAT, g), 100) == pytest.approx(estimated_knee(g), rel=1e-4)
    moe = Engine(load_model("qwen3.5-397b-a17b"), load_gpu("h20"), 16)
    assert amortizing_batch(moe, 5000) > 256  # all 397B weights are the shared cost of a large batch


def test_plan_on_the_paper_deployment_is_consistent():
    plan = make_plan(paper_inputs(sessions=1000), points=10)
    assert plan.at_load["strong"].batch_strong > plan.at_load["specagent"].batch_strong
    assert plan.sizing["specagent"].strong_replicas < plan.sizing["strong"].strong_replicas
    assert plan.r_predicted == pytest.approx(plan.inputs.acceptance.f * plan.inputs.acceptance.r_u(plan.v_over_d))
    assert all(math.isfinite(v) and v > 0 for v in plan.saving.values())


# -- inputs and the command -----------------------------------------------------------------------------


def test_a_measured_profile_is_accepted_and_labelled(tmp_path):
    path = tmp_path / "dev.yaml"
    write_profile(path, {"name": "dev", "hbm_bytes_per_s": 3e12, "peak_flops": 5e14, "memory_bytes": 8e10,
                         "source": "measured"},
                  {"label": "measured", "device": "NVIDIA H200", "driver": "1", "date": "2026-12-01", "torch": "2"})
    g, label = gpu_profile(str(path))
    assert g.hbm_bytes_per_s == 3e12 and label.startswith("measured on NVIDIA H200")
    assert gpu_profile("h20")[1].startswith("shipped profile")


@pytest.fixture(scope="module")
def bench_file(tmp_path_factory) -> Path:
    """A small simulated bench run (Strong-only and SpecAgent), stored as `bench tau2` stores it."""
    from specagent_ray.bench.quality.runs import BenchConfig, run_bench
    from specagent_ray.sim.gold import SimSettings

    cfg = BenchConfig(domain="airline", methods=("strong", "specagent"), trials=2,
                      task_ids=tuple(str(t) for t in range(6)), sim=SimSettings.for_domain("airline", seed=0), workers=1)
    path = tmp_path_factory.mktemp("bench") / "tau2-airline-seed0.json"
    path.write_text(json.dumps({"results": [r.model_dump() for r in run_bench(cfg)]}))
    return path


@pytest.mark.slow  # the bench run behind `bench_file` costs 9 s of CPU
def test_planner_reproduces_the_bench_ledger_within_15_percent(bench_file):
    """Planner (estimated, per call) against the run's own ledgers (simulated tokens, estimated HBM)."""
    bench = inputs_from_results(load_results([bench_file]), "test")
    i = paper_inputs()
    i = PlanInputs(i.strong, i.weak, i.traffic, bench.acceptance, bench.shapes)
    for method in ("strong", "specagent"):
        assert per_call_hbm(i, method) == pytest.approx(bench.strong_hbm_per_step[method], rel=0.15)


@pytest.mark.slow
def test_plan_command_writes_labelled_json_and_plot(tmp_path, bench_file):
    assert main(["plan", "--sessions", "50", "--points", "6", "--from-bench", str(bench_file),
                 "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["labels"]["outputs"] == "estimated" and doc["labels"]["acceptance"].startswith("simulated")
    assert doc["labels"]["gpu"].startswith("shipped profile")
    assert set(doc["estimated"]["crossover"]) == {"hbm", "gpu_s", "latency"}
    assert (tmp_path / "plan.png").stat().st_size > 10_000


def test_plan_command_refuses_bad_inputs(tmp_path, capsys):
    assert main(["plan", "--p", "1.5", "--out", str(tmp_path)]) == 2
    assert "p must lie in" in capsys.readouterr().out
    assert main(["plan", "--from-bench", str(tmp_path / "missing.json"), "--out", str(tmp_path)]) == 2
    assert main(["plan", "--strong-replicas", "two", "--out", str(tmp_path)]) == 2


def test_plan_help_teaches(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    for words in ("Little's law", "--from-bench", "--check-sim", "crossover", "SIMULATED", "measured"):
        assert words in out
