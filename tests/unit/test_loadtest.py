"""The load generator against the real gateway and coordinator in one process (simulated engines,
no Ray): both loop modes, the reports, the bounds, and bad inputs."""

from __future__ import annotations

import asyncio
import csv
import json
import time

import pytest

from specagent_ray.cli import main
from specagent_ray.loadtest.report import load_summary, write_outputs
from specagent_ray.loadtest.runner import LoadAborted, LoadConfig, LoadRun
from specagent_ray.loadtest.workload import Workload, parse_mix
from specagent_ray.serve.client import GatewayClient
from specagent_ray.serve.config import LatencyModel
from specagent_ray.testing.gateway_server import in_process_gateway
from specagent_ray.ports import free_port

MIX = parse_mix("airline:0-5,retail:0-3")


def run(cfg: LoadConfig):
    return asyncio.run(LoadRun(cfg).run())


def test_task_mix_parses_ranges_and_refuses_bad_entries():
    assert parse_mix("airline:0-2, retail:7") == (("airline", "0"), ("airline", "1"), ("airline", "2"), ("retail", "7"))
    for bad, text in (("airline", "SOURCE:ID"), ("airline:3-1", "FIRST <= LAST"), ("airline:a-b", "FIRST-LAST"),
                      (",", "empty")):
        with pytest.raises(ValueError, match=text):
            parse_mix(bad)
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        LoadConfig("http://x", "k", Workload(MIX), concurrency=0)
    with pytest.raises(ValueError, match="rate > 0"):
        LoadConfig("http://x", "k", Workload(MIX), mode="open", rate=0)


def test_closed_loop_runs_every_session_and_reports_latency_batches_and_savings(tmp_path):
    # A window wide enough that sessions share a verifier batch also on a busy machine.
    with in_process_gateway(tmp_path / "log", batch_window_ms=20) as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX), concurrency=6, sessions=14, duration_s=120, drain_s=60,
                         baseline_sessions=4)
        result = run(cfg)
    s = load_summary(result)
    assert s["sessions"] == {"started": 14, "done": 14, "errors": 0, "unfinished": 0, "shed": 0, "throttled_429s": 0}
    assert s["stopped_because"] in ("14 sessions started", "all sessions started and finished")
    assert s["engines"] == "sim" and s["simulated_engines"]
    assert s["committed_steps"] == sum(r.steps for r in result.load()) > 14
    assert s["step_latency_s"]["n"] == s["committed_steps"] and s["step_latency_s"]["p99"] > 0
    assert s["session_latency_s"]["n"] == 14
    vb = s["verify_batch_sizes"]
    assert vb["batches"] > 0 and max(vb["sizes"]) > 1  # sessions shared verifier batches
    st = s["strong_tokens"]
    assert st["pairs"] == 4 and {r.method for r in result.baseline()} == {"strong"}
    assert st["strong_decode"]["ratio"] < 1  # SpecAgent's strong model decodes less than Strong-only's
    paths = write_outputs(result, s, tmp_path / "out")
    assert json.loads(paths[0].read_text())["committed_steps"] == s["committed_steps"]
    with paths[1].open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 18 and {r["phase"] for r in rows} == {"load", "baseline"}
    assert paths[2].name == "latency.png" and paths[2].stat().st_size > 10_000


def test_open_loop_sheds_arrivals_above_its_cap_and_stops_at_its_duration(tmp_path):
    with in_process_gateway(tmp_path / "log") as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX), mode="open", rate=40, concurrency=2, sessions=1000,
                         duration_s=2, drain_s=30, baseline_sessions=0)
        result = run(cfg)
    s = load_summary(result)
    assert s["stopped_because"] == "duration 2 s reached"
    assert s["sessions"]["shed"] > 0 and s["sessions"]["errors"] == 0
    assert 0 < s["sessions"]["started"] < 1000
    starts = [r.start_s for r in result.load()]
    assert max(starts) <= 2.5  # nothing started after the duration


