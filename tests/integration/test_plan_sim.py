"""`specagent-ray plan --check-sim`: the planner against load tests on the sim profile, on a real local
Ray cluster."""

from __future__ import annotations

import json

import pytest

from specagent_ray.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_check_against_sim_load_tests(tmp_path):
    """`plan --check-sim` end to end at a smaller scale than docs/benchmarks.md's (2 levels of 30 s, 20
    tasks): a fresh bench run gives the planner's inputs, the sim profile serves the load tests. Shorter
    runs finish mostly short sessions and bias the per-step figure (15 s and 10 tasks gave +11 to +13 %
    on a loaded machine), so the bound is asserted on all sessions together; the documented 3-level run
    asserts it per level."""
    rc = main(["plan", "--check-sim", "--levels", "20,60", "--duration-s", "30", "--tasks", "airline:0-19",
               "--trials", "3", "--out", str(tmp_path)])
    assert rc in (0, 1)
    rows = json.loads((tmp_path / "plan-check-sim.json").read_text())["rows"]
    assert [r["level"] for r in rows] == [20, 60] and all(r["sessions_done"] > 0 for r in rows)
    steps = sum(r["committed_steps"] for r in rows)
    pooled = sum(r["sim_hbm"] * r["committed_steps"] for r in rows) / steps
    assert rows[0]["planner_hbm"] == pytest.approx(pooled, rel=0.15)
    for r in rows:
        assert r["error_strong"] is not None and abs(r["error_strong"]) <= 0.15
