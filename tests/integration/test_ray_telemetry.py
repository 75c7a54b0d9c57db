"""Telemetry on a real local Ray instance: metrics on Ray's Prometheus port, traces across an actor."""

import asyncio
import re

import pytest

from specagent_ray.ports import free_port
from specagent_ray.testing.prometheus import scrape, value

ray = pytest.importorskip("ray")  # ray[serve] is part of the dev extra; a missing install fails loudly below

from specagent_ray.costs.ledger import Ledger  # noqa: E402
from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier  # noqa: E402
from specagent_ray.protocol import (  # noqa: E402
    METHODS,
    Action,
    CallRecord,
    Effect,
    Parts,
    SpecConfig,
    Task,
    Usage,
    Verdict,
)
from specagent_ray.telemetry.tracing import OtelSpans, attached, carrier, make_provider  # noqa: E402
from specagent_ray.tools.scripted import InMemoryTools, ToolSpec, object_schema  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_ray_is_installed_by_the_dev_extra():
    assert ray.__version__ == "2.60.0"


@pytest.fixture(scope="module")
def ray_cluster():
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, _metrics_export_port=port,
             _system_config={"metrics_report_interval_ms": 500}, log_to_driver=False)
    yield port
    ray.shutdown()


def test_protocol_metrics_reach_rays_prometheus_port(ray_cluster):
    from specagent_ray.telemetry.metrics import ProtocolMetrics, tenant_label

    tools = InMemoryTools({"lookup": ToolSpec(Effect.READ, object_schema(id="string")),
                           "refund": ToolSpec(Effect.WRITE, object_schema(id="string", amount="integer"))})
    parts = Parts(ScriptedPolicy([Action.tool("lookup", id="a"), Action.tool("refund", id="a", amount=1),
                                  Action.stop()]),
                  ScriptedPolicy([Action.stop()]), ScriptedVerifier([Verdict(2), Verdict(0, "no")]), tools,
                  ScriptedUser(), Ledger())
    trajectory = asyncio.run(METHODS["specagent"](Task("t", "x"), parts, SpecConfig()))
    metrics = ProtocolMetrics()
    metrics.observe_session("specagent", trajectory, parts.ledger.calls)
    metrics.observe_batch(7)
    metrics.count_fallback("timeout")
    metrics.observe_wait("write", 0.2)
    metrics.observe_cache([CallRecord("strong", "verify", Usage(1000, 600, 10, 900), 0.1),
                           CallRecord("strong", "prefill", Usage(1000, 0, 1, 0), 0.1)])
    metrics.observe_cache([CallRecord("weak", "draft", Usage(50, 0, 5, 0), 0.1)])  # zeros: Counter.inc(0) raises
    named = frozenset({"acme"})
    calls = [CallRecord("strong", "verify", Usage(1000, 600, 10), 0.1), CallRecord("strong", "prefill", Usage(8, 0, 1), 0.1),
             CallRecord("weak", "draft", Usage(50, 0, 5), 0.1)]
    metrics.observe_tenant(tenant_label("acme", named), "done", calls, 2.5)
    for stranger in ("key-0123abcd", "local"):  # any number of unnamed tenants: one series set
        metrics.observe_tenant(tenant_label(stranger, named), "failed", calls[2:], 0.0)
    metrics.flush()  # the per-step updates wait in a buffer until the coordinator's once-a-second flush
    body = scrape(ray_cluster, "ray_specagent_fallbacks_total")
    assert value(body, "ray_specagent_fallbacks_total", kind="timeout") == 1.0
    assert value(body, "ray_specagent_accepted_prefix_count", method="specagent") == 2.0  # two reviewed blocks
    # Ray's exported sums are approximate; buckets are exact: j = 2, then j = 0
    assert value(body, "ray_specagent_accepted_prefix_bucket", method="specagent", le="0.5") == 1.0
    assert value(body, "ray_specagent_accepted_prefix_bucket", method="specagent", le="1.5") == 1.0
    assert value(body, "ray_specagent_accepted_prefix_bucket", method="specagent", le="2.5") == 2.0
    # three strong calls: two verifies and one repair
    assert value(body, "ray_specagent_strong_calls_per_session_bucket", method="specagent", le="2.5") == 0.0
    assert value(body, "ray_specagent_strong_calls_per_session_bucket", method="specagent", le="4.5") == 1.0
    assert value(body, "ray_specagent_verifier_batch_size_bucket", le="8.5") == 1.0
    assert value(body, "ray_specagent_verifier_batch_size_bucket", le="4.5") == 0.0
    # the cache by role: 2,000 prompt tokens, 600 delivered, 900 predicted; one session, share 0.3, gap 0.15
    assert value(body, "ray_specagent_prompt_tokens_total", role="strong") == 2000.0
    assert value(body, "ray_specagent_cached_prompt_tokens_total", role="strong") == 600.0
    assert value(body, "ray_specagent_predicted_cached_tokens_total", role="strong") == 900.0
    assert value(body, "ray_specagent_session_cached_share_bucket", role="strong", le="0.25") == 0.0
    assert value(body, "ray_specagent_session_cached_share_bucket", role="strong", le="0.5") == 1.0
    assert value(body, "ray_specagent_session_cache_gap_bucket", role="strong", le="0.1") == 0.0
    assert value(body, "ray_specagent_tenant_sessions_total", tenant="acme", status="done") == 1.0
    assert value(body, "ray_specagent_tenant_sessions_total", tenant="other", status="failed") == 2.0
    assert value(body, "ray_specagent_tenant_tokens_total", tenant="acme", role="strong", kind="prompt") == 1008.0
    assert value(body, "ray_specagent_tenant_tokens_total", tenant="other", role="weak", kind="decode") == 10.0
    assert value(body, "ray_specagent_tenant_strong_calls_total", tenant="acme") == 1.0  # the prefill apart
    assert value(body, "ray_specagent_tenant_gpu_seconds_total", tenant="acme") == 2.5
    assert "key-0123abcd" not in body
    assert value(body, "ray_specagent_session_cache_gap_bucket", role="strong", le="0.2") == 1.0
    assert value(body, "ray_specagent_prompt_tokens_total", role="weak") == 50.0
    # the reviewed blocks: n = 2 (accepted whole), then n = 1 (rejected): 2 of 3 reviewed steps accepted
    assert value(body, "ray_specagent_reviewed_steps_total", method="specagent", verdict="accepted") == 2.0
    assert value(body, "ray_specagent_reviewed_steps_total", method="specagent", verdict="rejected") == 1.0
    assert value(body, "ray_specagent_strong_calls_total", method="specagent") == 3.0
    assert value(body, "ray_specagent_protocol_events_total", method="specagent", kind="accepted") == 2.0
    assert value(body, "ray_specagent_protocol_events_total", method="specagent", kind="rejected") == 1.0
    assert value(body, "ray_specagent_session_steps_total", method="specagent") == len(trajectory.steps)
    assert value(body, "ray_specagent_engine_wait_seconds_bucket", kind="write", le="0.1") == 0.0
    assert value(body, "ray_specagent_engine_wait_seconds_bucket", kind="write", le="0.25") == 1.0


@ray.remote
class _Engine:
    """Stands in for a deployment on the far side of an actor call."""

    def call(self, incoming):
        provider, exporter = make_provider("memory")
        with attached(incoming), OtelSpans(provider).span("chat verify"):
            pass
        span = exporter.get_finished_spans()[0]
        return span.context.trace_id, span.parent.span_id if span.parent else None


def test_trace_context_crosses_a_ray_actor_call(ray_cluster):
    provider, exporter = make_provider("memory")
    engine = _Engine.remote()
    with OtelSpans(provider).span("block"):
        trace_id, parent = ray.get(engine.call.remote(carrier()))
    block = exporter.get_finished_spans()[0]
    assert trace_id == block.context.trace_id and parent == block.context.span_id
    assert re.fullmatch(r"[0-9]+", str(trace_id))
