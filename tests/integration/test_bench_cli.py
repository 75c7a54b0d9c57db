"""`specagent-ray bench tau2` end to end on a few tasks: table, JSON, PNG, and clear errors."""

import json

import pytest

from specagent_ray.cli import main


@pytest.mark.slow  # 7 s of real tau2 environments; the fast tier keeps the CLI's error paths
def test_bench_tau2_writes_json_and_plot(tmp_path, capsys):
    rc = main(["bench", "tau2", "--tasks", "1,2,3", "--trials", "2", "--workers", "1", "--out", str(tmp_path),
               "--methods", "strong,weak,specagent,agentcollab,specactions,specagent-exact"])
    assert rc == 0
    doc = json.loads((tmp_path / "tau2-airline-seed0.json").read_text())
    assert doc["labels"]["policies"] == "simulated" and doc["labels"]["flops_hbm_gpu_latency"] == "estimated"
    assert len(doc["results"]) == 3 * 2 * 6
    methods = {s["method"]: s for s in doc["summary"]}
    assert methods["weak"]["strong_calls"] == 0 and methods["strong"]["weak_tokens"] == 0
    assert methods["specagent"]["strong_decode_tokens"] < methods["strong"]["strong_decode_tokens"]
    s = methods["specagent"]  # the headline HBM counts every role
    assert s["total_hbm_tb"] == pytest.approx(s["weak_hbm_tb"] + s["mid_hbm_tb"] + s["strong_hbm_tb"])
    assert s["weak_hbm_tb"] > 0 and methods["strong"]["weak_hbm_tb"] == 0
    assert {t["method"] for t in doc["theory"]} <= {"specagent", "specagent-exact"}
    png = (tmp_path / "tau2-airline-seed0.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "Pass@1" in out and "simulated" in out


@pytest.mark.parametrize("argv, message", [
    (["--methods", "strong,oracle"], "unknown method"),
    (["--k", "0"], "k must be"),
    (["--tasks", "9999"], "no task"),
    (["--trials", "0"], "trials must be"),
])
def test_bad_arguments_give_a_clear_error(argv, message, capsys, tmp_path):
    rc = main(["bench", "tau2", "--workers", "1", "--out", str(tmp_path), *argv])
    assert rc == 2
    assert message in capsys.readouterr().out


def test_each_stored_trajectory_carries_an_estimated_resource_report(tmp_path):
    assert main(["bench", "tau2", "--tasks", "2", "--trials", "1", "--workers", "1", "--out", str(tmp_path),
                 "--methods", "strong,specagent"]) == 0
    doc = json.loads((tmp_path / "tau2-airline-seed0.json").read_text())
    for r in doc["results"]:
        rep = r["resources"]
        assert rep["gpu_seconds_source"] == "estimated" and rep["hbm_source"] == "estimated"
        assert rep["gpu_seconds"] > 0 and rep["hbm_bytes"] > 0  # never a 0 passed off as a reading
        assert rep["strong_calls"] == r["strong"]["calls"]


def test_bench_restart_prints_time_to_ready_before_and_after_compaction(tmp_path, capsys):
    rc = main(["bench", "restart", "--finished", "60", "--live", "4", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out  # every live session was resumed by both starts
    assert "before compaction" in out and "after compaction" in out and "measured" in out
    before, after = (line for line in out.splitlines() if "compaction" in line and "│" in line)
    assert " 64 " in before and " 4 " in after  # sessions restored: all of them, then only the live ones


def test_bench_engines_refuses_an_unknown_feature_before_starting_anything(capsys, tmp_path):
    rc = main(["bench", "engines", "--features", "prefill ahead,turbo", "--models", str(tmp_path / "none")])
    assert rc == 2
    out = capsys.readouterr().out
    assert "'prefill ahead', 'priority', 'placement', 'keep warm'" in out and "turbo" in out
    assert not (tmp_path / "none").exists()  # no model was built, no engine started
