"""The load generator on Locust against the real gateway and coordinator in one process (simulated
engines, no Ray): both loop modes, Locust's distributed mode, the client's part of a session, the
reports, the bounds, and bad inputs. Every run but the preflight starts Locust (a few seconds each):
those tests are in the slow tier."""

from __future__ import annotations

import asyncio
import csv
import json
import time

import pytest

from specagent_ray.cli import main
from specagent_ray.launch.client import GatewayClient
from specagent_ray.loadtest.locust_load import LocustLoad
from specagent_ray.loadtest.report import load_summary, write_outputs
from specagent_ray.loadtest.run import LoadAborted, LoadConfig
from specagent_ray.loadtest.workload import Workload, parse_mix
from specagent_ray.ports import free_port
from specagent_ray.serve.core.config import LatencyModel
from specagent_ray.testing.gateway_server import in_process_gateway

MIX = parse_mix("airline:0-5,retail:0-3")
slow = pytest.mark.slow


def run(cfg: LoadConfig, processes: int = 1):
    return LocustLoad(cfg, processes).run()


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
    with pytest.raises(ValueError, match="at least 4"):
        LocustLoad(LoadConfig("http://x", "k", Workload(MIX), stages=(3, 8)), 4)
    with pytest.raises(ValueError, match="ascending"):
        LoadConfig("http://x", "k", Workload(MIX), stages=(6, 2))


@slow
def test_closed_loop_runs_every_session_and_reports_latency_batches_and_savings(tmp_path):
    # A window wide enough that sessions share a verifier batch also on a busy machine.
    with in_process_gateway(tmp_path / "log", batch_window_ms=20) as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX), concurrency=6, sessions=14, duration_s=120, drain_s=60,
                         baseline_sessions=4)
        result = run(cfg)
    s = load_summary(result)
    assert s["sessions"] == {"started": 14, "done": 14, "errors": 0, "unfinished": 0, "shed": 0, "throttled_429s": 0}
    assert s["stopped_because"] == "all sessions started and finished"
    assert s["engines"] == "sim" and s["simulated_engines"]
    assert s["committed_steps"] == sum(r.steps for r in result.load()) > 14
    # the latencies are Locust's statistics: one STEP entry per committed step, one SESSION per session
    assert s["latency_source"] == "locust"
    assert s["step_latency_s"]["n"] == s["committed_steps"] and s["step_latency_s"]["p99"] > 0
    assert s["session_latency_s"]["n"] == 14
    assert result.locust.count("POST", "POST /v1/sessions") == 14  # the load phase's (the baseline runs apart)
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
    assert all(0 <= r.start_s <= r.end_s <= result.wall_s for r in result.load())


@slow
def test_distributed_mode_sends_each_session_once_and_reports_as_one_run(tmp_path):
    with in_process_gateway(tmp_path / "log") as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX), concurrency=4, sessions=10, duration_s=120, drain_s=60,
                         baseline_sessions=2)
        result = run(cfg, processes=2)
    s = load_summary(result)
    assert sorted(r.index for r in result.load()) == list(range(10))  # every session once, none twice
    assert s["sessions"]["done"] == 10 and s["sessions"]["errors"] == 0 and len(result.baseline()) == 2
    assert s["step_latency_s"]["n"] == s["committed_steps"] == sum(r.steps for r in result.load())
    assert s["client_cpu_ms_per_step"] > 0
    assert result.timeline and result.timeline[-1]["started"] == 10


@slow
def test_open_loop_sheds_arrivals_above_its_cap_and_stops_at_its_duration(tmp_path):
    with in_process_gateway(tmp_path / "log") as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX), mode="open", rate=40, concurrency=2, sessions=1000,
                         duration_s=3, drain_s=30, baseline_sessions=0)
        result = run(cfg)
    s = load_summary(result)
    assert s["stopped_because"] == "duration 3 s reached"
    assert s["sessions"]["shed"] > 0 and s["sessions"]["errors"] == 0
    assert 0 < s["sessions"]["started"] < 1000
    assert max(r.start_s for r in result.load()) <= 3 + 1.5  # nothing started after the duration (1 s ticks)


@slow
def test_sessions_still_running_at_the_bound_are_cancelled_on_the_server(tmp_path):
    slow_engines = LatencyModel(draft_base_s=0.05, draft_per_request_s=0, verify_base_s=5.0, verify_per_request_s=0,
                                step_base_s=0.05)
    with in_process_gateway(tmp_path / "log", latency=slow_engines) as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX), concurrency=3, duration_s=1, drain_s=0.5,
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
    assert took < 1 + 0.5 + 30  # duration + drain, plus Locust's start and the cancel calls
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


