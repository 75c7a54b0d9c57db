"""/v1/usage counts HBM of every role (serve/sessions/usage.py)."""

from __future__ import annotations

import pytest


def test_usage_counts_hbm_of_every_role_and_a_measured_role_changes_the_total():
    from specagent_ray.costs.hardware import Hardware
    from specagent_ray.costs.ledger import Ledger
    from specagent_ray.protocol.interfaces import CallRecord
    from specagent_ray.protocol.types import Usage
    from specagent_ray.serve.sessions.usage import figures, with_measured

    calls = [CallRecord(role=r, purpose="draft" if r == "weak" else "verify", usage=Usage(1000, 0, 100), wall_s=0.1)
             for r in ("weak", "mid", "strong")]
    f = figures(Ledger(calls), Hardware(mid_model="qwen3-30b-a3b"))
    split = {r: f["by_role"][r]["hbm_bytes"] for r in ("weak", "mid", "strong")}
    assert f["hbm_bytes"] == pytest.approx(sum(split.values())) and min(split.values()) > 0
    assert f["strong_hbm_bytes"] == split["strong"] < f["hbm_bytes"]
    usage = with_measured({"t": {"d": f}}, {"t": {"d": {"mid": {"gpu_seconds": 1.0, "dram_bytes": 5.0}}}})
    assert usage["t"]["d"]["hbm_bytes"] == pytest.approx(split["weak"] + 5.0 + split["strong"])
    assert usage["t"]["d"]["hbm_source"] == "mixed"
