"""The binder's bench as a command (``python -m specagent_ray.bench.served.binder_cost``): its table puts each figure next to
its baseline (a request that names its session), and its end-to-end part really runs a bound Chat Completions
request against the same turn on the sessions API and on the Responses API (here on the in-process gateway,
scripted engines)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from rich.console import Console

from specagent_ray.bench.served.binder_cost import add_parser, run_from_args, wire_cost, wire_loop
from specagent_ray.testing.gateway_server import in_process_gateway

APP = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client", "read_tools": ["read_file"]}}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with in_process_gateway(tmp_path_factory.mktemp("log"), app=APP) as url:
        yield url


def test_the_loop_has_the_history_it_is_named_for():
    system, plan, results = wire_loop(40, 200_000)
    assert len(results) == 19  # system + plan + 19 x (call, result) = 40 messages
    assert 195_000 <= len(system) + len(plan) + sum(map(len, results)) <= 200_000
    assert plan.count("call read_file") == 19 and plan.endswith("say done")


def test_end_to_end_the_measured_request_binds_and_both_ways_are_timed(gateway):
    cost = wire_cost(gateway, "dev-key", 12, 20_000, repeats=2)  # raises if the measured chat request did not continue its session
    assert cost["messages"] == 12 and cost["body_bytes"] > 20_000 and cost["repeats"] == 2
    assert all(x > 0 for x in cost["chat_all_s"] + cost["sessions_all_s"] + cost["responses_all_s"])
    assert cost["ratio_responses"] == cost["chat_s"] / cost["responses_s"]
    assert cost["ratio"] == cost["chat_s"] / cost["sessions_s"]


def test_the_command_prints_each_figure_next_to_its_baseline(gateway, capsys):
    own = add_parser(argparse.ArgumentParser().add_subparsers())
    args = own.parse_args(["--items", "12", "--chars", "20000", "--repeats", "3", "--wire-repeats", "1",
                           "--url", gateway])
    console = Console(width=220, force_terminal=False)
    assert run_from_args(args, console) == 0
    out = capsys.readouterr().out
    assert "names its session (call-id scan)" in out and "binder per request" in out
    assert "the same turn posted on the sessions API" in out and "x │" in out
    assert "the same turn on the Responses API (previous_response_id)" in out


def test_python_dash_m_runs_the_bench_without_the_end_to_end_part():
    done = subprocess.run([sys.executable, "-m", "specagent_ray.bench.served.binder_cost", "--items", "8", "--chars", "5000",
                           "--repeats", "2", "--wire-repeats", "0"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "binder per request" in done.stdout and "sessions API" not in done.stdout
