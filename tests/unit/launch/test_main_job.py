"""The main job's pieces without a cluster: the quiet screen, the tables, the client's stream check."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys

import pytest
from rich.console import Console

from specagent_ray.launch import main_job
from specagent_ray.launch.main_job import NEXT_STEPS, next_steps, quiet, real_table, sim_table
from specagent_ray.launch.workload import SessionResult, _hbm, _stream_mismatch, summarize


def result(method: str, reward: float | None = 1.0, strong_calls: int = 4, strong_hbm: float | None = None,
           **kw) -> SessionResult:
    fields = {"status": "done", "termination": "agent_stop", "error": None, "steps": 5, "events": 9,
              "strong_decode": 100 * strong_calls, "strong_prompt": 1000 * strong_calls,
              "weak_decode": 0 if method == "strong" else 300, "wall_s": 2.0,
              "hbm_bytes": 2e12 * strong_calls, "strong_hbm_bytes": strong_hbm}
    fields.update(kw)
    return SessionResult(method, "0", reward=reward, strong_calls=strong_calls, **fields)


def render(renderable) -> str:
    console = Console(file=io.StringIO(), width=160)
    console.print(renderable)
    return console.file.getvalue()


PROGRAM = """
import logging, os, subprocess, sys
from pathlib import Path
from specagent_ray.launch.workload import output_to

logging.basicConfig()  # a handler on sys.stderr, as Ray's and vLLM's are
with output_to(Path(sys.argv[1])) as screen:
    os.write(1, b"raw fd 1\\n")
    print("python print")
    logging.getLogger("ray").warning("a logger line")
    subprocess.run([sys.executable, "-c", "import sys; print('child out'); print('child err', file=sys.stderr)"])
    screen.write("ours\\n")
print("after")
"""


def test_output_to_catches_the_process_and_its_children_below_python_and_restores(tmp_path):
    log = tmp_path / "logs" / "serve.log"
    run = subprocess.run([sys.executable, "-c", PROGRAM, str(log)], capture_output=True, text=True, check=True)
    text = log.read_text()
    for line in ("raw fd 1", "python print", "a logger line", "child out", "child err"):
        assert line in text and line not in run.stdout + run.stderr
    assert run.stdout == "ours\nafter\n" and "ours" not in text  # the descriptors are back after the block


def test_quiet_prints_the_log_path_once_and_shows_its_tail_when_the_block_fails(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    console = Console(file=sys.stdout, width=160)
    with pytest.raises(RuntimeError, match="engines never came"), quiet(console, verbose=False):
        console.print("our progress")
        os.write(2, b"ray says INFO something\n")
        raise RuntimeError("engines never came")
    out = capfd.readouterr().out
    assert out.count(str(main_job.LOG)) == 2  # once up front, once with the tail
    assert "our progress" in out and "ray says INFO something" in out.split("the last lines of")[1]


def test_verbose_leaves_the_screen_alone(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    with quiet(Console(file=sys.stdout), verbose=True):
        os.write(2, b"ray line\n")
    assert "ray line" in capfd.readouterr().err and not (tmp_path / main_job.LOG).exists()


def test_the_sim_table_shows_ratios_against_strong_only_and_labels_hbm():
    rows = [result("strong", strong_calls=5), result("specagent", strong_calls=2)]
    text = render(sim_table(rows, ("strong", "specagent")))
    assert "Strong-only" in text and "SpecAgent" in text
    assert "2.00 (0.40x)" in text  # strong calls
    assert "HBM read / session, TB, all roles (estimated)" in text and "4.0 (0.40x)" in text
    assert "strong model only" not in text  # no split in the report: no strong-only row


def test_the_sim_table_counts_every_role_with_the_strong_models_share_beside_it():
    rows = [result("strong", strong_calls=5, strong_hbm=10e12), result("specagent", strong_calls=2, strong_hbm=3e12)]
    text = render(sim_table(rows, ("strong", "specagent")))
    assert "HBM read / session, TB, all roles (estimated)" in text and "4.0 (0.40x)" in text
    assert "of which strong, TB (strong model only, estimated)" in text and "3.0 (0.30x)" in text
    assert _hbm({"hbm_bytes": 5.0, "hbm_bytes_by_role": {"strong": 3.0, "weak": 2.0}}) == (5.0, 3.0)
    assert _hbm({"hbm_bytes": 5.0}) == (5.0, None)


def test_pass_at_1_counts_only_graded_sessions_and_says_so():
    rows = [result("strong", reward=1.0), result("strong", reward=None), result("specagent", reward=0.0)]
    s = summarize(rows)
    assert s["strong"]["pass_at_1"] == 100.0 and s["strong"]["graded"] == 1
    assert math.isnan(s["strong"]["strong_hbm_tb"])
    assert "1 of 2 graded" in render(real_table(rows, ("strong", "specagent")))


def test_the_client_fails_a_session_whose_stream_disagrees_with_its_trajectory():
    step = {"action": {"kind": "tool"}, "author": "weak"}
    events = [{"t": "created"}, {"t": "commit", "steps": [step]}, {"t": "final"}]
    assert _stream_mismatch(events, {"steps": [step]}) is None
    assert "1 steps streamed" in _stream_mismatch(events, {"steps": [step, step]})
    assert "not created...final" in _stream_mismatch(events[:2], {"steps": [step]})


def test_it_ends_with_three_places_to_go_next():
    lines = next_steps().splitlines()
    assert lines[0] == "Where to go next:" and len(lines) == 1 + len(NEXT_STEPS) == 4
    assert [c for c, _ in NEXT_STEPS] == [line.split("#")[0].strip() for line in lines[1:]]


def test_serve_without_a_profile_is_the_main_job():
    from specagent_ray.cli import build_parser

    args = build_parser().parse_args(["serve"])
    assert args.profile is None and not args.verbose
    assert build_parser().parse_args(["serve", "sim", "--verbose"]).verbose


def report(results) -> tuple[int, str]:
    console = Console(file=io.StringIO(), width=200)
    code = main_job.report_failures(console, results)
    return code, console.file.getvalue()


def test_a_hard_task_and_an_ungraded_session_are_said_but_only_the_products_failures_fail_the_job():
    hard = result("specagent", reward=0.0)
    ungraded = result("strong", reward=None, grade_error="tau2's evaluator could not replay this session's record")
    code, out = report([result("strong"), hard, ungraded])
    assert code == 0, out
    assert "Strong-only task 0: not graded tau2's evaluator could not replay this session's record" in out
    assert "3 sessions: 2 graded, none failed by the product" in out
    failed = result("specagent", reward=None, status="failed", error="unavailable: the tool host did not answer")
    code, out = report([hard, ungraded, failed])
    assert code == 1 and "SpecAgent task 0: failed unavailable: the tool host did not answer" in out
    assert "1 failed by the product (exit 1)" in out


def test_an_observation_that_carries_an_infrastructure_error_fails_the_job_though_the_session_was_graded():
    code, out = report([result("specagent", reward=1.0, error_observations=1)])
    assert code == 1 and "1 observation(s) carry an infrastructure error" in out


def test_the_client_counts_infrastructure_errors_in_a_trajectorys_observations():
    from specagent_ray.launch.workload import infrastructure_errors

    steps = [{"observation": {"content": "Error: ServiceUnavailable: not acknowledged: the session log ..."}},
             {"observation": {"content": '{"reservation_id": "XEHM4B"}'}}, {"observation": None}]
    assert len(infrastructure_errors([{"steps": steps}])) == 1
