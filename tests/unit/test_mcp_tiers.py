"""MCP tool annotations as tiers (tools/mcp.py, tools/tiers.py), without a server: the toolbox keeps all
four hints, trusts them only for a trusted server, and the operator's overrides win, critical included."""

from __future__ import annotations

import pytest
from mcp.types import Tool, ToolAnnotations

from specagent_ray.protocol.types import Effect, Tier
from specagent_ray.tools.mcp import McpTool, McpToolbox, effect_of

R, W, C = Tier.READ, Tier.WRITE, Tier.CRITICAL
SCHEMA = {"type": "object", "properties": {}}


def tool(name: str, **hints: bool) -> Tool:
    return Tool(name=name, input_schema=SCHEMA, annotations=ToolAnnotations(**hints) if hints else None)


def described(t: Tool, trusted: bool = True, overrides: dict[str, str] | None = None) -> McpTool:
    return McpToolbox(command=["unused"], trusted=trusted, overrides=overrides)._describe(t)


@pytest.mark.parametrize("t, trusted, tier", [
    (tool("peek", read_only_hint=True), True, R),
    (tool("drop", read_only_hint=False, destructive_hint=True), True, C),
    (tool("add", read_only_hint=False, destructive_hint=False, open_world_hint=True), True, W),
    (tool("bare"), True, C),  # unannotated: the spec's defaults (destructive)
    (tool("drop", read_only_hint=False, destructive_hint=True), False, W),  # untrusted: hints ignored
    (tool("peek", read_only_hint=True), False, W),
])
def test_annotations_give_the_tier_and_the_effect_agrees(t, trusted, tier):
    got = described(t, trusted)
    assert got.tier is tier and got.effect is tier.effect


def test_all_four_hints_are_kept_whatever_the_decision():
    got = described(tool("x", read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                          open_world_hint=False), trusted=False)
    assert (got.read_only_hint, got.destructive_hint, got.idempotent_hint, got.open_world_hint) == (
        False, False, True, False)


def test_overrides_win_both_ways_critical_included():
    assert described(tool("peek", read_only_hint=True), overrides={"peek": "critical"}).tier is C
    assert described(tool("drop", destructive_hint=True), overrides={"drop": "write"}).tier is W
    assert effect_of("drop", None, False, {"drop": "critical"}) is Effect.WRITE


def test_an_unknown_override_value_is_refused():
    with pytest.raises(ValueError, match="critical"):
        McpToolbox(command=["unused"], overrides={"t": "dangerous"})


def test_a_tool_built_without_a_tier_takes_it_from_its_effect():
    assert McpTool("t", SCHEMA, Effect.READ, True).tier is R
    with pytest.raises(ValueError):
        McpTool("t", SCHEMA, Effect.READ, True, tier=C)
