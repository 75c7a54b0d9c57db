"""Risk tiers: where they come from (tools/tiers.py). Rules only raise; spelling an argument differently
must never dodge a raising rule; unknown tools are never READ; annotations follow MCP's ToolAnnotations."""

from __future__ import annotations

import math

import pytest

from specagent_ray.protocol.interfaces import TieredTools
from specagent_ray.protocol.types import Effect, Observation, Tier, ToolCall
from specagent_ray.tools.tiers import Predicate, Tiered, TierRule, TierTable, tier_from_annotations, tool_tier

R, W, C = Tier.READ, Tier.WRITE, Tier.CRITICAL
REFUND_ABOVE_500 = TierRule("refund", C, (Predicate("amount", "gt", 500),))
TABLE = TierTable({"lookup": R, "refund": W, "wipe": C}, [REFUND_ABOVE_500])


def refund(amount: object) -> ToolCall:
    return ToolCall("refund", {"amount": amount})


def test_tool_tiers_and_unknown_tools_are_write():
    assert TABLE.tier(ToolCall("lookup", {})) is R
    assert TABLE.tier(ToolCall("wipe", {})) is C
    assert TABLE.tier(ToolCall("drain_account", {})) is W  # unknown: WRITE, never READ
    assert TABLE.effect("drain_account") is Effect.WRITE and TABLE.effect("lookup") is Effect.READ


def test_a_table_whose_default_is_read_is_refused():
    with pytest.raises(ValueError, match="default"):
        TierTable({}, [], default=R)


def test_a_rule_raises_only_when_its_predicate_holds():
    assert TABLE.tier(refund(100)) is W
    assert TABLE.tier(refund("100")) is W and TABLE.tier(refund(" 99.5 ")) is W  # numeric strings: numbers
    assert TABLE.tier(refund(500)) is W  # gt, not ge
    assert TABLE.tier(refund(501)) is C


def test_rules_never_lower_a_tier():
    table = TierTable({"wipe": C}, [TierRule("wipe", R)])
    assert table.tier(ToolCall("wipe", {})) is C


@pytest.mark.parametrize("amount", ["600", " 600 ", "6e2", "600.0", 600.5, "1_000", math.inf, "inf"])
def test_numbers_spelled_otherwise_compare_as_numbers(amount):
    assert TABLE.tier(refund(amount)) is C


@pytest.mark.parametrize("amount", ["1,000", "600 USD", "0x258", None, [600], {"value": 600}, True, math.nan, "nan"])
def test_an_uncomparable_value_applies_a_raising_rule(amount):
    """Fail-closed: what cannot be compared cannot dodge the rule (at most one extra check)."""
    assert TABLE.tier(refund(amount)) is C


def test_a_missing_argument_applies_a_raising_rule():
    assert TABLE.tier(ToolCall("refund", {})) is C
    assert TABLE.tier(ToolCall("refund", {"Amount": 100})) is C  # another spelling of the name is missing too


def test_a_decided_predicate_in_a_conjunction_still_excludes():
    rule = TierRule("pay", C, (Predicate("amount", "ge", 100), Predicate("method", "prefix", "gift_card")))
    table = TierTable({"pay": W}, [rule])
    assert table.tier(ToolCall("pay", {"amount": "150", "method": "gift_card_1"})) is C
    assert table.tier(ToolCall("pay", {"amount": 150, "method": "credit_card_1"})) is W
    assert table.tier(ToolCall("pay", {"amount": 50, "method": "gift_card_1"})) is W
    assert table.tier(ToolCall("pay", {"amount": 50, "method": 7})) is W  # amount decides: no
    assert table.tier(ToolCall("pay", {"amount": "lots", "method": "gift_card_1"})) is C


@pytest.mark.parametrize("op, value, arg, holds", [
    ("eq", "suspend", "suspend", True), ("eq", "suspend", "resume", False), ("eq", 5, "5", True),
    ("eq", 5, 5.0, True), ("eq", "x", 5, True),  # uncomparable: holds
    ("in", ["a", "b"], "b", True), ("in", ["a", "b"], "c", False), ("in", [1, 2], "2", True),
    ("ge", 10, 10, True), ("lt", 10, 9.5, True), ("le", 10, "11", False),
    ("prefix", "gift_", "gift_card_1", True), ("prefix", "gift_", "credit_1", False), ("prefix", "gift_", 3, True),
])
def test_each_operator(op, value, arg, holds):
    assert Predicate("x", op, value).holds({"x": arg}) is holds


