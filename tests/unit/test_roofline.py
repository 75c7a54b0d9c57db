"""The roofline probe on the CPU: the command end to end on tiny shapes, the decoder's KV-cache path, the
knee / v/d math on synthetic timings, and the NVML wiring through an injected NVML table (no GPU)."""

from __future__ import annotations

import importlib.util
import io
import math
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest
import yaml
from rich.console import Console

from specagent_ray.bench.roofline import probe as rf
from specagent_ray.bench.roofline.device import (
    SHAPES,
    DramMeter,
    Stepper,
    build_weights,
    copy_check,
    need_bytes,
    new_cache,
    prefill,
    random_ids,
    timed,
)
from specagent_ray.cli import build_parser
from specagent_ray.cli import main as cli_main
from specagent_ray.costs import measured_gpus as pf
from specagent_ray.costs.specs import load_gpu, load_model

# torch is imported where it is used: collection in every xdist worker would pay 1.6 s of CPU for it.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the cpu extra)")


@pytest.fixture(autouse=True)
def one_thread():
    """Two shared cores: intra-op threads only contend. Restored after each test."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- the decoder ---------------------------------------------------------------------------------------------
def test_qwen3_4b_shape_is_the_shipped_spec():
    spec, shape = load_model("qwen3-4b"), SHAPES["qwen3-4b"]
    assert (shape.layers, shape.n_heads, shape.kv_heads, shape.head_dim) == (
        spec.layers, spec.n_heads, spec.kv_heads, spec.head_dim)
    assert shape.params() == pytest.approx(spec.total_params, rel=0.01)  # 4.02e9 against the card's 4.0B
    assert shape.kv_per_token(2) == spec.kv_bytes_per_token


@pytest.mark.parametrize("name", ["tiny", "tiny-wide"])
def test_params_count_the_weights_drawn(name):
    w = build_weights(SHAPES[name], "cpu", 4, 16, seed=0)
    tensors = {id(t): t for t in [w.embed, w.head, w.norm, *(t for p in w.layers for t in p.values())]}
    assert sum(t.numel() for t in tensors.values()) == SHAPES[name].params()


def test_a_decode_step_continues_the_prefill_exactly():
    """Prefill T tokens, then one cached step on token T, gives what a prefill of T+1 tokens gives: the
    same K/V at every layer (so the same hidden states: the step masks the rest of its window and rotates
    at its position) and the same next token."""
    import torch

    shape = SHAPES["tiny-wide"]
    with torch.inference_mode():
        w = build_weights(shape, "cpu", 4, 64, seed=3)
        ids = random_ids(w, 4, 21)
        full_cache = new_cache(w, 4, 21)
        full = prefill(w, ids, full_cache)
        cache = new_cache(w, 4, 30)  # a window longer than needed: positions past the step are masked
        prefill(w, ids[:, :20], cache)
        step = Stepper(w, cache, 4, start=20, graphs=False, advance=True)
        step.ids.copy_(ids[:, 20:21])
        step()
        assert torch.equal(step.ids, full) and int(step.at) == 21
        for (k, v), (fk, fv) in zip(cache, full_cache, strict=True):
            assert torch.allclose(k[:, :, :21], fk, atol=1e-5) and torch.allclose(v[:, :, :21], fv, atol=1e-5)
            assert not k[:, :, 21:].any()
        wrong = Stepper(w, cache, 4, start=25, graphs=False, advance=False)  # the wrong position differs
        wrong.ids.copy_(ids[:, 20:21])
        wrong()
        assert not torch.allclose(cache[0][0][:, :, 25], full_cache[0][0][:, :, 20], atol=1e-3)


def test_expanded_kv_prefill_equals_the_fused_gqa_one():
    """The fallback for GPUs without a fused GQA kernel computes the same prefill."""
    import torch

    with torch.inference_mode():
        w = build_weights(SHAPES["tiny-wide"], "cpu", 4, 32, seed=1)
        ids = random_ids(w, 2, 12)
        fused, expanded = new_cache(w, 2, 12), new_cache(w, 2, 12)
        assert torch.equal(prefill(w, ids, fused), prefill(replace(w, fused_gqa=False), ids, expanded))
        assert all(torch.allclose(a[0], b[0], atol=1e-5) for a, b in zip(fused, expanded, strict=True))


def test_need_bytes_grows_with_batch_and_window():
    s = SHAPES["qwen3-4b"]
    one, four = need_bytes(s, 1, 5640, 5600, 2, False), need_bytes(s, 4, 5640, 5600, 2, False)
    assert four == 4 * one and one > 5640 * s.kv_per_token(2)
    assert need_bytes(s, 1, 5640, 5600, 2, True) > one  # the CPU's attention matrix


def test_the_strong_stand_in_is_the_largest_dense_shape_that_fits():
    cfg = rf.ProbeConfig("cuda", "qwen3-4b", "auto", (1,), 1, 1, 1, 1, 0.1, 1, 8)
    assert rf.pick_strong(cfg, 141e9) == "qwen3-32b"  # H200: 65.6 GB of bf16 weights
    assert rf.pick_strong(cfg, 96e9) == "qwen3-14b"  # H20
    assert rf.pick_strong(cfg, 4e9) == "qwen3-4b"  # nothing larger fits: the weak shape


# -- derived figures on synthetic timings --------------------------------------------------------------------
def test_knee_on_an_h20_like_roofline():
    # flat to 16, then compute-bound with the balance point at 37 sequences: t(256) = 256 / 37
    knee = pf.find_knee({1: 1.0, 4: 1.02, 16: 1.05, 64: 64 / 37, 256: 256 / 37})
    assert (knee.bandwidth_bound_up_to, knee.first_above) == (16, 64)
    assert knee.interpolated == pytest.approx(37.0)
    assert pf.estimated_knee(load_gpu("h20")) == pytest.approx(37.0)  # the paper's figure, from the profile


def test_knee_cases_that_cannot_be_placed():
    flat = pf.find_knee({1: 1.0, 4: 1.1, 16: 1.15})
    assert (flat.bandwidth_bound_up_to, flat.first_above, flat.interpolated) == (16, None, None)
    assert pf.find_knee({4: 1.0, 16: 2.0}) is None  # no batch-1 reference
    assert pf.find_knee({1: None, 4: 1.0}) is None  # batch 1 skipped
    bumpy = pf.find_knee({1: 1.0, 4: 1.3, 16: 1.1})  # the bound range must be contiguous from batch 1
    assert (bumpy.bandwidth_bound_up_to, bumpy.first_above, bumpy.interpolated) == (1, 4, None)
    gap = pf.find_knee({1: 1.0, 4: None, 16: 2.0})  # a skipped batch is ignored, not read as fast
    assert (gap.bandwidth_bound_up_to, gap.first_above, gap.interpolated) == (1, 16, 8.0)
    with pytest.raises(ValueError):
        pf.find_knee({1: 1.0}, tolerance=1.0)


def test_v_over_d():
    # (prefill 2 + verdict 1) over 700 steps at the verdict's 1/40 per step
    assert pf.v_over_d(2.0, 1.0, 40, 700) == pytest.approx(3 / 17.5)
    assert pf.v_over_d(None, 1.0, 40, 700) is None and pf.v_over_d(2.0, None, 40, 700) is None
    assert pf.v_over_d(2.0, 0.0, 40, 700) is None and pf.v_over_d(2.0, 1.0, 0, 700) is None
    assert pf.ratio(1.0, 0.0) is None and pf.ratio(None, 1.0) is None and pf.ratio(1.0, 4.0) == 0.25


def test_estimates_follow_the_roofline():
    shape = SHAPES["qwen3-4b"]
    sh = {"params": shape.params(), "kv_bytes_per_token": shape.kv_per_token(2),
          "attn_flops_per_position": shape.attn_flops()}
    settings = {"elem": 2, "history": 5000, "block": 600, "verdict": 40, "context": 32, "step_tokens": 700}
    h20 = load_gpu("h20")
    one, big = pf.estimate_batch(sh, 1, settings, h20), pf.estimate_batch(sh, 256, settings, h20)
    weights_s = shape.params() * 2 / h20.hbm_bytes_per_s
    assert one["est_decode_step_s"] == pytest.approx(weights_s, rel=0.01)  # batch 1: the weights' read
    assert big["est_decode_step_s"] > 256 * 2 * shape.params() / h20.peak_flops  # past the knee: compute
    assert 0 < one["est_v_over_d"] < 1


# -- the NVML wiring, through an injected NVML table ------------------------------------------------------------
class FakeNvml:
    """One GPU at ``peak`` B/s whose GPM reports ``dram[k]`` percent for the k-th window (the last repeats)."""

    def __init__(self, dram: list[float], peak: float = 1e9, gpm: bool = True, init_error: int | None = None):
        self.dram, self.peak, self.gpm, self.init_error, self.n = dram, peak, gpm, init_error, 0

    def init(self):
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def shutdown(self): ...
    def device_count(self): return 1
    def handle_by_index(self, index): return index
    def utilization(self, handle): return 50.0
    def memory(self, handle): return (1, 2)
    def gpm_supported(self, handle): return self.gpm
    def gpm_sample(self, handle): return object()
    def gpm_free(self, sample): ...
    def peak_bandwidth(self, handle): return self.peak
    def driver_version(self): return "999.1"

    def gpm_dram_bw_util(self, s1, s2):
        self.n += 1
        return self.dram[min(self.n - 1, len(self.dram) - 1)]


class Ticks:
    """A clock that moves one second per read."""

    def __init__(self):
        self.t = -1.0

    def __call__(self):
        self.t += 1.0
        return self.t


def test_phase_bytes_come_from_the_window_around_the_phase():
    # windows: the gap before the phase reads 5 %, the phase 40 %; 1 s each at 1e9 B/s peak
    meter = DramMeter.open("cpu", 0, api=FakeNvml([5.0, 40.0]), clock=Ticks())
    assert meter.driver == "999.1" and meter.reason is None
    seconds, dram, reason = meter.measure(lambda: None, lambda: None)
    assert dram == pytest.approx(0.4e9) and reason is None and seconds >= 0
    # timed: per-call bytes are the window's over the repeats (4 here), the warm-up call is outside it
    calls = []
    _, per_call, reps, _ = timed(lambda: calls.append(1), meter, lambda: None, min_s=1e9, max_reps=4)
    assert reps == 4 and len(calls) == 5 and per_call == pytest.approx(0.4e9 / 4)
    meter.close()


def test_copy_check_ratio_against_the_known_size():
    # 4 copies of 1 KiB: 8 KiB read + written. GPM says 90 % of 8192 B/s over the 1 s window.
    meter = DramMeter.open("cpu", 0, api=FakeNvml([5.0, 90.0], peak=8192), clock=Ticks())
    out = copy_check("cpu", 1024, 4, 0.0, meter, lambda: None)
    assert out["expected_dram_bytes"] == 8192 and out["copies"] == 4
    assert out["sampler_over_expected"] == pytest.approx(0.9) and out["sampler_reason"] is None
    assert out["copy_bytes_per_s"] > 0


@pytest.mark.parametrize(("api", "words"), [
    (None, "CPU run"),
    (FakeNvml([1.0], gpm=False), "GPM"),
    (FakeNvml([1.0], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), "NVML unavailable"),
])
def test_unmeasured_dram_is_none_with_a_reason(api, words):
    meter = DramMeter.open("cpu", 0, api=api, clock=Ticks())
    out = copy_check("cpu", 1024, 2, 0.0, meter, lambda: None)
    assert out["sampler_dram_bytes"] is None and out["sampler_over_expected"] is None
    assert words in out["sampler_reason"]


def test_sampled_bytes_reach_the_table_and_v_over_d():
    cfg = rf.ProbeConfig("cpu", "tiny", "tiny", (1,), 16, 8, 4, 4, 0.0, 1 << 16, 32, copies=2)
    gpu, measured = rf.run_probe(cfg, Console(file=io.StringIO()), api=FakeNvml([50.0]), clock=Ticks())
    (row,) = measured["shapes"]["tiny"]["rows"]
    assert row["verify_prefill_dram_bytes"] > 0 and row["verdict_dram_bytes"] > 0 and row["dram_reason"] is None
    assert measured["derived"]["shapes"]["tiny"]["rows"][1]["v_over_d_bytes"] > 0
    assert measured["copy_check"]["sampler_over_expected"] > 0 and measured["driver"] == "none (CPU run)"
    assert gpu["hbm_bytes_per_s"] == measured["copy_check"]["copy_bytes_per_s"]  # the copy's rate, not the sampler's


def test_phases_past_the_time_budget_are_skipped_not_dropped():
    cfg = rf.ProbeConfig("cpu", "tiny", "tiny", (1, 4), 16, 8, 4, 4, 0.0, 1 << 16, 32, time_budget_s=1e-9)
    _, measured = rf.run_probe(cfg, Console(file=io.StringIO()))
    rows = measured["shapes"]["tiny"]["rows"]
    assert [r["batch"] for r in rows] == [1, 4]
    assert all(r["skipped"] == {"decode": "time budget of 1e-09 s spent", "verify": "time budget of 1e-09 s spent"}
               and r["decode_step_s"] is None for r in rows)
    assert measured["derived"]["shapes"]["tiny"]["knee"] is None  # no batch-1 time: no knee, not a made-up one


# -- the command -----------------------------------------------------------------------------------------------
def test_help_says_what_how_long_and_where(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["bench", "roofline", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0
    for words in ("Measures", "decode step", "verify prefill", "NVML", "minutes on an H200", "Seconds on the CPU",
                  "costs/data/measured/<device>.yaml", "results/roofline-cpu.yaml"):
        assert words in text, words


def test_cpu_run_end_to_end_writes_a_measured_profile(tmp_path, capsys):
    out = tmp_path / "cpu.yaml"
    # a budget between batch 1's and batch 4's verify phase: batch 4 verifies nowhere, and must say so
    sh, window = SHAPES["tiny-wide"], rf.verify_window(rf.ProbeConfig("cpu", "", "", (1,), 48, 16, 4, 8, 0, 1, 1))
    assert window == 80  # 48 + 16 + 4, rounded up to 16
    budget = (need_bytes(sh, 1, window, 64, 4, True) + need_bytes(sh, 4, window, 64, 4, True)) / 2
    assert need_bytes(sh, 4, 8, 7, 4, True) < budget  # batch 4's decode still fits
    argv = ["bench", "roofline", "--device", "cpu", "--batches", "1,4", "--min-phase-s", "0.005", "--copy-mib", "1",
            "--memory-budget-mib", str(budget / (1 << 20)), "--gpu-profile", "h20", "--out", str(out)]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    profile, measured = pf.read_profile(out)
    assert min(profile.hbm_bytes_per_s, profile.peak_flops, profile.memory_bytes) > 0
    assert "MEASURED" in profile.source and profile.name.endswith("-measured")
    assert measured["label"] == "measured" and measured["device_type"] == "cpu"
    assert all(measured[k] for k in ("device", "driver", "date", "torch"))
    assert (measured["weak"], measured["strong"]) == ("tiny", "tiny-wide")
    for name in ("tiny", "tiny-wide"):
        one, four = measured["shapes"][name]["rows"]
        assert min(one[k] for k in ("decode_step_s", "verify_prefill_s", "verdict_decode_s")) > 0
        assert one["skipped"] == {} and four["decode_step_s"] > 0
        assert one["decode_dram_bytes"] is None and "CPU run" in one["dram_reason"]
    skipped = measured["shapes"]["tiny-wide"]["rows"][1]
    assert skipped["verify_prefill_s"] is None and skipped["verdict_decode_s"] is None
    assert skipped["skipped"]["verify"].startswith("needs about") and "MiB" in skipped["skipped"]["verify"]
    derived = measured["derived"]
    assert derived["kappa"][1]["measured"] > 0 and derived["kappa"][1]["estimated"] > 0
    assert derived["estimated_knee"] == pytest.approx(148 / 4 * 2)  # h20 profile at float32: 4 bytes a weight
    assert derived["shapes"]["tiny"]["rows"][1]["v_over_d_time"] > 0
    assert "measured on cpu" in printed and "estimated on the shipped 'h20' profile" in printed
    assert "skipped: tiny-wide batch 4 verify: needs about" in " ".join(printed.split())
    assert "CPU run: no NVML device to read" in printed


def test_a_cpu_run_never_writes_into_the_shipped_data(capsys):
    target = pf.SHIPPED_DIR / "roofline-test.yaml"
    assert cli_main(["bench", "roofline", "--device", "cpu", "--out", str(target)]) == 2
    assert not target.exists() and "never writes" in capsys.readouterr().out
    with pytest.raises(ValueError):
        pf.check_out(pf.MEASURED_DIR / "cpu.yaml", "cpu")
    pf.check_out(pf.MEASURED_DIR / "nvidia-h200.yaml", "cuda")  # a GPU run may
    assert pf.default_out("cuda", "NVIDIA H200") == pf.MEASURED_DIR / "nvidia-h200.yaml"
    assert pf.default_out("cpu", "cpu (x86_64)") == Path("results") / "roofline-cpu.yaml"


def test_profile_files_are_checked(tmp_path):
    gpu = {"name": "x-measured", "hbm_bytes_per_s": 1.0, "peak_flops": 1.0, "memory_bytes": 1.0, "source": "test"}
    with pytest.raises(ValueError, match="label"):
        pf.write_profile(tmp_path / "a.yaml", gpu, {"device": "d", "driver": "1", "date": "x", "torch": "2"})
    with pytest.raises(ValueError, match="'gpus' and 'measured'"):
        pf.read_profile(pf.SHIPPED_DIR / "gpus.yaml")  # a shipped profile is not a measured one
    path = tmp_path / "b.yaml"
    pf.write_profile(path, gpu, {"label": "measured", "device": "d", "driver": "1", "date": "x", "torch": "2"})
    doc = yaml.safe_load(path.read_text())
    doc["measured"]["label"] = "estimated"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match="not labelled"):
        pf.read_profile(path)


def test_device_names_match_shipped_profiles():
    assert pf.match_gpu("NVIDIA H20") == "h20" and pf.match_gpu("NVIDIA H200") == "h200"
    assert pf.match_gpu("NVIDIA A100-SXM4-80GB") is None
    assert pf.slug("NVIDIA H200") == "nvidia-h200" and not math.isnan(pf.estimated_knee(load_gpu("h200")))
