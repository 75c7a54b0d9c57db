"""`specagent-ray bench scale` end to end, small: two coordinator shards driven by two load client
processes, then a latency-bound run, on a real local Ray cluster. Figures are not asserted (they belong
to the benchmark); what it reports is, and each run's own accounting. One run of the command serves both
tests: each of its runs deploys on a fresh Ray instance (about 100 s apiece on 2 cores beside the rest of
the suite), so it runs one shard count; the loop over shard counts is plain, and `test_multinode` runs a
2-shard deployment on a multinode cluster."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from specagent_ray.bench.served import scale
from specagent_ray.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


@pytest.fixture(scope="module")
def bench_run() -> tuple[int, str, list[dict[str, Any]]]:
    """The command's exit code, its screen, and every run's figures as ``scale_run`` returned them."""
    runs: list[dict[str, Any]] = []
    real = scale.scale_run

    def recorded(*args: Any, **kwargs: Any) -> dict[str, Any]:
        runs.append(real(*args, **kwargs))
        return runs[-1]

    screen = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(screen):
        patch.setattr(scale, "scale_run", recorded)
        patch.setattr(scale, "IDLE_S", 1.0)  # the idle CPU window: figures are the benchmark's, not asserted here
        patch.setenv("RAY_SERVE_THROUGHPUT_OPTIMIZED", "0")  # restored afterwards: the flag sets it to 1
        rc = main(["bench", "scale", "--shards", "2", "--sessions", "12", "--latency-sessions", "6",
                   "--client-processes", "2", "--serve-throughput-optimized"])
    return rc, screen.getvalue(), runs


def test_bench_scale_prints_its_shard_count_and_the_latency_bound_run(bench_run):
    rc, out, runs = bench_run
    assert rc == 0  # no session failed in Serve's throughput mode
    assert "Coordinator shards" in out and "Latency-bound run" in out and "bound (latencies)" in out
    assert "measured on this machine" in out and "SIMULATED" in out
    assert "RAY_SERVE_THROUGHPUT_OPTIMIZED=1" in out
    assert [r["shards"] for r in runs] == [2, 2]  # the shard count, then the latency-bound run


def test_a_scale_run_accounts_for_every_step_and_every_shard(bench_run):
    r = bench_run[2][0]  # two shards; two spawned load client processes shared the sessions
    assert r["errors"] == 0 and r["steps"] > 0 and len(r["shares"]) == 2 and r["client_cpu_ms_per_step"] > 0
    assert sum(r["shares"]) == pytest.approx(1.0) and min(r["shares"]) > 0
    assert 0 < r["session_steps_per_s"] <= r["bound_steps_per_s"]  # engine time is part of a session's wall


def test_a_scale_run_says_where_the_coordinator_cpu_went(bench_run):
    rc, out, runs = bench_run
    assert "Coordinator CPU per step, by part" in out and "CPU ms: session loop" in out and "calls in: events" in out
    parts = runs[0]["per_step"]
    assert parts["cpu_s_by_part"]["session loop"] > 0  # (Serve's throughput mode routes calls out on that loop)
    assert parts["calls_in"]["create"] > 0 and parts["calls_in"]["events"] > 0
    assert parts["calls_out"]["propose_batch"] > 0 and parts["calls_out"]["verify_batch"] > 0
    # the parts are the process's threads: together about the process's CPU (threads that ended are not in them)
    assert 0.5 * runs[0]["cpu_ms_per_step"] <= sum(parts["cpu_s_by_part"].values()) <= 1.1 * runs[0]["cpu_ms_per_step"]
