"""A tool call is checked once per distinct (tool, arguments): the draft and the commit of one action, and
the same call in many sessions, reuse the answer. The answer must be exactly the uncached one."""

from __future__ import annotations

import datetime

from specagent_ray.protocol.types import ToolCall
from specagent_ray.tools.schema import SchemaValidator

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
          "required": ["n"], "additionalProperties": False}


def fresh(call: ToolCall) -> str | None:
    return SchemaValidator({"t": SCHEMA}).check(call)


def test_a_repeated_call_is_answered_from_the_memo_with_the_uncached_answer(monkeypatch):
    v = SchemaValidator({"t": SCHEMA})
    calls = [ToolCall("t", {"n": 1}), ToolCall("t", {"n": "1"}), ToolCall("t", {"n": 1, "x": 2}), ToolCall("t", {})]
    first = [v.check(c) for c in calls]
    assert first[0] is None and all(first[1:])
    monkeypatch.setattr(v, "_validators", {})  # a second look at the schema would now say "unknown tool"
    assert [v.check(ToolCall(c.name, dict(c.arguments))) for c in calls] == first


def test_arguments_that_differ_only_in_json_type_are_never_confused():
    v = SchemaValidator({"t": SCHEMA})
    for args in ({"n": 1}, {"n": 1.0}, {"n": True}, {"n": "1"}, {"n": 1.5}, {"n": 1, "s": "a"}, {"n": 1, "s": 1}):
        assert v.check(ToolCall("t", args)) == fresh(ToolCall("t", args)), args


def test_arguments_json_cannot_spell_are_checked_every_time_not_memoized():
    """``ToolCall.key`` stringifies what JSON cannot spell, so a date and its ISO string share a key;
    their answers differ, so such calls bypass the memo."""
    v = SchemaValidator({"t": SCHEMA})
    day = datetime.date(2024, 5, 1)
    assert v.check(ToolCall("t", {"n": 1, "s": day.isoformat()})) is None
    assert v.check(ToolCall("t", {"n": 1, "s": day})) == fresh(ToolCall("t", {"n": 1, "s": day})) is not None


def test_the_memo_is_bounded():
    v = SchemaValidator({"t": SCHEMA}, memo_size=8)
    for n in range(100):
        v.check(ToolCall("t", {"n": n}))
    assert len(v._memo) <= 8
    assert v.check(ToolCall("t", {"n": 99})) is None and v.check(ToolCall("t", {"n": "x"})) is not None


def test_long_arguments_are_checked_every_time_so_clients_cannot_fill_the_memo():
    v = SchemaValidator({"t": SCHEMA}, memo_size=8)
    for n in range(20):
        assert v.check(ToolCall("t", {"n": n, "s": "x" * 2000})) is None
    assert v._memo == {}
    assert v.check(ToolCall("t", {"n": 1, "s": 5})) is not None and len(v._memo) == 1
