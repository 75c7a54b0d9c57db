"""OpenTelemetry spans from one SpecAgent session, and context across a process boundary."""

import asyncio
import multiprocessing as mp
import re

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import METHODS, Action, Effect, Parts, SpecConfig, Task, Verdict
from specagent_ray.telemetry.tracing import OtelSpans, attached, carrier, make_provider, traceparent_headers
from specagent_ray.tools.scripted import InMemoryTools, ToolSpec, object_schema

R = Action.tool("lookup", id="a")
W = Action.tool("refund", id="a", amount=5)
FIX = Action.tool("refund", id="a", amount=3)


def traced_session():
    provider, exporter = make_provider("memory")
    tools = InMemoryTools({"lookup": ToolSpec(Effect.READ, object_schema(id="string")),
                           "refund": ToolSpec(Effect.WRITE, object_schema(id="string", amount="integer"))})
    parts = Parts(ScriptedPolicy([R, W, Action.stop()]), ScriptedPolicy([Action.stop()]),
                  ScriptedVerifier([Verdict(1, "amount wrong", FIX), Verdict(0, "not yet")]), tools,
                  ScriptedUser(), Ledger(), spans=OtelSpans(provider))
    asyncio.run(METHODS["specagent"](Task("t1", "refund"), parts, SpecConfig()))
    return exporter.get_finished_spans()


def test_one_session_is_one_trace_with_the_protocol_structure():
    spans = traced_session()
    by_id = {s.context.span_id: s for s in spans}
    assert len({s.context.trace_id for s in spans}) == 1
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["session"] and roots[0].attributes["specagent.method"] == "specagent"

    def chain(span):
        names = []
        while span.parent is not None:
            span = by_id[span.parent.span_id]
            names.append(span.name)
        return names

    tool = next(s for s in spans if s.name == "execute_tool lookup")
    assert chain(tool) == ["block", "session"]
    draft = next(s for s in spans if s.name == "chat draft")
    assert chain(draft) == ["block", "session"] and draft.attributes["gen_ai.request.model"] == "weak"
    verify = next(s for s in spans if s.name == "chat verify")
    assert verify.attributes["gen_ai.operation.name"] == "chat" and verify.attributes["gen_ai.usage.input_tokens"] > 0
    repairs = {s.attributes["specagent.repair_kind"] for s in spans if s.name == "repair"}
    assert repairs == {"fused", "strong"}
    fused_write = next(s for s in spans if s.name == "execute_tool refund")
    assert chain(fused_write) == ["repair", "block", "session"]
    blocks = [s for s in spans if s.name == "block" and "specagent.accepted_prefix" in s.attributes]
    assert blocks[0].attributes["specagent.draft_length"] == 2 and blocks[0].attributes["specagent.accepted_prefix"] == 1


def _child(incoming, out):
    provider, exporter = make_provider("memory")
    with attached(incoming):
        with OtelSpans(provider).span("engine call"):
            pass
    span = exporter.get_finished_spans()[0]
    out.put((span.context.trace_id, span.parent.span_id if span.parent else None))


def test_context_crosses_a_process_boundary_explicitly():
    provider, exporter = make_provider("memory")
    with OtelSpans(provider).span("block"):
        sent = carrier()
        headers = traceparent_headers()
    parent = exporter.get_finished_spans()[0]
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", headers["traceparent"])
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(sent, out))
    proc.start()
    trace_id, parent_id = out.get(timeout=60)
    proc.join(timeout=60)
    assert trace_id == parent.context.trace_id and parent_id == parent.context.span_id


def test_without_a_carrier_a_new_trace_starts():
    provider, exporter = make_provider("memory")
    with attached(None), OtelSpans(provider).span("lonely"):
        pass
    assert exporter.get_finished_spans()[0].parent is None
