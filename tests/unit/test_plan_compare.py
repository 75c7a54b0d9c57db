"""``specagent-ray plan --compare-gpu`` (planner/compare_gpu.py) and the GPU profile's label (planner/command.py);
each of ``plan``'s tables and its plot says which view and which roles it shows (issue 55)."""

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
    busy = "busy GPU-s / step (all roles, today's verifier fleet)"
    assert table[f"{busy} saving <= 1 from"] == (
        f"{first_a:,.0f} sessions", f"{first_b:,.0f} sessions",
        f"{first_a - first_b:+,.0f} sessions ({(first_a / first_b - 1) * 100:+.1f} %)")
    assert table["strong HBM / step (strong model only) saving <= 1 from"] == ("none within range",
                                                                              "none within range", "-")
    assert table[f"{busy} saving at 1000 sessions"][:2] == (f"{a.saving['gpu_s']:.2f}x", f"{b.saving['gpu_s']:.2f}x")


def test_plan_prints_the_corrected_h200_crossover_next_to_the_datasheet_one(tmp_path, capsys):
    """The issue's check: `plan` on the corrected H200 prints its crossover next to the old one."""
    assert main(["plan", "--gpu", "h200", "--strong-gpus", "8", "--compare-gpu", "h200-datasheet",
                 "--points", "8", "--out", str(tmp_path)]) == 0  # the crossover is refined between points
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "plan.json").read_text())
    new, old = doc["estimated"]["crossover"]["gpu_s"][0], doc["compare"]["estimated"]["crossover"]["gpu_s"][0]
    assert round(new) != round(old)  # 286 against 290 sessions when this was written
    compared = out.split("(A) against")[1]  # the crossover table above it has the same row name
    row = next(line for line in compared.splitlines() if "busy GPU-s / step" in line)  # its first: "<= 1 from"
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


# -- issue 55: every table of `plan` says which view (today's verifier fleet, or a fleet sized to the load) and
# which roles it shows, and the figures of one view come from one function ------------------------------------


def _flags_plan(*flags: str, points: int = 32):
    import argparse

    from specagent_ray.planner.command import add_parser, resolve

    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    return make_plan(resolve(sub.choices["plan"].parse_args(list(flags))).inputs, points=points)


def _lines(table) -> list[str]:
    from rich.console import Console

    console = Console(record=True, width=400)
    console.print(table)
    return console.export_text().splitlines()


def _cells(table) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in _lines(table) if line.startswith("│")]


def test_compare_gpu_labels_each_rows_view_and_adds_the_headlines_figures_for_both_gpus():
    from specagent_ray.planner.fleet_tables import fleet_views

    a, b = _plan("h200"), _plan("h200-datasheet")
    table = {r[0]: r[1:] for r in rows(a, b)}
    assert "strong HBM / step (strong model only) saving at 1000 sessions" in table
    assert "busy GPU-s / step (all roles, today's verifier fleet) saving at 1000 sessions" in table
    assert not any(k.startswith(("GPU-s / step", "strong HBM / step saving")) for k in table)  # none unlabelled
    va, vb = fleet_views(a), fleet_views(b)  # the headline table's function
    where = "(fleet sized to 1000 sessions)"
    for m, name in (("strong", "Strong-only"), ("specagent", "SpecAgent")):
        assert table[f"GPUs in all, {name} {where}"][:2] == (str(va[m].total_gpus), str(vb[m].total_gpus))
        assert table[f"GPU-s per committed step (GPUs per committed step/s; all roles), {name} {where}"][:2] == (
            f"{va[m].gpu_s_per_step:.3f}", f"{vb[m].gpu_s_per_step:.3f}")
        assert table[f"HBM per committed step, TB, all roles, {name} {where}"][:2] == (
            f"{va[m].hbm()['total'] / 1e12:.2f}", f"{vb[m].hbm()['total'] / 1e12:.2f}")
    saving = table[f"GPU-s per committed step (GPUs per committed step/s; all roles) saving {where}"]
    assert saving[:2] == tuple(f"{v['strong'].gpu_s_per_step / v['specagent'].gpu_s_per_step:.2f}x" for v in (va, vb))


@pytest.mark.parametrize("flags, roles", [((), "weak + strong"), (("--chain",), "weak + mid + strong")])
def test_the_plots_legend_and_axis_say_the_roles_and_the_view_they_plot(flags, roles, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from specagent_ray.planner.plot import plot

    seen = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: seen.append(fig))
    plot(tmp_path / "plan.png", _flags_plan(*flags, points=4))
    left = seen[0].axes[0]
    legend = [t.get_text() for t in left.get_legend().get_texts()]
    assert legend[0] == "strong HBM per committed step (strong model only)"
    assert legend[1] == f"busy GPU-s per committed step ({roles}; today's verifier fleet)"
    assert legend[2] == "step latency (today's verifier fleet)"
    method = "Chain" if flags else "SpecAgent"
    assert left.get_ylabel() == f"saving on today's verifier fleet:\nStrong-only / {method} (ESTIMATED)"


def test_the_lowest_saving_in_range_is_never_above_the_saving_at_the_planned_load():
    from specagent_ray.planner.command import _crossover_table

    plan = _flags_plan("--chain", "--escalate", "0.3")  # printed 1.71x at the load next to "lowest" 1.73x
    body = _cells(_crossover_table(plan))
    for row in body:
        at_load, lowest = float(row[1].rstrip("x")), float(row[2].split("x")[0])
        assert lowest <= at_load, row
    assert [r[0] for r in body] == ["strong HBM / step (strong model only)",
                                    "busy GPU-s / step (all roles, today's verifier fleet)",
                                    "step latency (today's verifier fleet)"]
    hbm = body[0][2]
    assert hbm == f"{plan.saving['hbm']:.2f}x (1,000, the planned load)" or float(hbm.split("x")[0]) < round(
        plan.saving["hbm"], 2)


def test_the_chain_table_takes_every_mid_figure_from_the_headlines_fleet(tmp_path, capsys, monkeypatch):
    from specagent_ray.planner.chain import chain_table
    from specagent_ray.planner.fleet_tables import fleet_views

    flags = ["--chain", "--escalate", "0.3", "--points", "4"]
    plan = _flags_plan(*flags[:-2], points=4)
    v = fleet_views(plan)["chain"]
    t = chain_table(plan, v)
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["plan", *flags, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split("The chain on")[1]  # `plan` passes the headline's view
    cells = {r[0]: r[1] for r in _cells(t)}
    assert [line for line in printed.splitlines() if line.startswith("│")] == [
        line for line in _lines(t) if line.startswith("│")]
    assert cells["mid batch per replica"] == f"{v.op.batch_mid:.1f}"
    assert "fleet sized to 1000 sessions" in str(t.title)
    assert cells["mid HBM per committed step, TB"] == f"{v.hbm()['mid'] / 1e12:.3f}"
    assert cells["mid GPU-s per committed step (mid GPUs per committed step/s)"] == (
        f"{v.gpus['mid'] / v.steps_per_s:.3f}")
    assert cells["mid verifier replicas"] == str(v.replicas["mid"])
    assert v.op.batch_mid != pytest.approx(plan.at_load["chain"].batch_mid)  # the two views differ here
