"""Parallel tool calls in the Responses API: ``parallel_tool_calls`` decides a session's ``parallel_calls``
within what the profile allows, the response echoes what was applied, and a parallel action's calls show
as one output item per call (``mcp_call`` once committed, ``function_call`` as each goes out)."""

from __future__ import annotations

import json
from dataclasses import replace

import openresponses_types as ort
import pytest
from openai.types.responses import Response

from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.errors import Conflict
from specagent_ray.serve.responses.items import labels_of, output_items, response
from specagent_ray.serve.responses.translate import (
    ResponseCreate,
    Terms,
    create_request,
    meta,
    turn_post,
)

OFF = Terms(("specagent", "strong"), {"agent": "specagent"}, ("bank",), "app")  # the profile keeps them off
ON = replace(OFF, parallel=True)  # the profile's defaults.parallel_calls is on
FN = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


def body(**fields) -> ResponseCreate:
    return ResponseCreate(**{"model": "specagent", "input": "hi", "tools": [FN], **fields})


# -- requests in --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("terms, asked, applied", [
    (ON, None, True), (ON, True, True), (ON, False, False),  # the specification's default is true
    (OFF, None, False), (OFF, True, False), (OFF, False, False),  # never more than the profile allows
])
def test_parallel_tool_calls_decides_the_session_within_the_profile_and_the_echo_says_what_was_applied(
        terms, asked, applied):
    b = body(parallel_tool_calls=asked)
    request = create_request(b, terms)
    assert request.parallel_calls is applied  # always explicit: a later profile change cannot alter the session
    assert meta(b, 1, [], request.parallel_calls).echo["parallel_tool_calls"] is applied


def test_a_continuation_echoes_its_sessions_value_and_asking_otherwise_is_a_handoff():
    session = create_request(body(), ON)
    post = turn_post(body(input="more"), 0, session, ON, 2)
    assert post.meta.echo["parallel_tool_calls"] is True  # omitted: the conversation keeps its own
    assert turn_post(body(input="more", parallel_tool_calls=True), 0, session, ON, 2).meta.echo[
        "parallel_tool_calls"] is True
    with pytest.raises(Conflict) as other:
        turn_post(body(input="more", parallel_tool_calls=False), 0, session, ON, 2)
    assert other.value.code == "handoff" and other.value.param == "parallel_tool_calls"
    single = create_request(body(parallel_tool_calls=False), ON)
    assert turn_post(body(input="more", parallel_tool_calls=False), 0, single, ON, 2).meta.echo[
        "parallel_tool_calls"] is False
    # a session created before this setting existed (None) has the profile's value
    old = single.model_copy(update={"parallel_calls": None})
    assert turn_post(body(input="more"), 0, old, OFF, 2).meta.echo["parallel_tool_calls"] is False


def test_a_create_without_the_field_is_unchanged_where_the_profile_keeps_parallel_calls_off():
    assert CreateSession(tool_source="app").parallel_calls is None  # the profile's default applies
    assert meta(body(), 1, []).echo["parallel_tool_calls"] is False  # the echo never claims more than applied


# -- records out --------------------------------------------------------------------------------------------

def rec(seq: int, t: str, **fields) -> dict:
    return {"seq": seq, "t": t, **fields}


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def parallel(*calls: dict) -> dict:
    return {"kind": "tool", **calls[0], "more": list(calls[1:])}


def obs(*contents: str, errors: tuple[bool, ...] = ()) -> dict:
    parts = [{"content": c, "error": bool(errors and errors[i])} for i, c in enumerate(contents)]
    return {"content": "\n".join(f"[{i}] {c}" for i, c in enumerate(contents)), "error": False, "parts": parts}


def step(action: dict, observation: dict | None, effect: str = "read") -> dict:
    return {"action": action, "observation": observation, "author": "weak", "effect": effect}


CREATED = rec(0, "created", request={"tool_source": "bank"}, tools=[
    {"name": "get_balance", "input_schema": {}, "annotations": {"read_only": True}},
    {"name": "transfer", "input_schema": {}, "annotations": {"read_only": False}}])
LABELS = labels_of(CREATED, ("bank",))