@slow
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
    assert summary["stopped_because"].startswith("stopped early: ")
    assert summary["errors_by_kind"].get("http_500", 0) >= 5 and summary["sessions"]["done"] >= 1
    with (tmp_path / "o" / "sessions.csv").open() as f:  # also the failures of the run's last second
        assert sum(summary["errors_by_kind"].values()) == sum(bool(r["error_kind"]) for r in csv.DictReader(f))
    assert "errors by kind" in out and "http_500" in out and "injected failure" in out
    assert "Traceback" not in out


@slow
def test_a_locust_that_cannot_start_says_why_instead_of_reporting_an_empty_run(tmp_path, monkeypatch, capsys):
    from specagent_ray.loadtest import locust_load

    real = locust_load.locust_command
    monkeypatch.setattr(locust_load, "locust_command", lambda *a: [*real(*a), "--no-such-flag"])
    monkeypatch.setenv("LT_KEY", "dev-key")
    with in_process_gateway(tmp_path / "log") as url:
        assert main(["loadtest", "--url", url, "--api-key-env", "LT_KEY", "--out", str(tmp_path / "o")]) == 2
    out = capsys.readouterr().out
    assert "locust exited 2 without running" in out and "--no-such-flag" in out and "Traceback" not in out


def test_commits_delivered_together_share_their_latency():
    from specagent_ray.loadtest.records import SessionRecord, step_latencies

    # start at 1.0; a delivery of 2 steps at 3.0, then one step at 3.5
    assert step_latencies(1.0, [(3.0, 2), (3.5, 1)]) == [1.0, 1.0, 0.5]
    assert step_latencies(0.0, []) == []
    rec = SessionRecord(0, "load", "specagent", "airline", "0", 0, 100.0)
    for t, n in ((101.0, 1), (101.002, 2), (102.0, 1)):  # the second arrived with the first: one delivery
        rec.delivered(t, n)
    assert rec.commits == [(101.0, 3), (102.0, 1)]
    assert SessionRecord.from_json(json.loads(json.dumps(rec.to_json()))).shifted(100.0).step_latencies == [
        pytest.approx(1 / 3)] * 3 + [pytest.approx(1.0)]


@slow
def test_stages_add_users_level_by_level_and_are_reported_per_level(tmp_path):
    with in_process_gateway(tmp_path / "log") as url:
        result = run(LoadConfig(url, "dev-key", Workload(MIX), stages=(1, 4), duration_s=6, drain_s=30,
                                baseline_sessions=0))
    stages = load_summary(result)["stages"]
    assert [st["concurrency"] for st in stages] == [1, 4]
    assert stages[0]["in_flight_mean"] <= 1 < stages[1]["in_flight_mean"] <= 4
    assert all(st["steps"] > 0 for st in stages)


@slow
def test_429s_are_waited_out_and_counted(tmp_path):
    with in_process_gateway(tmp_path / "log", max_sessions=1, retry_after_s=1) as url:
        result = run(LoadConfig(url, "dev-key", Workload(MIX), concurrency=3, sessions=4, duration_s=120,
                                drain_s=60, baseline_sessions=0))
    s = load_summary(result)
    assert s["sessions"]["done"] == 4 and s["sessions"]["errors"] == 0
    assert s["sessions"]["throttled_429s"] > 0  # the server admitted one session at a time


@slow
def test_the_client_plays_the_user_and_cancels_every_third_session(tmp_path):
    with in_process_gateway(tmp_path / "log") as url:
        cfg = LoadConfig(url, "dev-key", Workload(MIX, user="client", client_user_turns=2, cancel_every=3),
                         concurrency=3, sessions=6, duration_s=120, drain_s=60, baseline_sessions=0)
        result = run(cfg)
    by_index = {r.index: r for r in result.load()}
    assert sorted(by_index) == list(range(6))
    cancelled = {i for i, r in by_index.items() if r.cancelled_by_client}
    assert cancelled == {2, 5}
    # each was cancelled while it waited for the user's first message: it cannot have ended first
    assert all(by_index[i].outcome == "cancelled" and by_index[i].user_messages == 0 for i in cancelled)
    answered = [r for i, r in by_index.items() if i not in cancelled]
    assert all(r.outcome == "done" and r.error_kind is None for r in answered)
    assert all(1 <= r.user_messages <= 2 for r in answered)  # the load client posted the user's messages
    assert load_summary(result)["sessions"]["errors"] == 0


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


LOOPS = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client", "read_tools": ["read_file"]}}}


