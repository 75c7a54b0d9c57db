"""`specagent-ray bench scale` end to end, small: two shard counts and a latency-bound run on a real local
Ray cluster. Figures are not asserted (they belong to the benchmark); what it reports is."""

from __future__ import annotations

import pytest

from specagent_ray.bench.scale import scale_run
from specagent_ray.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_bench_scale_prints_every_shard_count_and_the_latency_bound_run(capsys, monkeypatch):
    monkeypatch.setenv("RAY_SERVE_THROUGHPUT_OPTIMIZED", "0")  # restored afterwards: the flag sets it to 1
    assert main(["bench", "scale", "--shards", "1,2", "--sessions", "12", "--latency-sessions", "6",
                 "--serve-throughput-optimized"]) == 0  # 0: no session failed in Serve's throughput mode
    out = capsys.readouterr().out
    assert "Coordinator shards" in out and "Latency-bound run" in out and "bound (latencies)" in out
    assert "measured on this machine" in out and "SIMULATED" in out
    assert "RAY_SERVE_THROUGHPUT_OPTIMIZED=1" in out


def test_a_scale_run_accounts_for_every_step_and_every_shard():
    r = scale_run(2, 10, client_processes=2)  # two spawned load client processes share the sessions
    assert r["errors"] == 0 and r["steps"] > 0 and len(r["shares"]) == 2 and r["client_cpu_ms_per_step"] > 0
    assert sum(r["shares"]) == pytest.approx(1.0) and min(r["shares"]) > 0
    assert 0 < r["session_steps_per_s"] <= r["bound_steps_per_s"]  # engine time is part of a session's wall