def test_sessions_still_running_at_the_bound_are_cancelled_on_the_server(tmp_path):
    slow = LatencyModel(draft_base_s=0.05, draft_per_request_s=0, verify_base_s=1.0, verify_per_request_s=0,
                        step_base_s=0.05)
    with in_process_gateway(tmp_path / "log", latency=slow) as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX), concurrency=3, duration_s=0.5, drain_s=0.5,
                         baseline_sessions=0)
        begun = time.monotonic()
        result = run(cfg)
        took = time.monotonic() - begun

        async def statuses():
            async with GatewayClient(url, "dev-key") as c:
                return [(await c.trajectory(r.session_id))["status"] for r in result.load() if r.session_id]
        server_side = asyncio.run(statuses())
    s = load_summary(result)
    assert s["sessions"]["unfinished"] == 3 and s["sessions"]["errors"] == 0
    assert took < 0.5 + 0.5 + 20  # duration + drain, plus the cancel calls' own bound
    assert server_side and set(server_side) == {"cancelled"}


def test_unreachable_url_and_wrong_key_stop_before_the_run_with_one_line(tmp_path, capsys, monkeypatch):
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(LoadAborted, match="cannot reach"):
        run(LoadConfig(dead, "k", Workload(MIX), duration_s=5))
    monkeypatch.setenv("LT_KEY", "wrong")
    assert main(["loadtest", "--url", dead, "--api-key-env", "LT_KEY", "--out", str(tmp_path / "a")]) == 2
    with in_process_gateway(tmp_path / "log") as url:
        with pytest.raises(LoadAborted, match=r"refused the API key \(HTTP 401\)"):
            run(LoadConfig(url, "wrong", Workload(MIX), duration_s=5))
        assert main(["loadtest", "--url", url, "--api-key-env", "LT_KEY", "--out", str(tmp_path / "b")]) == 2
    out = capsys.readouterr().out
    assert "load test not started" in out and "cannot reach" in out and "HTTP 401" in out
    assert "Traceback" not in out
    monkeypatch.delenv("LT_KEY")
    assert main(["loadtest", "--url", url, "--api-key-env", "LT_KEY"]) == 2
    assert "set the API key in $LT_KEY" in capsys.readouterr().out


