"""Structured outputs on the models' side (``models/structured.py``): which client schemas a session may ask
for, an instance built from one, a message checked against one, the action schema that makes an engine's
grammar write one, and the plan-following engines saying one."""

from __future__ import annotations

import json
from typing import Literal

import jsonschema
import pytest
from openai.lib._pydantic import (
    to_strict_json_schema,  # what ``responses.parse(text_format=...)`` sends
)
from pydantic import BaseModel, Field, ValidationError

from specagent_ray.models.parsing import parse_action, parse_verdict
from specagent_ray.models.scripted_plan import PlanPolicy, PlanVerifier, parse_plan
from specagent_ray.models.prompts import PromptConfig, Prompts, render_action
from specagent_ray.models.structured import MessageFormat, check_output_schema, instance
from specagent_ray.protocol.interfaces import MalformedOutput
from specagent_ray.protocol.types import Action, History, Task
from specagent_ray.serve.core.api import CreateSession, OutputFormat
from specagent_ray.tools.scripted import object_schema


class Item(BaseModel):
    name: str
    qty: int = Field(ge=3)


class Order(BaseModel):
    items: list[Item] = Field(min_length=2)
    note: str | None
    kind: Literal["pickup", "delivery"]
    paid: bool
    price: float = Field(gt=2.5)
    parent: Order | None  # recursive: through $defs


ORDER = to_strict_json_schema(Order)
STRICT_SUBSET = [
    ORDER,
    {"type": "object", "additionalProperties": False, "required": ["a", "b", "c"],
     "properties": {"a": {"const": "x"}, "b": {"type": "null"}, "c": {"type": ["integer", "null"], "minimum": 7}}},
    {"type": "object", "additionalProperties": False, "required": ["tags"],
     "properties": {"tags": {"type": "array", "minItems": 3, "items": {"type": "string", "enum": ["p", "q"],
                                                                         "format": "email"}}}},
    {"type": "object", "additionalProperties": False, "required": ["n"],
     "properties": {"n": {"anyOf": [{"type": "null"}, {"type": "number", "minimum": 0, "exclusiveMaximum": 0.5}]}}},
    {"type": "object", "additionalProperties": False, "required": ["s"],
     "properties": {"s": {"type": "string", "minLength": 12, "maxLength": 12}}},
]


@pytest.mark.parametrize("schema", STRICT_SUBSET)
def test_an_instance_built_from_a_schema_of_the_strict_subset_is_one_it_accepts(schema):
    value = instance(schema)
    jsonschema.Draft202012Validator(schema).validate(value)
    assert MessageFormat(schema).check(MessageFormat(schema).example()) is None


def test_a_message_is_checked_as_json_against_the_schema_and_json_object_takes_any_object():
    fmt = MessageFormat(ORDER)
    assert "not JSON" in fmt.check("Sure! Here is your order.")
    good = instance(ORDER)
    assert fmt.check(json.dumps(good)) is None
    bad = {**good, "kind": "teleport"}
    assert "kind" in fmt.check(json.dumps(bad))
    anything = MessageFormat.of(OutputFormat(type="json_object"))
    assert anything.check('{"any": ["thing"]}') is None and anything.check("[1, 2]") is not None
    assert MessageFormat.of(None) is None


def test_the_sdk_s_strict_schema_is_taken_and_names_its_schema_by_alias():
    fmt = OutputFormat.model_validate({"type": "json_schema", "name": "Order", "schema": ORDER, "strict": True})
    assert fmt.schema_ == ORDER
    assert CreateSession(tool_source="app", message="hi", output_format=fmt).output_format == fmt


@pytest.mark.parametrize("body, why", [
    ({"type": "json_schema"}, "needs a schema"),
    ({"type": "json_object", "schema": {"type": "object"}}, "takes no schema"),
    ({"type": "json_schema", "schema": {"type": "teleport"}}, "not a valid JSON Schema"),
    ({"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/gone"}}}},
     "gone"),
    ({"type": "json_schema", "schema": {"$ref": "https://example.com/s.json"}}, "local"),
    ({"type": "json_schema", "schema": json.loads('{"items":' * 40 + "{}" + "}" * 40)}, "deeper"),
    ({"type": "json_schema", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                                                        "required": ["a"]}}, "additionalProperties"),
    ({"type": "json_schema", "strict": True, "schema": {"type": "object", "additionalProperties": False,
                                                        "properties": {"a": {"type": "string"}}}}, "required"),
    ({"type": "json_schema", "strict": True, "schema": {"type": "array", "items": {"type": "string"}}},
     "type: \"object\""),
    ({"type": "json_schema", "schema": {"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#"}}}},
     "no finite value"),
])
def test_a_schema_the_server_cannot_enforce_is_refused_at_create_with_why(body, why):
    with pytest.raises(ValidationError, match=why):
        OutputFormat.model_validate(body)