def sessions_started(url: str) -> int:
    import httpx

    return sum(httpx.get(f"{url}/v1/stats", headers={"X-API-Key": "dev-key"}, timeout=30).json()["sessions"].values())


@pytest.mark.slow
@pytest.mark.parametrize("wire", ["chat", "messages"])
def test_api_wire_runs_stateless_loops_as_one_session_each_and_reports_steps_per_s(wire, tmp_path, capsys,
                                                                                    monkeypatch):
    monkeypatch.setenv("LT_KEY", "dev-key")
    with in_process_gateway(tmp_path / "log", app=LOOPS) as url:
        before = sessions_started(url)
        code = main(["loadtest", "--url", url, "--api-key-env", "LT_KEY", "--api", wire, "--sessions", "8",
                     "--concurrency", "4", "--turns", "4", "--duration-s", "30", "--out", str(tmp_path / "o")])
        started = sessions_started(url) - before
    report = json.loads((tmp_path / "o" / f"{wire}-vs-sessions.json").read_text())
    assert code == 0 and report["errors"] == [] and "MEASURED" in report["label"]
    sessions, on_wire = report["apis"]["sessions"], report["apis"][wire]
    assert sessions["loops"] == on_wire["loops"] == 4 and sessions["steps"] == on_wire["steps"] == 16
    assert on_wire["steps_per_s"] > 0 and sessions["steps_per_s"] > 0
    assert report["sessions_per_loop"] == {"loops": 4, "one_session": 4, "max": 1}
    assert started == 8  # the coordinator's own count: one session per loop, on either API
    vs = report["wire_against_sessions"]
    assert vs["p50_ms"] == pytest.approx(on_wire["p50_ms"] - sessions["p50_ms"])
    assert vs["steps_per_s_ratio"] == pytest.approx(on_wire["steps_per_s"] / sessions["steps_per_s"])
    assert f"sessions per {wire} loop: 4 of 4 loops were one session" in capsys.readouterr().out


def test_a_loop_that_the_server_splits_into_several_sessions_is_an_error(tmp_path):
    from specagent_ray.loadtest.wires import WireLoad, WireResult, summary

    cfg = WireLoad("http://x", "k", "chat", conversations=4, concurrency=2, steps=2)
    res = WireResult(steps={"sessions": [(0.1, 0.05), (0.2, 0.1)], "chat": [(0.1, 0.05), (0.3, 0.2)]},
                     first={"sessions": [0.05], "chat": [0.05]}, loops={"sessions": 1, "chat": 1},
                     sessions_per_loop=[2], errors=["chat loop 1 saw 2 sessions, not one"], window_s=0.25)
    s = summary(cfg, res)
    assert s["sessions_per_loop"] == {"loops": 1, "one_session": 0, "max": 2} and s["errors"]
    assert s["apis"]["sessions"]["steps_per_s"] == pytest.approx(2 / 0.25)  # both steps ended in the window
    assert s["apis"]["chat"]["steps_per_s"] == pytest.approx(1 / 0.25)  # one ended after it
    with pytest.raises(ValueError, match="concurrency >= 2"):
        WireLoad("http://x", "k", "chat", concurrency=1)


@pytest.mark.slow
def test_api_wire_against_a_loop_the_server_does_not_bind_reports_the_split_and_exits_1(tmp_path, capsys,
                                                                                       monkeypatch):
    """A client that re-renders the agent's calls with ids of its own (the server cannot recognise its
    history) starts a session per step: the run must say so, not report a clean loop."""
    from specagent_ray.loadtest import wires

    real = wires._chat_step

    async def renamed(client, cfg, history, calls, k, sids):
        done = await real(client, cfg, history, calls, k, sids)
        for m in history:
            for c in m.get("tool_calls") or ():
                c["id"] = c["id"].replace(":", "-x-")
            if m.get("role") == "tool":
                m["tool_call_id"] = m["tool_call_id"].replace(":", "-x-")
        return done

    monkeypatch.setattr(wires, "_chat_step", renamed)
    monkeypatch.setenv("LT_KEY", "dev-key")
    with in_process_gateway(tmp_path / "log", app=LOOPS) as url:
        code = main(["loadtest", "--url", url, "--api-key-env", "LT_KEY", "--api", "chat", "--sessions", "2",
                     "--concurrency", "2", "--turns", "3", "--out", str(tmp_path / "o")])
    report = json.loads((tmp_path / "o" / "chat-vs-sessions.json").read_text())
    assert code == 1 and report["sessions_per_loop"] == {"loops": 1, "one_session": 0, "max": 2}
    assert any("saw 2 sessions, not one" in e for e in report["errors"])
    assert "0 of 1 loops were one session" in capsys.readouterr().out
