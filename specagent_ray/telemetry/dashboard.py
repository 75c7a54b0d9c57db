"""The Grafana dashboard of a SpecAgent deployment, from the metrics it exports (``metrics.py``, Ray Serve's).

``python -m specagent_ray.telemetry.dashboard`` prints it; ``make -C k8s dashboard`` writes it to
``k8s/base/dashboards/specagent-ray.json``, which a ConfigMap carries to the Grafana sidecar of
kube-prometheus-stack (label ``grafana_dashboard: "1"``). Queries use Grafana's ``$__rate_interval`` and the
``tenant`` variable; ``concrete`` turns them into the PromQL that Prometheus itself answers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

RATE = "$__rate_interval"
TENANT = 'tenant=~"$tenant"'
PROBLEMS = "verifier_fallback|malformed_output|invalid_action|tool_error|redraft"
# Ray Serve's own metrics that panels read (its proxy's, ray/serve/_private/request_ingress_metrics.py)
SERVE_METRICS = frozenset({"ray_serve_num_http_error_requests_total"})


@dataclass(frozen=True)
class Panel:
    """One panel: a title, what it shows, its unit and its queries as (PromQL, legend)."""

    title: str
    description: str
    unit: str
    targets: tuple[tuple[str, str], ...]


def _rate(metric: str, by: str, where: str = "") -> str:
    selector = f"{metric}{{{where}}}" if where else metric
    return f"sum by ({by}) (rate({selector}[{RATE}]))"


def _quantile(q: float, metric: str, by: str = "le", where: str = "") -> str:
    return f"histogram_quantile({q}, {_rate(metric + '_bucket', by, where)})"


PANELS: tuple[Panel, ...] = (
    Panel("Acceptance", "Share of the drafted steps the verifier reviewed that it accepted, by method.",
          "percentunit",
          ((_rate("ray_specagent_reviewed_steps_total", "method", 'verdict="accepted"') + " / "
            + _rate("ray_specagent_reviewed_steps_total", "method"), "{{method}}"),)),
    Panel("Accepted prefix length j", "Steps accepted per reviewed block (Algorithm 1's j), p50 and p90.", "short",
          ((_quantile(0.5, "ray_specagent_accepted_prefix", "le, method"), "{{method}} p50"),
           (_quantile(0.9, "ray_specagent_accepted_prefix", "le, method"), "{{method}} p90"))),
    Panel("Strong calls saved against Strong-only (strong model only)", "1 - strong-model calls / committed "
          "steps of finished sessions: Strong-only makes one strong call per step. Counts the strong model alone: "
          "the drafter's and the mid verifier's work is in the GPU-seconds panels (every role).", "percentunit",
          (("1 - " + _rate("ray_specagent_strong_calls_total", "method") + " / "
            + _rate("ray_specagent_session_steps_total", "method"), "{{method}}"),)),
    Panel("Verify batch size", "Verify requests submitted to the verifier together, p50 and p90.", "short",
          ((_quantile(0.5, "ray_specagent_verifier_batch_size"), "p50"),
           (_quantile(0.9, "ray_specagent_verifier_batch_size"), "p90"))),
    Panel("Staged-write wait", "Time from asking to answer of a verify or repair that a staged write waits on "
          "(kind write), p50 and p99; the other kinds' p99 for comparison.", "s",
          ((_quantile(0.5, "ray_specagent_engine_wait_seconds", where='kind="write"'), "write p50"),
           (_quantile(0.99, "ray_specagent_engine_wait_seconds", "le, kind"), "{{kind}} p99"))),
    Panel("Sessions by status", "Sessions ended per second, by status (done, failed, timed_out, cancelled).",
          "ops", ((_rate("ray_specagent_tenant_sessions_total", "status", TENANT), "{{status}}"),)),
    Panel("Errors and fallbacks", "Protocol problems by kind (verifier fallbacks, malformed output, invalid "
          "actions, tool errors, redrafts) and HTTP error answers by code.", "ops",
          ((_rate("ray_specagent_protocol_events_total", "kind", f'kind=~"{PROBLEMS}"'), "{{kind}}"),
           (_rate("ray_serve_num_http_error_requests_total", "error_code"), "HTTP {{error_code}}"))),
    Panel("Tokens by tenant", "Tokens per second by tenant, role and kind (prompt, cached, decode), counted "
          "when sessions end (measured).", "short",
          ((_rate("ray_specagent_tenant_tokens_total", "tenant, role, kind", TENANT), "{{tenant}} {{role}} {{kind}}"),)),
    Panel("Strong calls and GPU-seconds by tenant", "Strong-model calls per second, and GPU-seconds per second "
          "of every role (drafter, mid, strong) ESTIMATED by the cost model on the profile's hardware, by tenant.",
          "short",
          ((_rate("ray_specagent_tenant_strong_calls_total", "tenant", TENANT), "{{tenant}} strong calls"),
           (_rate("ray_specagent_tenant_gpu_seconds_total", "tenant", TENANT), "{{tenant}} GPU-s (estimated)"))),
    Panel("Measured GPU-seconds and DRAM by tenant", "GPU-seconds and DRAM bytes per second MEASURED by the GPU "
          "meter (NVML on the engines' nodes), charged by token share, by tenant and role; and the busy time no "
          "request was active in, never charged. Empty where no meter runs (the estimate is in the panel "
          "beside). Trails the engines by meter.seal_after_s.", "short",
          ((_rate("ray_specagent_tenant_gpu_seconds_measured_total", "tenant, role", TENANT),
            "{{tenant}} {{role}} GPU-s (measured)"),
           (_rate("ray_specagent_tenant_dram_bytes_measured_total", "tenant, role", TENANT),
            "{{tenant}} {{role}} DRAM B (measured)"),
           (_rate("ray_specagent_gpu_seconds_unattributed_measured_total", "role"), "{{role}} unattributed GPU-s"))),
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel(i: int, p: Panel) -> dict:
    return {"id": i + 1, "type": "timeseries", "title": p.title, "description": p.description,
            "datasource": DATASOURCE, "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": [{"refId": chr(ord("A") + k), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
                        for k, (expr, legend) in enumerate(p.targets)]}


def render() -> dict:
    """The dashboard's JSON model (Grafana 10+); its uid is stable, so the sidecar updates it in place."""
    tenants = {"name": "tenant", "label": "Tenant", "type": "query", "datasource": DATASOURCE,
               "query": {"query": "label_values(ray_specagent_tenant_sessions_total, tenant)", "refId": "tenant"},
               "definition": "label_values(ray_specagent_tenant_sessions_total, tenant)",
               "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
               "current": {"text": "All", "value": "$__all"}}
    source = {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"}
    return {"uid": "specagent-ray", "title": "SpecAgent on Ray", "tags": ["specagent", "ray-serve"],
            "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"}, "templating": {"list": [source, tenants]},
            "panels": [_panel(i, p) for i, p in enumerate(PANELS)]}


def concrete(expr: str, rate: str = "1m", tenant: str = ".*") -> str:
    """A panel's query as Grafana sends it to Prometheus: the rate window and the tenant chosen."""
    return expr.replace(RATE, rate).replace("$tenant", tenant)


def metrics_named(expr: str) -> set[str]:
    """The metric names a query reads (Ray's and Serve's all start ``ray_``)."""
    return set(re.findall(r"\bray_[a-z0-9_]+", expr))


def unknown_metrics(exported: set[str], panels: tuple[Panel, ...] = PANELS) -> dict[str, set[str]]:
    """Each panel's metric names that neither ``exported`` (``ProtocolMetrics.exported()``) nor Serve has."""
    known = exported | SERVE_METRICS
    out = {p.title: {m for expr, _ in p.targets for m in metrics_named(expr)} - known for p in panels}
    return {title: names for title, names in out.items() if names}


if __name__ == "__main__":
    print(json.dumps(render(), indent=2))
