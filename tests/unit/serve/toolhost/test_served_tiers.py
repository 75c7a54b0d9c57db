"""A served session's catalog carries its source's tiers: a tau2 domain's table, a trusted MCP server's
annotations, then the source's overrides and rules. A rule or override naming a tool the server no longer
has is a 409, never a silently different tier."""

from __future__ import annotations

import pytest

from specagent_ray.protocol.types import Tier, ToolCall
from specagent_ray.serve.core.api import ClientTool, CreateSession
from specagent_ray.serve.core.config import AppConfig, SimEngines
from specagent_ray.serve.core.errors import Conflict
from specagent_ray.serve.toolhost.sources import ToolSources


class Host:
    """The tool host's ``describe`` of an MCP source, as the MCP toolbox decided it."""

    def __init__(self, tools):
        self.tools = tools

    async def describe(self, source):
        return self.tools


def sources(tool_sources, host=None) -> ToolSources:
    cfg = AppConfig(engines=SimEngines(), tool_sources=tool_sources)
    return ToolSources(cfg, host)  # type: ignore[arg-type]


async def catalog(s: ToolSources, name: str, **req):
    return await s.catalog(CreateSession(tool_source=name, user="client", message="hi", **req),
                           s.cfg.tool_sources[name])


async def test_a_tau2_source_serves_its_domain_tiers_when_asked_and_the_operators_overrides():
    s = sources({"airline": {"kind": "tau2", "domain": "airline", "domain_tiers": True},
                 "plain": {"kind": "tau2", "domain": "airline"},
                 "calm": {"kind": "tau2", "domain": "airline", "domain_tiers": True,
                          "overrides": {"cancel_reservation": "write"},
                          "tier_rules": [{"tool": "update_reservation_passengers", "tier": "critical"}]}})
    air = await catalog(s, "airline", task_id="0")
    assert air.tier(ToolCall("cancel_reservation", {"reservation_id": "X"})) is Tier.CRITICAL
    assert air.tier(ToolCall("get_user_details", {"user_id": "u"})) is Tier.READ
    plain = await catalog(s, "plain", task_id="0")  # today's: tau2's read/write tags only
    assert plain.tier(ToolCall("cancel_reservation", {"reservation_id": "X"})) is Tier.WRITE
    calm = await catalog(s, "calm", task_id="0")
    assert calm.tier(ToolCall("cancel_reservation", {"reservation_id": "X"})) is Tier.WRITE
    assert calm.tier(ToolCall("update_reservation_passengers", {})) is Tier.CRITICAL


MCP_TOOLS = {"search": {"parameters": {"type": "object"}, "effect": "read", "tier": "read"},
             "wire": {"parameters": {"type": "object"}, "effect": "write", "tier": "critical"},
             "note": {"parameters": {"type": "object"}, "effect": "write", "tier": "write"}}


async def test_an_mcp_source_serves_the_hosts_tiers_and_its_rules():
    s = sources({"bank": {"kind": "mcp", "command": ["x"], "trusted": True,
                          "tier_rules": [{"tool": "note", "tier": "critical", "when": {"text": {"prefix": "!"}}}]}},
                Host(MCP_TOOLS))
    c = await catalog(s, "bank")
    assert [c.tier(ToolCall(n, {})) for n in ("search", "wire")] == [Tier.READ, Tier.CRITICAL]
    assert c.tier(ToolCall("note", {"text": "!now"})) is Tier.CRITICAL
    assert c.tier(ToolCall("note", {"text": "later"})) is Tier.WRITE


async def test_a_rule_naming_a_tool_the_server_dropped_is_a_409():
    s = sources({"bank": {"kind": "mcp", "command": ["x"], "overrides": {"gone": "read"}}}, Host(MCP_TOOLS))
    with pytest.raises(Conflict, match="gone"):
        await catalog(s, "bank")


async def test_client_tools_take_the_sources_overrides():
    s = sources({"app": {"kind": "client", "overrides": {"pay": "critical"}}})
    tools = [ClientTool(name="pay", parameters={"type": "object"}), ClientTool(name="look", parameters={},
                                                                                read_only=True)]
    c = await catalog(s, "app", client_tools=tools)
    assert c.tier(ToolCall("pay", {})) is Tier.CRITICAL and c.tier(ToolCall("look", {})) is Tier.WRITE