def test_a_schema_the_grammar_backend_cannot_compile_is_refused_with_its_message():
    pytest.importorskip("xgrammar")
    with pytest.raises(ValueError, match="minLength 5 is greater than maxLength 2"):
        check_output_schema({"type": "object", "properties": {"a": {"type": "string", "minLength": 5,
                                                                   "maxLength": 2}}}, strict=False)


def test_strict_false_takes_a_schema_that_strict_refuses():
    loose = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert OutputFormat.model_validate({"type": "json_schema", "schema": loose, "strict": False}).schema_ == loose


TOOLS = {"lookup": object_schema(q="string")}


@pytest.mark.parametrize("typed", [True, False])
def test_the_action_schema_makes_a_message_the_clients_object_and_parsing_serialises_it(typed):
    prompts = Prompts(PromptConfig(message_schema=ORDER, typed_arguments=typed), TOOLS)
    schema = prompts.action_schema
    value = instance(ORDER)
    jsonschema.Draft202012Validator(schema).validate({"kind": "message", "text": value})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate({"kind": "message", "text": "a plain string"})
    jsonschema.Draft202012Validator(schema).validate({"kind": "tool", "name": "lookup", "arguments": {"q": "x"}})
    verdict = prompts.verdict_schema(1)
    jsonschema.Draft202012Validator(verdict).validate({"accepted_prefix": 0, "reason": "r", "repair": {
        "kind": "message", "text": value}})
    action = parse_action(json.dumps({"kind": "message", "text": value}, indent=2), {"lookup"}, structured=True)
    assert action.text == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    repair = parse_verdict(json.dumps({"accepted_prefix": 0, "reason": "r", "repair": {"kind": "message",
                                                                                       "text": value}}),
                           1, {"lookup"}, structured=True).repair
    assert repair == action
    with pytest.raises(MalformedOutput):  # without a format a message's text is a string, as before
        parse_action(json.dumps({"kind": "message", "text": value}), {"lookup"})
    assert "pickup" in prompts.draft(History(Task("t", "hi")))[0]["content"]  # the model is told the form


def test_the_grammar_backend_compiles_the_action_schema_with_the_clients_schema_inside():
    xgrammar = pytest.importorskip("xgrammar")
    for typed in (True, False):
        prompts = Prompts(PromptConfig(message_schema=ORDER, typed_arguments=typed), TOOLS)
        xgrammar.Grammar.from_json_schema(json.dumps(prompts.action_schema))
        xgrammar.Grammar.from_json_schema(json.dumps(prompts.verdict_schema(2)))


def test_a_structured_message_in_the_history_is_rendered_as_the_object_it_was_written_as():
    text = json.dumps(instance(ORDER), separators=(",", ":"))
    assert f'"text": {text}' in render_action(Action.message(text), structured=True)
    assert '"text": "' in render_action(Action.message(text))


# -- the plan-following engines ------------------------------------------------------------------------------

async def test_the_plan_engines_say_an_instance_keep_a_valid_say_and_repair_an_invalid_one():
    fmt = MessageFormat(ORDER)
    said = parse_plan("hello", fmt=fmt)[0]  # no plan: the reply is one the schema accepts
    assert said.intended == said.drafted and fmt.check(said.intended.text) is None
    good = json.dumps(instance(ORDER))
    assert parse_plan(f"say {good}", fmt=fmt)[0].intended == Action.message(good)  # as is
    bad = parse_plan("say not an order", fmt=fmt)[0]
    assert bad.drafted == Action.message("not an order") and fmt.check(bad.intended.text) is None
    history = History(Task("t", "say not an order"))
    weak, strong = PlanPolicy("weak", fmt=fmt), PlanPolicy("strong", fmt=fmt)
    assert (await weak.propose(history)).action.text == "not an order"  # the weak drafts the plan's words
    assert fmt.check((await strong.propose(history)).action.text) is None  # the strong writes a valid one
    from specagent_ray.protocol.types import Effect, Step
    review = await PlanVerifier(fmt=fmt).verify(history, [Step(Action.message("not an order"), None, "weak", Effect.WRITE)])
    assert review.verdict.accepted_prefix == 0 and fmt.check(review.verdict.repair.text) is None
    done = parse_plan(f"say {good}", fmt=fmt)
    assert len(done) == 1  # after the plan's last step the agent's "Done." follows the form too
    after = History(Task("t", f"say {good}"), (Step(Action.message(good), None, "weak", Effect.READ),))
    assert fmt.check((await strong.propose(after)).action.text) is None