@pytest.mark.parametrize("op, value", [("gt", "500"), ("gt", True), ("in", "ab"), ("prefix", 5), ("like", 1),
                                       ("gt", math.nan)])
def test_malformed_predicates_are_refused(op, value):
    with pytest.raises(ValueError):
        Predicate("x", op, value)


def test_operator_overrides_win_both_ways_and_rules_still_raise():
    table = TABLE.overridden({"lookup": W, "wipe": W}, [TierRule("lookup", C, (Predicate("id", "eq", "root"),))])
    assert table.tier(ToolCall("lookup", {"id": "alice"})) is W  # a read marked as write is staged
    assert table.tier(ToolCall("lookup", {"id": "root"})) is C
    assert table.tier(ToolCall("wipe", {})) is W  # the operator lowered it
    assert table.tier(refund(900)) is C  # the table's own rules are kept


def test_overrides_and_rules_naming_unknown_tools_are_named():
    assert TABLE.unknown({"lookp": W}, [TierRule("refnd", C)]) == ["lookp", "refnd"]
    assert TABLE.unknown({"lookup": W}, [REFUND_ABOVE_500]) == []


def test_narrowed_and_joined_tables():
    only = TABLE.only({"refund"})
    assert only.tier(ToolCall("lookup", {})) is W and only.tier(refund(900)) is C
    joined = TierTable({"a": R}).joined(TABLE)
    assert joined.tier(ToolCall("a", {})) is R and joined.tier(refund(900)) is C


@pytest.mark.parametrize("read_only, destructive, idempotent, open_world, trusted, tier", [
    (True, None, None, None, True, R),
    (True, True, None, None, True, R),  # destructiveHint means nothing for a read-only tool (spec)
    (False, False, None, None, True, W),  # explicitly non-destructive (additive) update
    (None, False, True, True, True, W),  # openWorld and idempotent do not change a tier
    (False, True, None, None, True, C),
    (None, None, None, None, True, C),  # unannotated: the spec's defaults, destructive
    (False, None, None, False, True, C),
    (True, None, None, None, False, W),  # an untrusted server's hints are ignored, both ways
    (False, True, None, None, False, W),
    (None, None, None, None, False, W),
])
def test_tier_from_annotations(read_only, destructive, idempotent, open_world, trusted, tier):
    assert tier_from_annotations(read_only, destructive, idempotent, open_world, trusted) is tier


def test_an_operator_override_wins_over_annotations():
    assert tool_tier("t", (True, None, None, None), True, {"t": "critical"}) is C
    assert tool_tier("t", (False, True, None, None), True, {"t": "write"}) is W
    assert tool_tier("t", (None, None, None, None), False, {"t": "read"}) is R
    assert tool_tier("t", (None, None, None, None), True, {"other": "read"}) is C


class Plain:
    """A tool adapter without tiers."""

    def classify(self, call: ToolCall) -> Effect:
        return Effect.READ if call.name == "lookup" else Effect.WRITE

    def validate(self, call: ToolCall) -> str | None:
        return None if call.name != "bad" else "bad"

    async def execute(self, call: ToolCall) -> Observation:
        return Observation(f"ran {call.name}")

    extra = "kept"


async def test_tiered_wraps_any_adapter_and_only_the_wrapper_is_tiered():
    plain = Plain()
    tiered = Tiered(plain, TierTable({"lookup": R, "refund": W}, [REFUND_ABOVE_500]))
    assert not isinstance(plain, TieredTools) and isinstance(tiered, TieredTools)
    assert tiered.tier(refund(900)) is C and tiered.classify(refund(900)) is Effect.WRITE
    assert tiered.validate(ToolCall("bad", {})) == "bad"
    assert (await tiered.execute(ToolCall("lookup", {}))).content == "ran lookup"
    assert tiered.extra == "kept"  # anything else is the adapter's


def test_tiered_never_lowers_what_the_adapter_says():
    tiered = Tiered(Plain(), TierTable({"refund": R, "lookup": R}))
    assert tiered.tier(refund(1)) is W and tiered.classify(refund(1)) is Effect.WRITE