def test_a_server_that_starts_failing_mid_run_gives_an_error_summary_and_stops_early(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LT_KEY", "dev-key")
    with in_process_gateway(tmp_path / "log", fail_after=40) as url:
        begun = time.monotonic()
        code = main(["loadtest", "--url", url, "--api-key-env", "LT_KEY", "--concurrency", "4", "--duration-s", "60",
                     "--drain-s", "5", "--max-errors", "5", "--baseline-sessions", "0", "--out", str(tmp_path / "o")])
        took = time.monotonic() - begun
    out = capsys.readouterr().out
    assert code == 1
    assert took < 40  # stopped early, well before --duration-s
    summary = json.loads((tmp_path / "o" / "loadtest.json").read_text())
    assert summary["stopped_because"].startswith("stopped early: 5 errors")
    assert summary["errors_by_kind"].get("http_500", 0) >= 1 and summary["sessions"]["done"] >= 1
    assert "errors by kind" in out and "http_500" in out and "injected failure" in out
    assert "Traceback" not in out


def test_commits_delivered_together_share_their_latency():
    from specagent_ray.loadtest.runner import step_latencies

    # start at 1.0; a delivery of 2 steps at 3.0, then one step at 3.5
    assert step_latencies(1.0, [(3.0, 2), (3.5, 1)]) == [1.0, 1.0, 0.5]
    assert step_latencies(0.0, []) == []


def test_stages_add_workers_level_by_level_and_are_reported_per_level(tmp_path):
    cfg = LoadConfig("http://x", "k", Workload(MIX), stages=(2, 6), duration_s=10, ramp_s=1)
    run_ = LoadRun(cfg)
    assert cfg.concurrency == 6 and run_.levels() == [(0.0, 5.0, 2), (5.0, 10.0, 6)]
    assert [run_._start_delay(w) for w in (0, 1, 2, 5)] == [0.0, 0.5, 5.0, 5.75]
    with pytest.raises(ValueError, match="ascending"):
        LoadConfig("http://x", "k", Workload(MIX), stages=(6, 2))
    with in_process_gateway(tmp_path / "log") as url:
        result = run(LoadConfig(url, "dev-key", Workload(MIX), stages=(1, 4), duration_s=4, drain_s=30,
                                baseline_sessions=0))
    stages = load_summary(result)["stages"]
    assert [st["concurrency"] for st in stages] == [1, 4]
    assert stages[0]["in_flight_mean"] <= 1 < stages[1]["in_flight_mean"] <= 4
    assert all(st["steps"] > 0 for st in stages)


def test_429s_are_waited_out_and_counted(tmp_path):
    with in_process_gateway(tmp_path / "log", max_sessions=1, retry_after_s=1) as url:
        result = run(LoadConfig(url, "dev-key", Workload(MIX), concurrency=3, sessions=4, duration_s=120,
                                drain_s=60, baseline_sessions=0))
    s = load_summary(result)
    assert s["sessions"]["done"] == 4 and s["sessions"]["errors"] == 0
    assert s["sessions"]["throttled_429s"] > 0  # the server admitted one session at a time


def test_a_run_split_over_client_processes_sends_each_session_once_and_reports_as_one(tmp_path):
    from specagent_ray.loadtest.processes import merged_timeline, run_parts, split

    cfg = LoadConfig("http://x", "k", Workload(MIX), stages=(3, 8), sessions=11, rate=6.0, max_errors=5,
                     baseline_sessions=2, duration_s=4)
    parts = split(cfg, 3)
    assert [p.stages for p in parts] == [(1, 3), (1, 3), (1, 2)] and sum(p.sessions for p in parts) == 11
    assert [p.baseline_sessions for p in parts] == [2, 0, 0] and sum(p.rate for p in parts) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="at least 4"):
        split(cfg, 4)
    with in_process_gateway(tmp_path / "log") as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX), concurrency=4, sessions=10, duration_s=120, drain_s=60,
                         baseline_sessions=2)
        ticks = []
        result = run_parts(cfg, 2, ticks.append)
    s = load_summary(result)
    assert sorted(r.index for r in result.load()) == list(range(10))  # every session once, none twice
    assert s["sessions"]["done"] == 10 and s["sessions"]["errors"] == 0 and len(result.baseline()) == 2
    assert s["committed_steps"] == sum(r.steps for r in result.load()) and s["client_cpu_ms_per_step"] > 0
    assert ticks and result.timeline and result.timeline[-1]["started"] <= 10
    a = [{"t": 0.0, "started": 2, "done": 0}, {"t": 1.0, "started": 3, "done": 1}, {"t": 2.01, "started": 4, "done": 3}]
    b = [{"t": 0.4, "started": 2, "done": 0}, {"t": 1.4, "started": 2, "done": 2}]  # a part that began 0.4 s later
    merged = merged_timeline([a, b])  # each second: every part's latest counts, added up
    assert [(m["t"], m["started"], m["done"]) for m in merged] == [(0.0, 4, 0), (1.0, 5, 3), (2.0, 6, 5)]
    assert all(0 <= r.start_s <= r.end_s <= result.wall_s for r in result.load())


SCRIPTED = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client"}}}


@pytest.mark.slow
def test_api_responses_runs_the_same_conversations_on_both_apis_and_reports_the_overhead(tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.setenv("LT_KEY", "dev-key")
    with in_process_gateway(tmp_path / "log", app=SCRIPTED) as url:
        code = main(["loadtest", "--url", url, "--api-key-env", "LT_KEY", "--api", "responses", "--sessions", "12",
                     "--concurrency", "6", "--turns", "2", "--out", str(tmp_path / "o")])
    report = json.loads((tmp_path / "o" / "responses-overhead.json").read_text())
    assert code == 0 and report["errors"] == [] and "MEASURED" in report["label"]
    assert report["apis"]["sessions"]["turns"] == report["apis"]["responses"]["turns"] == 12
    sessions, responses = report["apis"]["sessions"], report["apis"]["responses"]
    assert report["responses_overhead"]["p50_ms"] == pytest.approx(responses["p50_ms"] - sessions["p50_ms"])
    assert "Responses API overhead: p50" in capsys.readouterr().out


def test_api_responses_against_a_server_without_the_routes_reports_errors_and_exits_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LT_KEY", "dev-key")
    with in_process_gateway(tmp_path / "log") as url:  # sim engines: no Responses routes, no client source
        code = main(["loadtest", "--url", url, "--api-key-env", "LT_KEY", "--api", "responses", "--sessions", "2",
                     "--turns", "1", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 1 and "error:" in out and "Traceback" not in out
