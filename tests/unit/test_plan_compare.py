"""``specagent-ray plan --compare-gpu`` (planner/compare_gpu.py) and the GPU profile's label (planner/command.py)."""

from __future__ import annotations

import json

import pytest

from specagent_ray.planner.command import gpu_profile, shipped_label
from specagent_ray.planner.compare_gpu import rows
from specagent_ray.cli import main
from specagent_ray.costs.fleet import PlanInputs, make_plan
from specagent_ray.costs.planner import Acceptance, Engine, Traffic, token_model_shapes
from specagent_ray.costs.specs import GpuProfile, load_gpu, load_model


def test_the_shipped_label_names_the_measured_fields_of_a_profile():
    assert gpu_profile("h200")[1] == "shipped profile (costs/data/gpus.yaml: h200; peak_flops measured)"
    assert gpu_profile("h20")[1] == "shipped profile (costs/data/gpus.yaml: h20)"
    assert gpu_profile("h200-datasheet")[1] == "shipped profile (costs/data/gpus.yaml: h200-datasheet)"
    made_up = GpuProfile(name="x", hbm_bytes_per_s=1, peak_flops=1, memory_bytes=1,
                         source="peak_flops is a datasheet's. hbm_bytes_per_s is MEASURED by a copy. Nothing else.")
    assert shipped_label(made_up) == "shipped profile (costs/data/gpus.yaml: x; hbm_bytes_per_s measured)"


def test_h200_datasheet_is_h200_but_for_its_peak():
    old, new = load_gpu("h200-datasheet"), load_gpu("h200")
    assert old.peak_flops == 989e12 and new.peak_flops == 771e12
    assert old.model_dump(exclude={"name", "source", "peak_flops"}) == new.model_dump(exclude={"name", "source",
                                                                                              "peak_flops"})


def _plan(gpu: str):
    acc = Acceptance.from_mean(0.82, 1.6, 0.2, 0.29)
    g = load_gpu(gpu)
    return make_plan(PlanInputs(Engine(load_model("qwen3.5-397b-a17b"), g, 8), Engine(load_model("qwen3-4b"), g, 1),
                                Traffic(1000, 14, 1.0), acc, token_model_shapes(acc, 14)), points=12)


def test_rows_put_each_crossover_next_to_the_other_with_the_difference():
    a, b = _plan("h200"), _plan("h200-datasheet")
    table = {r[0]: r[1:] for r in rows(a, b)}
    first_a, first_b = a.crossover["gpu_s"][0], b.crossover["gpu_s"][0]
    assert first_a is not None and first_b is not None and round(first_a) != round(first_b)
    assert table["GPU-s / step saving <= 1 from"] == (
        f"{first_a:,.0f} sessions", f"{first_b:,.0f} sessions",
        f"{first_a - first_b:+,.0f} sessions ({(first_a / first_b - 1) * 100:+.1f} %)")
    assert table["strong HBM / step saving <= 1 from"] == ("none within range", "none within range", "-")
    assert table["GPU-s / step saving at 1000 sessions"][:2] == (f"{a.saving['gpu_s']:.2f}x", f"{b.saving['gpu_s']:.2f}x")


def test_plan_prints_the_corrected_h200_crossover_next_to_the_datasheet_one(tmp_path, capsys):
    """The issue's check: `plan` on the corrected H200 prints its crossover next to the old one."""
    assert main(["plan", "--gpu", "h200", "--strong-gpus", "8", "--compare-gpu", "h200-datasheet",
                 "--points", "8", "--out", str(tmp_path)]) == 0  # the crossover is refined between points
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "plan.json").read_text())
    new, old = doc["estimated"]["crossover"]["gpu_s"][0], doc["compare"]["estimated"]["crossover"]["gpu_s"][0]
    assert round(new) != round(old)  # 286 against 290 sessions when this was written
    row = next(line for line in out.splitlines() if "GPU-s / step saving <=" in line)
    assert f"{new:,.0f} sessions" in row and f"{old:,.0f} sessions" in row and f"{new - old:+,.0f} sessions" in row
    assert "--gpu h200 (A) against --compare-gpu h200-datasheet (B): ESTIMATED" in out
    text = " ".join(out.split())  # the caption: each profile's label
    assert ("A's GPU profile: shipped profile (costs/data/gpus.yaml: h200; peak_flops measured). B's: shipped "
            "profile (costs/data/gpus.yaml: h200-datasheet).") in text
    assert doc["compare"]["labels"] == {"gpu": "shipped profile (costs/data/gpus.yaml: h200-datasheet)",
                                        "outputs": "estimated"}
    assert doc["compare"]["gpu"]["peak_flops"] == 989e12 and doc["inputs"]["strong"]["gpu"]["peak_flops"] == 771e12


def test_compare_gpu_refuses_the_sim_checks_and_is_taught(tmp_path, capsys):
    assert main(["plan", "--compare-gpu", "h200", "--check-sim", "--out", str(tmp_path)]) == 2
    assert "--compare-gpu goes with a plan" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--compare-gpu NAME_OR_YAML" in text and "h200-datasheet" in text and "A / B - 1" in text
