"""The Grafana dashboard's panels against the metrics the app exports (the real Prometheus answering
every panel: tests/integration/test_serve_sim.py)."""

from __future__ import annotations

import json

from specagent_ray.protocol.interfaces import CallRecord
from specagent_ray.protocol.types import Usage
from specagent_ray.telemetry.dashboard import PANELS, Panel, concrete, metrics_named, render, unknown_metrics
from specagent_ray.telemetry.metrics import MeterMetrics, ProtocolMetrics
from specagent_ray.testing.k8s import K8S


def test_every_panel_names_only_metrics_the_app_exports():
    exported = ProtocolMetrics().exported() | MeterMetrics().exported()
    assert "ray_specagent_tenant_gpu_seconds_measured_total" in exported
    assert "ray_specagent_accepted_prefix_bucket" in exported and "ray_specagent_fallbacks_total" in exported
    assert unknown_metrics(exported) == {}
    typo = Panel("typo", "", "short", (("sum(rate(ray_specagent_reviewd_steps_total[5m]))", ""),))
    assert unknown_metrics(exported, (*PANELS, typo)) == {"typo": {"ray_specagent_reviewd_steps_total"}}


def test_the_issue_s_panels_are_there_and_each_reads_a_metric():
    titles = {p.title for p in PANELS}
    assert {"Acceptance", "Accepted prefix length j", "Strong calls saved against Strong-only (strong model only)",
            "Verify batch size", "Staged-write wait", "Sessions by status", "Errors and fallbacks"} <= titles
    assert any("tenant" in p.title for p in PANELS)
    assert all(p.targets and all(metrics_named(expr) for expr, _ in p.targets) for p in PANELS)


def test_queries_become_plain_promql_and_the_committed_json_is_current():
    for p in PANELS:
        for expr, _ in p.targets:
            assert "$" not in concrete(expr), expr
    committed = json.loads((K8S / "base" / "dashboards" / "specagent-ray.json").read_text())
    assert committed == render(), "run make -C k8s dashboard"
    ids = [p["id"] for p in committed["panels"]]
    assert len(set(ids)) == len(ids) == len(PANELS)


def test_an_event_the_metrics_cannot_parse_never_raises_into_the_serving_path():
    metrics = ProtocolMetrics()  # recording works before ray.init too (Ray keeps it until exported)
    for detail in ("2/3", "garbage", "3/2", "", "-1/2"):
        metrics.observe_event("specagent", "accepted", detail)
    metrics.observe_event("specagent", "verifier_fallback", "engine down")
    metrics.observe_wait("write", 0.2)


def test_per_step_updates_reach_ray_only_at_a_flush_one_call_per_series(monkeypatch):
    metrics = ProtocolMetrics()
    calls = []
    monkeypatch.setattr(type(metrics.events), "inc", lambda self, n, tags=None: calls.append((self._name, n, tags)))
    monkeypatch.setattr(type(metrics.engine_wait), "observe", lambda self, v, tags=None: calls.append((self._name, v, tags)))
    for _ in range(50):
        metrics.observe_event("specagent", "accepted", "2/3")
    metrics.observe_wait("draft", 0.1)
    metrics.observe_wait("draft", 0.3)
    assert calls == []  # nothing on the step path reaches Ray
    metrics.flush()
    assert ("specagent_protocol_events_total", 50, {"method": "specagent", "kind": "accepted"}) in calls
    assert ("specagent_reviewed_steps_total", 100, {"method": "specagent", "verdict": "accepted"}) in calls
    assert ("specagent_reviewed_steps_total", 50, {"method": "specagent", "verdict": "rejected"}) in calls
    assert [c for c in calls if c[0] == "specagent_accepted_prefix"] == [("specagent_accepted_prefix", 2, {"method": "specagent"})] * 50
    assert calls[-2:] == [("specagent_engine_wait_seconds", 0.1, {"kind": "draft"}),
                          ("specagent_engine_wait_seconds", 0.3, {"kind": "draft"})]
    assert len([c for c in calls if c[0] == "specagent_protocol_events_total"]) == 1  # one call for 50 events
    calls.clear()
    metrics.flush()
    assert calls == []  # a flush sends each update once


def test_session_end_counters_are_summed_over_sessions_until_a_flush(monkeypatch):
    """A session's end updates a dozen counter series: summed in the buffer, one Ray call per series a
    flush, however many sessions ended since the last."""
    metrics = ProtocolMetrics()
    calls = []
    monkeypatch.setattr(type(metrics.tenant_sessions), "inc", lambda self, n, tags=None: calls.append((self._name, n, tags)))
    monkeypatch.setattr(type(metrics.strong_calls), "observe", lambda self, v, tags=None: calls.append((self._name, v, tags)))
    records = [CallRecord("strong", "verify", Usage(1000, 600, 10, 900), 0.1), CallRecord("weak", "draft", Usage(50, 0, 5), 0.1)]
    for _ in range(20):
        metrics.observe_finished("specagent", records, 7)
        metrics.observe_cache(records)
        metrics.observe_tenant("acme", "done", records, 2.5)
    assert calls == []
    metrics.flush()
    counted = [c for c in calls if c[0].endswith("_total")]
    assert ("specagent_tenant_sessions_total", 20, {"tenant": "acme", "status": "done"}) in counted
    assert ("specagent_session_steps_total", 140, {"method": "specagent"}) in counted
    assert ("specagent_tenant_tokens_total", 20_000, {"tenant": "acme", "role": "strong", "kind": "prompt"}) in counted
    assert ("specagent_tenant_gpu_seconds_total", 50.0, {"tenant": "acme"}) in counted
    assert len(counted) == len({(c[0], tuple(sorted(c[2].items()))) for c in counted})  # one call per series
    assert [c for c in calls if c[0] == "specagent_strong_calls_per_session"] == \
        [("specagent_strong_calls_per_session", 1, {"method": "specagent"})] * 20
