"""Parallel calls at the model's edge: the prompts render them, the schemas allow them only when the
session does, and the parsers read them back or say why not."""

from __future__ import annotations

import json

import jsonschema
import pytest

from specagent_ray.models.parsing import parse_action, parse_verdict
from specagent_ray.models.prompts import PromptConfig, Prompts, render_action, step_messages, verify_instruction
from specagent_ray.protocol.interfaces import MalformedOutput
from specagent_ray.protocol.types import Action, Effect, History, Observation, Step, Task, ToolCall
from specagent_ray.tools.scripted import object_schema

SCHEMAS = {"lookup": object_schema(id="string"), "refund": object_schema(id="string", amount="integer")}
NAMES = frozenset(SCHEMAS)
TWO = Action.parallel([ToolCall("lookup", {"id": "a"}), ToolCall("refund", {"id": "b", "amount": 3})])


def test_a_parallel_action_renders_as_the_json_the_parser_reads_back():
    text = render_action(TWO)
    assert json.loads(text)["kind"] == "tools"
    assert parse_action(text, NAMES, parallel=True) == TWO
    assert render_action(Action.tool("lookup", id="a")) == '{"kind": "tool", "name": "lookup", "arguments": {"id": "a"}}'


@pytest.mark.parametrize("calls, why", [
    ([{"name": "lookup", "arguments": {"id": "a"}}], "2 to 8"),
    ([{"name": "lookup", "arguments": {"id": str(i)}} for i in range(9)], "2 to 8"),
    ([{"name": "lookup", "arguments": {"id": "a"}}, {"name": "rm", "arguments": {}}], "unknown tool"),
    ([{"name": "lookup", "arguments": {"id": "a"}}, "refund"], "object"),
    ("lookup", "list"),
])
def test_a_malformed_parallel_action_is_refused_with_its_reason(calls, why):
    with pytest.raises(MalformedOutput, match=why):
        parse_action(json.dumps({"kind": "tools", "calls": calls}), NAMES, parallel=True)


def test_a_session_without_parallel_calls_refuses_them():
    with pytest.raises(MalformedOutput, match="one at a time"):
        parse_action(render_action(TWO), NAMES)


def test_a_verdict_answers_call_by_call_only_when_the_block_is_accepted():
    text = json.dumps({"accepted_prefix": 2, "reason": "b", "calls": [True, False],
                       "repair": {"kind": "tool", "name": "refund", "arguments": {"id": "b", "amount": 1}}})
    v = parse_verdict(text, 2, NAMES, parallel=True)
    assert v.calls == (True, False) and v.repair == Action.tool("refund", id="b", amount=1)
    assert parse_verdict(text, 2, NAMES).calls is None  # off: the field is not read
    rejected = parse_verdict(text.replace('"accepted_prefix": 2', '"accepted_prefix": 1'), 2, NAMES, parallel=True)
    assert rejected.calls is None and rejected.repair is not None
    whole = parse_verdict(text.replace("false", "true"), 2, NAMES, parallel=True)
    assert whole.calls == (True, True) and whole.repair is None
    with pytest.raises(MalformedOutput, match="true/false"):
        parse_verdict(text.replace("false", "0"), 2, NAMES, parallel=True)


def test_the_schemas_allow_parallel_calls_and_per_call_answers_only_when_asked():
    for typed in (True, False):
        on = Prompts(PromptConfig(parallel_calls=True, typed_arguments=typed), SCHEMAS)
        off = Prompts(PromptConfig(typed_arguments=typed), SCHEMAS)
        tools = json.loads(render_action(TWO))
        jsonschema.validate(tools, on.action_schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(tools, off.action_schema)
        verdict = {"accepted_prefix": 1, "reason": "", "repair": None, "calls": [True, False]}
        jsonschema.validate(verdict, on.verdict_schema(1))
        jsonschema.validate({**verdict, "calls": None, "repair": tools}, on.verdict_schema(1))
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(verdict, off.verdict_schema(1))
        assert "calls" not in off.verdict_schema(1)["properties"]


def test_the_prompts_show_each_calls_result_and_ask_the_reviewer_call_by_call():
    obs = Observation.of_calls(TWO.calls, [Observation("record a"), Observation("refunded", error=True)])
    messages = step_messages(Step(TWO, obs, "weak", Effect.WRITE), 1000)
    assert messages[1]["content"].startswith("Tool results (lookup, refund):") and "[1] refund (error): refunded" in \
        messages[1]["content"]
    staged = verify_instruction([Step(TWO, None, "weak", Effect.WRITE)])
    assert '"calls"' in staged and "2 tool calls" in staged
    assert '"calls"' not in verify_instruction([Step(Action.tool("lookup", id="a"), None, "weak", Effect.WRITE)])
    system = Prompts(PromptConfig(parallel_calls=True), SCHEMAS).leading_block(History(Task("t", "x")))[0]
    assert '"kind": "tools"' in system["content"]
