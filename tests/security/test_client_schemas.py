"""A client's tool schema cannot freeze the coordinator. Patterns run on RE2 (linear
time), and what RE2 cannot run, deep or huge schemas and patternProperties are refused at the gateway."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from specagent_ray.protocol.types import ToolCall
from specagent_ray.testing.gateway_server import in_process_gateway
from specagent_ray.tools.schema import MAX_SCHEMA_DEPTH, SchemaValidator

pytestmark = pytest.mark.security
EVIL = "^(a+)+$"  # Python's re takes ~1 s at 24 characters, doubling with each one more
ATTACK = "a" * 28 + "!"


def tool(parameters: dict) -> dict:
    return {"tool_source": "app", "user": "client", "message": "hi",
            "client_tools": [{"name": "lookup", "parameters": parameters}]}


def string_with(pattern: str) -> dict:
    return {"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}}}


def test_a_catastrophic_pattern_is_checked_in_under_10_ms():
    assert re.fullmatch(EVIL, "aaaa")  # the attack's pattern is ordinary regex syntax
    validator = SchemaValidator({"lookup": string_with(EVIL)})
    timings = []
    for _ in range(5):  # the best of five, so a busy CI machine's pause is not counted
        started = time.perf_counter()
        reason = validator.check(ToolCall("lookup", {"q": ATTACK}))
        timings.append(time.perf_counter() - started)
    assert reason is not None and "does not match" in reason
    assert min(timings) < 0.010
    assert validator.check(ToolCall("lookup", {"q": "aaaa"})) is None


def deep(levels: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"x": node}}
    return node


@pytest.mark.parametrize("parameters, why", [
    (string_with(r"(a)\1"), "not supported"),  # a backreference: RE2 has none
    (string_with(r"^(?=a)"), "not supported"),  # lookahead
    ({"type": "object", "patternProperties": {EVIL: {"type": "string"}}}, "patternProperties"),
    (deep(MAX_SCHEMA_DEPTH), "deeper than"),
    ({"type": "object", "description": "x" * 20_000}, "over the limit"),
    ({"type": "no-such-type"}, "not a valid JSON Schema"),
])
def test_a_schema_the_coordinator_cannot_run_safely_is_422_at_the_gateway(tmp_path, parameters, why):
    sources = {"tool_sources": {"app": {"kind": "client"}}}
    with in_process_gateway(tmp_path, app=sources) as url:
        started = time.monotonic()
        r = httpx.post(url + "/v1/sessions", json=tool(parameters), headers={"X-API-Key": "dev-key"}, timeout=30)
    assert r.status_code == 422 and why in r.text
    assert time.monotonic() - started < 5  # answered, not retried for the gateway's patience
