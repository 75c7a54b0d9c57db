"""Parsers: a table of good and bad outputs with their reasons, and a fuzz test (>= 1,000 outputs)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specagent_ray.models.parsing import parse_action, parse_verdict
from specagent_ray.protocol import Action, ActionKind, MalformedOutput, Verdict
from specagent_ray.testing.examples import examples

TOOLS = frozenset({"get_user_details", "cancel_reservation"})
GET = {"kind": "tool", "name": "get_user_details", "arguments": {"user_id": "emma_kim_9957"}}
GOOD_ACTION = json.dumps(GET)
GOOD_VERDICT = json.dumps({"accepted_prefix": 1, "reason": "wrong reservation",
                           "repair": {"kind": "tool", "name": "cancel_reservation",
                                      "arguments": {"reservation_id": "X"}}})


@pytest.mark.parametrize("text, expected", [
    (GOOD_ACTION, Action.tool("get_user_details", user_id="emma_kim_9957")),
    ('{"kind": "message", "text": "Hello"}', Action.message("Hello")),
    ('{"kind": "stop"}', Action.stop()),
    ('  {"kind": "stop", "note": "extra keys are ignored"}\n', Action.stop()),
    (f"```json\n{GOOD_ACTION}\n```", Action.tool("get_user_details", user_id="emma_kim_9957")),
    (f"Sure, here it is:\n{GOOD_ACTION}\nLet me know.", Action.tool("get_user_details", user_id="emma_kim_9957")),
    ('<think>I could say {"kind": "stop"} but</think>{"kind": "message", "text": "Hi"}', Action.message("Hi")),
    ('{"kind": "tool", "name": "get_user_details", "arguments": {}}', Action.tool("get_user_details")),
    ('I checked {the id}. {"kind": "stop"}', Action.stop()),  # one span parses, the other is prose
    ('{"kind": "message", "text": "a } and a { in a string"}', Action.message("a } and a { in a string")),
])
def test_good_actions(text, expected):
    assert parse_action(text, TOOLS) == expected


@pytest.mark.parametrize("text, finish, reason", [
    ("", None, "empty output"),
    ("", "length", "truncated output: empty"),
    ("I will look up the user now.", None, "invalid JSON: Expecting value at line 1 column 1 (char 0)"),
    ('{"kind": "tool", "name": "get_user_details", "arguments": {"user_id": "emma', None,
     "truncated output: unterminated JSON"),
    ('{"kind": "tool", "name": "get_user_details", "arguments": {"user_id": "emma', "length",
     "truncated output (finish_reason=length)"),
    ('{"kind": "tool", "name": "get_user_details", "arguments": {}', None, "truncated output: unterminated JSON"),
    ('Here: {"kind": "tool", "name": "get_user_det', None, "truncated output: unterminated JSON at char 31"),
    ('{"kind": "tool" "name": "x"}', None, "invalid JSON: Expecting ',' delimiter at line 1 column 17 (char 16)"),
    # a fragment of a broken answer is never taken for the answer
    ('{"kind": "tool", "name": "get_user_details", "arguments": {"kind": "stop"}', None,
     "truncated output: unterminated JSON at char 74"),
    ('{"kind": "tool" "name": "get_user_details", "arguments": {"kind": "stop"}}', None,
     "invalid JSON: Expecting ',' delimiter"),
    ("<think>still thinking about {", "length", "truncated output: unterminated <think> block"),
    ('[{"kind": "stop"}]', None, "expected a JSON object, got array"),
    ('"stop"', None, "expected a JSON object, got string"),
    ('{"name": "get_user_details"}', None, "missing field 'kind'"),
    ('{"kind": "dance"}', None, "kind must be one of tool, message, stop, got 'dance'"),
    ('{"kind": 3}', None, "kind must be one of tool, message, stop, got 3"),
    ('{"kind": "tool", "name": "rm_rf", "arguments": {}}', None, "unknown tool 'rm_rf'"),
    ('{"kind": "tool", "arguments": {}}', None, "tool action: missing field 'name'"),
    ('{"kind": "tool", "name": "get_user_details"}', None, "tool action: missing field 'arguments'"),
    ('{"kind": "tool", "name": "get_user_details", "arguments": "{\\"user_id\\": 1}"}', None,
     "tool action: arguments must be object, got string"),
    ('{"kind": "tool", "name": ["get_user_details"], "arguments": {}}', None,
     "tool action: name must be string, got array"),
    ('{"kind": "message"}', None, "message: missing field 'text'"),
    ('{"kind": "message", "text": null}', None, "message: text must be string, got null"),
    ('{"kind": "stop"} {"kind": "message", "text": "bye"}', None, "ambiguous output: 2 JSON objects"),
    ("```json\n{}\n```\n```json\n{}\n```", None, "ambiguous output: 2 fenced blocks"),
    ("```json\n{\"kind\": \n```", None, "fenced block: truncated output"),
    ('{"kind": "stop", "kind": "message"}', None, "duplicate key 'kind'"),
    ('{"kind": "message", "text": NaN}', None, "NaN is not JSON"),
    ("[" * 5000, None, "nested too deeply"),
    ("x" * 300_000, None, "output too long"),
])
def test_bad_actions(text, finish, reason):
    with pytest.raises(MalformedOutput) as err:
        parse_action(text, TOOLS, finish)
    assert reason in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text, n, expected", [
    (GOOD_VERDICT, 2, Verdict(1, "wrong reservation", Action.tool("cancel_reservation", reservation_id="X"))),
    ('{"accepted_prefix": 2, "reason": "", "repair": null}', 2, Verdict(2, "", None)),
    ('{"accepted_prefix": 0, "reason": "premature", "repair": null}', 3, Verdict(0, "premature", None)),
    ('{"accepted_prefix": 0, "reason": "r"}', 1, Verdict(0, "r", None)),  # repair may be omitted
    ('{"accepted_prefix": 1, "reason": "", "repair": {"kind": "stop"}}', 1, Verdict(1, "", None)),  # j = n: no repair
    ('{"accepted_prefix": 0, "reason": "ask first", "repair": {"kind": "message", "text": "Confirm?"}}', 1,
     Verdict(0, "ask first", Action.message("Confirm?"))),
])
def test_good_verdicts(text, n, expected):
    assert parse_verdict(text, n, TOOLS) == expected


@pytest.mark.parametrize("text, n, reason", [
    ('{"accepted_prefix": 3, "reason": ""}', 2, "accepted_prefix 3 outside 0..2"),
    ('{"accepted_prefix": -1, "reason": ""}', 2, "accepted_prefix -1 outside 0..2"),
    ('{"accepted_prefix": 99999999999999999999, "reason": ""}', 6, "outside 0..6"),
    ('{"accepted_prefix": 1.0, "reason": ""}', 2, "verdict: accepted_prefix must be integer, got number"),
    ('{"accepted_prefix": true, "reason": ""}', 2, "verdict: accepted_prefix must be integer, got boolean"),
    ('{"accepted_prefix": "2", "reason": ""}', 2, "verdict: accepted_prefix must be integer, got string"),
    ('{"reason": "ok"}', 2, "verdict: missing field 'accepted_prefix'"),
    ('{"accepted_prefix": 1}', 2, "verdict: missing field 'reason'"),
    ('{"accepted_prefix": 0, "reason": "x", "repair": "cancel it"}', 2,
     "repair malformed: expected an object or null, got string"),
    ('{"accepted_prefix": 0, "reason": "x", "repair": {"kind": "tool", "name": "rm_rf", "arguments": {}}}', 2,
     "repair malformed: unknown tool 'rm_rf'"),
    ('{"accepted_prefix": 0, "reason": "x", "repair": {"kind": "tool", "name": "cancel_reservation"}}', 2,
     "repair malformed: tool action: missing field 'arguments'"),
    ('{"accepted_prefix": 1, "reason": "the second step is', 2, "truncated output: unterminated JSON"),
])
def test_bad_verdicts(text, n, reason):
    with pytest.raises(MalformedOutput) as err:
        parse_verdict(text, n, TOOLS)
    assert reason in str(err.value)


def test_parsers_reject_non_text():
    with pytest.raises(MalformedOutput, match="output is NoneType, not text"):
        parse_action(None, TOOLS)
    with pytest.raises(MalformedOutput, match="output is bytes, not text"):
        parse_verdict(b"{}", 1, TOOLS)


# -- fuzz: random and mutated outputs never crash the parsers --------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
KEYS = ["kind", "name", "arguments", "text", "accepted_prefix", "reason", "repair"]
actions = st.one_of(
    st.fixed_dictionaries({"kind": st.just("tool"), "name": st.sampled_from(sorted(TOOLS) + ["rm_rf", ""]),
                           "arguments": st.dictionaries(st.text(max_size=6), json_values, max_size=3)}),
    st.fixed_dictionaries({"kind": st.just("message"), "text": st.text(max_size=20)}),
    st.just({"kind": "stop"}),
)
verdicts = st.fixed_dictionaries({"accepted_prefix": st.integers(-3, 10) | st.just(10**40),
                                  "reason": st.text(max_size=20), "repair": st.none() | actions})
shaped = st.dictionaries(st.sampled_from(KEYS), json_values | actions, max_size=5)  # right keys, wrong types


@st.composite
def mutated(draw, base):
    text = json.dumps(draw(base))
    how = draw(st.sampled_from(["truncate", "delete", "duplicate", "insert", "wrap", "none"]))
    i = draw(st.integers(0, len(text)))
    if how == "truncate":
        return text[:i]
    if how == "delete":
        return text[:i] + text[i + 1:]
    if how == "duplicate":
        return text[:i] + text[i:i + 1] * 2 + text[i + 1:]
    if how == "insert":
        return text[:i] + draw(st.sampled_from(list('{}[]",:\\ 0-e\n`'))) + text[i:]
    if how == "wrap":
        return draw(st.sampled_from(["```json\n{}\n```", "Answer: {} done", "<think>{{</think>{}", "{} {}"])).replace(
            "{}", text)
    return text


outputs = st.one_of(
    st.text(max_size=60),
    st.text(alphabet='{}[]":,0123456789tnrufalse kindmesagptoolrepair_x\\`', max_size=80),
    json_values.map(json.dumps),
    mutated(actions), mutated(verdicts), mutated(shaped),
)


def check(parse, text):
    try:
        value = parse(text)
    except MalformedOutput as exc:
        message = str(exc)
        assert message and "\n" not in message
        assert not message.startswith("unparseable"), message  # the parsers' own checks said why
        return None
    return value


@settings(max_examples=examples(1200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=outputs, n=st.integers(1, 8), finish=st.sampled_from([None, "stop", "length"]))
def test_fuzz_parsers_only_return_valid_values_or_malformed(text, n, finish):
    action = check(lambda t: parse_action(t, TOOLS, finish), text)
    if action is not None:
        assert isinstance(action, Action)
        if action.kind is ActionKind.TOOL:
            assert action.call.name in TOOLS and isinstance(action.call.arguments, dict)
    verdict = check(lambda t: parse_verdict(t, n, TOOLS, finish), text)
    if verdict is not None:
        assert isinstance(verdict, Verdict)
        j = verdict.accepted_prefix
        assert isinstance(j, int) and not isinstance(j, bool) and 0 <= j <= n
        assert verdict.checked(n) is verdict
        if verdict.repair is not None and verdict.repair.kind is ActionKind.TOOL:
            assert verdict.repair.call.name in TOOLS


@pytest.mark.parametrize("good, parse", [
    (GOOD_ACTION, lambda t: parse_action(t, TOOLS)),
    (GOOD_VERDICT, lambda t: parse_verdict(t, 2, TOOLS)),
])
def test_every_truncation_of_a_valid_output_is_malformed(good, parse):
    for i in range(len(good)):  # an object is complete only at its closing brace
        with pytest.raises(MalformedOutput):
            parse(good[:i])


calls_lists = st.lists(st.fixed_dictionaries({"name": st.sampled_from(sorted(TOOLS) + ["rm_rf"]),
                                               "arguments": st.dictionaries(st.text(max_size=4), json_values,
                                                                            max_size=2)}) | json_values, max_size=10)
parallel_actions = st.fixed_dictionaries({"kind": st.just("tools"), "calls": calls_lists | json_values})
parallel_verdicts = st.fixed_dictionaries({"accepted_prefix": st.integers(-1, 9), "reason": st.text(max_size=8),
                                           "repair": st.none() | actions | parallel_actions,
                                           "calls": st.none() | st.lists(st.booleans() | json_values, max_size=10)
                                           | json_values})
parallel_outputs = st.one_of(mutated(parallel_actions), mutated(parallel_verdicts),
                             parallel_actions.map(json.dumps), parallel_verdicts.map(json.dumps))


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=outputs | parallel_outputs, n=st.integers(1, 8))
def test_fuzz_parsers_with_parallel_calls_only_return_valid_values_or_malformed(text, n):
    action = check(lambda t: parse_action(t, TOOLS, None, parallel=True), text)
    if action is not None and action.kind is ActionKind.TOOL:
        assert 1 <= len(action.calls) <= 8 and all(c.name in TOOLS and isinstance(c.arguments, dict)
                                                   for c in action.calls)
    verdict = check(lambda t: parse_verdict(t, n, TOOLS, None, parallel=True), text)
    if verdict is not None:
        assert 0 <= verdict.accepted_prefix <= n
        assert verdict.calls is None or (verdict.accepted_prefix == n and all(type(c) is bool for c in verdict.calls))
        if verdict.repair is not None and verdict.repair.kind is ActionKind.TOOL:
            assert all(c.name in TOOLS for c in verdict.repair.calls)
    off = check(lambda t: parse_action(t, TOOLS, None), text)  # parallel off: never several calls
    assert off is None or len(off.calls) <= 1


@pytest.mark.parametrize("field, sure", [(', "confidence": 0.25', 0.25), (', "confidence": 1', 1.0), ("", None),
                                         (', "confidence": 1.5', None), (', "confidence": true', None),
                                         (', "confidence": "0.9"', None), (', "confidence": -0.1', None)])
def test_a_reviewers_confidence_is_a_number_in_0_1_or_none(field, sure):
    from specagent_ray.models.parsing import parse_review

    verdict, got = parse_review('{"accepted_prefix": 1, "reason": "", "repair": null' + field + "}", 2, ["t"])
    assert verdict.accepted_prefix == 1 and got == sure
