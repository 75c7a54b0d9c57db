"""Prompts: verify and repair share their leading block byte for byte; prompts are deterministic;
the answer schemas are valid JSON Schema. On the real tau2 airline policy and tools."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from specagent_ray.models.parsing import parse_action, parse_verdict
from specagent_ray.models.prompts import (
    PromptConfig,
    Prompts,
    action_schema,
    serialize,
    shared_prefix_chars,
    verdict_schema,
)
from specagent_ray.protocol import Action, Effect, History, Observation, Step, Task
from specagent_ray.tools.tau2 import Tau2Domain, Tau2Tools


@pytest.fixture(scope="module")
def airline():
    return Tau2Domain.load("airline")


@pytest.fixture(scope="module")
def prompts(airline):
    return Prompts(PromptConfig(policy=airline.policy), airline.tool_schemas)


def read(tools, name, **args):
    action = Action.tool(name, **args)
    return Step(action, asyncio.run(tools.execute(action.call)), "weak", Effect.READ)


@pytest.fixture(scope="module")
def sample(airline):
    """A cancellation on the real airline environment: H of three steps, then a block of a read and a
    staged write."""
    tools = Tau2Tools(airline)
    task = Task("airline-cancel", "Hi, I want to cancel reservation EHGLP3. My user id is emma_kim_9957.")
    history = History(task, (
        read(tools, "get_user_details", user_id="emma_kim_9957"),
        read(tools, "get_reservation_details", reservation_id="EHGLP3"),
        Step(Action.message("Why do you want to cancel, and shall I proceed?"),
             Observation("Change of plans. Yes, please."), "weak", Effect.READ),
    ))
    block = (read(tools, "get_flight_status", flight_number="HAT156", date="2024-05-17"),
             Step(Action.tool("cancel_reservation", reservation_id="EHGLP3"), None, "weak", Effect.WRITE))
    return history, block


def is_prefix(head, messages):
    """``head``'s serialization, minus its closing bracket, starts ``messages``' serialization."""
    return serialize(messages).startswith(serialize(head)[:-1])


@pytest.mark.parametrize("j", [0, 1])
def test_verify_and_repair_share_the_leading_block_byte_for_byte(prompts, sample, j):
    history, block = sample
    verify = prompts.verify(history, block)
    accepted = history.commit(block[:j])  # the repair comes after the accepted prefix is committed
    repair = prompts.repair(accepted, "basic economy cannot be cancelled after 24 hours without insurance")
    lead = prompts.leading_block(accepted)
    assert lead[0]["role"] == "system" and len(lead) == 1 + 2 * len(accepted)
    assert is_prefix(lead, verify) and is_prefix(lead, repair)
    shared = shared_prefix_chars(verify, repair)
    assert shared >= len(serialize(lead)) - 1
    share = shared / len(serialize(repair))
    print(f"\nj={j}: shared prefix {shared} of {len(serialize(repair))} repair chars = {share:.1%}")
    assert share > 0.9  # the leading block is nearly all of the repair prompt


def test_draft_prompts_extend_each_other(prompts, sample):
    """Each draft step's prompt starts with the previous one minus its instruction (prefix-cache friendly)."""
    history, block = sample
    first, second = prompts.draft(history), prompts.draft(history, block[:1])
    assert is_prefix(first[:-1], second)
    assert is_prefix(second[:-1], prompts.verify(history, block))


def test_prompts_are_deterministic(airline, sample):
    history, block = sample
    a = Prompts(PromptConfig(policy=airline.policy), airline.tool_schemas)
    shuffled = {name: dict(reversed(list(schema.items())))
                for name, schema in reversed(list(airline.tool_schemas.items()))}
    b = Prompts(PromptConfig(policy=airline.policy), shuffled)
    assert serialize(a.verify(history, block)) == serialize(b.verify(history, block))
    assert serialize(a.repair(history, "r")) == serialize(a.repair(history, "r"))
    assert a.verdict_schema(2) == b.verdict_schema(2)


def test_system_message_carries_policy_tools_and_task(prompts, airline, sample):
    history, _ = sample
    system = prompts.leading_block(history)[0]["content"]
    assert airline.policy.strip() in system
    assert history.task.instruction in system
    for name, schema in airline.tool_schemas.items():
        assert f"## {name}\n" in system
        assert json.dumps(schema, sort_keys=True) in system