def test_a_committed_parallel_step_is_one_mcp_call_per_call_with_its_own_output_and_id():
    read = parallel(call("get_balance", account="a"), call("get_balance", account="b"))
    one = {"kind": "tool", **call("get_balance", account="c")}
    turn = [rec(1, "commit", steps=[step(read, obs("100", "7")), step(one, {"content": "3", "error": False})],
                keys=[None, None], calls=[])]
    out = output_items(turn, "s", LABELS)
    assert [(i["name"], json.loads(i["arguments"]), i["output"]) for i in out] == [
        ("get_balance", {"account": "a"}, "100"), ("get_balance", {"account": "b"}, "7"),
        ("get_balance", {"account": "c"}, "3")]
    assert len({i["id"] for i in out}) == 3
    single = output_items([rec(1, "commit", steps=[step(one, {"content": "3", "error": False})], keys=[None],
                               calls=[])], "s", LABELS)
    assert single[0]["id"] == "mcp_s_1_0"  # a one-call step keeps the id it always had


def test_a_parallel_writes_read_calls_and_ran_writes_show_and_a_denied_write_never_does():
    action = parallel(call("get_balance", account="a"), call("transfer", amount=5), call("transfer", amount=9))
    observation = obs("100", "moved 5", "The user denied this call.", errors=(False, False, True))
    turn = [rec(1, "commit", steps=[step(action, observation, "write")], keys=[[None, "k0", None]], calls=[])]
    out = output_items(turn, "s", LABELS)
    assert [(i["name"], i["output"], i["status"]) for i in out] == [
        ("get_balance", "100", "completed"), ("transfer", "moved 5", "completed")]
    failed = [rec(1, "commit", steps=[step(parallel(call("transfer", amount=1), call("transfer", amount=2)),
                                           obs("ok", "no funds", errors=(False, True)), "write")],
                  keys=[["k0", "k1"]], calls=[])]
    assert [(i["status"], i["error"]) for i in output_items(failed, "s", LABELS)] == [
        ("completed", None), ("failed", "no funds")]


def test_parallel_reads_drafted_before_a_message_show_with_it_each_with_its_own_result():
    action = parallel(call("get_balance", account="a"), call("transfer", amount=1), call("get_balance", account="b"))
    reads = parallel(call("get_balance", account="a"), call("get_balance", account="b"))
    turn = [rec(1, "tool_result", name="get_balance", observation={"content": "100"}),
            rec(2, "tool_result", name="get_balance", observation={"content": "7"}),
            rec(3, "drafted", action=reads), rec(4, "staged", action=action), rec(5, "rejected", action=action),
            rec(6, "tool_result", name="get_balance", observation={"content": "100"}),
            rec(7, "tool_result", name="get_balance", observation={"content": "7"}),
            rec(8, "drafted", action=reads), rec(9, "agent_message", text="a: 100, b: 7")]
    out = output_items(turn, "s", LABELS)
    assert [(i["type"], i.get("output")) for i in out] == [("mcp_call", "100"), ("mcp_call", "7"), ("message", None)]
    assert len({i["id"] for i in out}) == 3


def test_every_function_call_of_one_action_is_in_the_response_that_ends_the_turn_and_it_validates():
    created = rec(0, "created", request={"tool_source": "app", "instructions": None}, tools=None,
                  turn={"model": "specagent", "created_at": 1, "echo": {"parallel_tool_calls": True}})
    turn = [created, rec(1, "tool_call_pending", call_id="c1", name="lookup", arguments={"q": "a"}),
            rec(2, "tool_call_pending", call_id="c2", name="lookup", arguments={"q": "b"})]
    resp = response(created, turn, "1-0123456789abcdef", 0, {})
    assert resp["status"] == "completed" and resp["parallel_tool_calls"] is True
    assert [(i["type"], i["call_id"]) for i in resp["output"]] == [("function_call", "c1"), ("function_call", "c2")]
    assert len({i["id"] for i in resp["output"]}) == 2
    ort.ResponseResource.model_validate(resp)
    Response.model_validate(resp)


def test_every_function_call_output_of_one_action_is_matched_to_its_call():
    session = create_request(body(), ON)
    post = turn_post(body(input=[{"type": "function_call_output", "call_id": "c2", "output": "b"},
                                 {"type": "function_call_output", "call_id": "c1", "output": "a"}]), 0, session, ON, 2)
    assert [(i.call_id, i.content) for i in post.inputs] == [("c2", "b"), ("c1", "a")]