def test_verify_marks_the_staged_step_and_repair_carries_the_reason(prompts, sample):
    history, block = sample
    instruction = prompts.verify(history, block)[-1]["content"]
    assert "1. " in instruction and "[executed]" in instruction
    assert '2. {"kind": "tool", "name": "cancel_reservation", "arguments": {"reservation_id": "EHGLP3"}}' in instruction
    assert "STAGED: not executed" in instruction
    assert "(0..2)" in instruction
    repair = prompts.repair(history, "needs insurance")[-1]["content"]
    assert "rejected the next step because: needs insurance" in repair


def test_observations_are_truncated(airline, sample):
    history, _ = sample
    short = Prompts(PromptConfig(observation_chars=50), airline.tool_schemas).leading_block(history)
    result = short[2]["content"]
    assert result.startswith("Tool result (get_user_details): {")
    assert "more chars truncated]" in result and len(result) < 120
    assert short[6]["content"] == "Customer: Change of plans. Yes, please."


def test_schemas_are_valid_json_schema_and_agree_with_the_parsers(airline):
    names = airline.tool_schemas
    a, v = action_schema(names), verdict_schema(names, n=3)
    for schema in (a, v, verdict_schema(names)):
        jsonschema.validators.validator_for(schema).check_schema(schema)
    good_action = {"kind": "tool", "name": "get_user_details", "arguments": {"user_id": "x"}}
    jsonschema.validate(good_action, a)
    assert parse_action(json.dumps(good_action), names).call.name == "get_user_details"
    good_verdict = {"accepted_prefix": 1, "reason": "r", "repair": {"kind": "message", "text": "Sure?"}}
    jsonschema.validate(good_verdict, v)
    assert parse_verdict(json.dumps(good_verdict), 3, names).repair == Action.message("Sure?")
    for bad, schema in [({"kind": "tool", "name": "rm_rf", "arguments": {}}, a), ({"kind": "fly"}, a),
                        ({"accepted_prefix": 4, "reason": "", "repair": None}, v),
                        ({"accepted_prefix": -1, "reason": "", "repair": None}, v)]:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_config_forbids_unknown_keys():
    with pytest.raises(ValueError):
        PromptConfig(polcy="typo")


@pytest.mark.parametrize("action", [
    Action.tool("get_user_details", user_id="emma_kim_9957"), Action.tool("calculate", expression="2 * (3 + 4)"),
    Action.message('He said "ok" {}'), Action.stop(),
])
def test_rendered_actions_parse_back_to_themselves(airline, action):
    from specagent_ray.models.prompts import render_action

    assert parse_action(render_action(action), airline.tool_schemas) == action


def test_typed_action_schema_constrains_each_tools_arguments_and_keeps_refs_resolvable():
    import jsonschema

    from specagent_ray.models.prompts import typed_action_schema, verdict_schema
    from specagent_ray.tools.tau2 import Tau2Domain

    schemas = Tau2Domain.load("airline").tool_schemas
    v = jsonschema.Draft202012Validator(typed_action_schema(schemas))
    assert v.is_valid({"kind": "tool", "name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}})
    assert not v.is_valid({"kind": "tool", "name": "get_user_details", "arguments": {}})
    assert not v.is_valid({"kind": "tool", "name": "no_such_tool", "arguments": {}})
    booking = {"kind": "tool", "name": "book_reservation", "arguments": {
        "user_id": "u", "origin": "SFO", "destination": "JFK", "flight_type": "one_way", "cabin": "economy",
        "flights": [{"flight_number": "HAT001", "date": "2024-05-01"}],
        "passengers": [{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}],
        "payment_methods": [{"payment_id": "p", "amount": 1}], "total_baggages": 0, "nonfree_baggages": 0,
        "insurance": "no"}}
    assert v.is_valid(booking)  # $refs into the hoisted $defs resolve
    assert v.is_valid({"kind": "stop"}) and not v.is_valid({"kind": "message"})
    verdict = jsonschema.Draft202012Validator(verdict_schema(schemas, 2, typed=True))
    assert verdict.is_valid({"accepted_prefix": 2, "reason": "", "repair": None})
    assert not verdict.is_valid({"accepted_prefix": 3, "reason": "", "repair": None})
    assert not verdict.is_valid({"accepted_prefix": 0, "reason": "x", "repair": {"kind": "tool", "name": "get_user_details",
                                                                                  "arguments": {}}})
