"""Tiers in the served config and the Catalog: strict operator config, today's profiles still valid,
overrides that win both ways, rules that only raise, and a Catalog whose effects agree with its tiers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from specagent_ray.protocol.types import Effect, Tier, ToolCall
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.core.config import AppConfig, BfclSource, ClientSource, McpSource, Tau2Source
from specagent_ray.tools.tiers import TierTable

R, W, C = Tier.READ, Tier.WRITE, Tier.CRITICAL
PROFILES = Path(__file__).parents[4] / "deployments"
SCHEMAS = {"lookup": {"type": "object"}, "refund": {"type": "object"}, "wipe": {"type": "object"}}
BASE = TierTable({"lookup": R, "refund": W, "wipe": C})
MCP = {"kind": "mcp", "command": ["bank-server"]}


@pytest.mark.parametrize("profile", sorted(PROFILES.glob("*.yaml")))
def test_every_shipped_profile_is_still_valid(profile):
    raw = yaml.safe_load(profile.read_text())
    for app in raw.get("applications", []):
        if "tool_sources" in (app.get("args") or {}):
            AppConfig.model_validate(app["args"])


@pytest.mark.parametrize("kind", [ClientSource, McpSource])
def test_todays_read_write_overrides_stay_valid(kind):
    extra = {"command": ["x"]} if kind is McpSource else {}
    source = kind(overrides={"a": "read", "b": "write", "c": "critical"}, **extra)
    assert source.overrides == {"a": "read", "b": "write", "c": "critical"}


@pytest.mark.parametrize("bad", [
    {"overrides": {"refund": "dangerous"}},
    {"tier_rules": [{"tool": "refund", "tier": "critical", "when": {"amount": {"gt": 500, "approx": 1}}}]},
    {"tier_rules": [{"tool": "refund", "tier": "critical", "when": {"amount": {}}}]},  # no condition at all
    {"tier_rules": [{"tool": "refund", "tier": "read"}]},  # a rule only raises: read would be a no-op
    {"tier_rules": [{"tool": "refund", "tier": "critical", "when": {"amount": {"gt": "500"}}}]},
    {"tier_rules": [{"tool": "refund", "tier": "critical", "when": {"amount": {"gt": True}}}]},
    {"tier_rules": [{"tool": "refund", "tier": "critical", "when": {"id": {"prefix": 5}}}]},
    {"tier_rules": [{"tool": "refund", "tier": "critical", "unless": {}}]},
    {"tier_rules": [{"tool": "refund", "tier": "critical", "when": {"amount": {"in_": [1]}}}]},  # "in" only
])
def test_tier_config_is_strict(bad):
    with pytest.raises(ValidationError):
        McpSource.model_validate({**MCP, **bad})


def test_a_rule_config_becomes_a_fail_closed_rule():
    source = McpSource.model_validate({**MCP, "overrides": {"lookup": "write"}, "tier_rules": [
        {"tool": "refund", "tier": "critical", "when": {"amount": {"gt": 500}, "currency": {"in": ["EUR", "USD"]}}}]})
    table = source.tier_table(BASE)
    assert table.tier(ToolCall("lookup", {})) is W  # the operator's word, here raising
    assert table.tier(ToolCall("refund", {"amount": "600", "currency": "EUR"})) is C
    assert table.tier(ToolCall("refund", {"amount": 600, "currency": "GBP"})) is W
    assert table.tier(ToolCall("refund", {"amount": 100, "currency": "EUR"})) is W


def test_an_override_may_lower_a_tier():
    assert McpSource(command=["x"], overrides={"wipe": "write"}).tier_table(BASE).tier(ToolCall("wipe", {})) is W


def test_overrides_and_rules_naming_tools_the_source_lacks_are_an_error():
    source = McpSource.model_validate({**MCP, "overrides": {"lookp": "read"},
                                       "tier_rules": [{"tool": "refnd", "tier": "critical"}]})
    with pytest.raises(ValueError, match="lookp, refnd"):
        source.tier_table(BASE, "bank")


def test_client_sources_name_tools_declared_per_session():
    source = ClientSource(overrides={"pay": "critical"})
    assert source.tier_table(BASE).tier(ToolCall("lookup", {})) is R  # no error: pay may come later
    assert source.tier_table(TierTable({"pay": W})).tier(ToolCall("pay", {})) is C


def test_tau2_overrides_are_checked_against_the_domain_at_load():
    pytest.importorskip("tau2")
    Tau2Source(domain="retail", overrides={"cancel_pending_order": "write"})
    with pytest.raises(ValidationError, match="cancel_reservation"):
        Tau2Source(domain="retail", overrides={"cancel_reservation": "critical"})  # an airline tool


def test_bfcl_overrides_are_checked_against_bfcl_functions_at_load():
    BfclSource(overrides={"rm": "critical"})
    with pytest.raises(ValidationError, match="rm_rf"):
        BfclSource(tier_rules=[{"tool": "rm_rf", "tier": "critical"}])


def test_catalog_tiers_effects_and_listing_agree():
    catalog = Catalog.tiered(SCHEMAS, BASE.overridden({}, McpSource.model_validate({**MCP, "tier_rules": [
        {"tool": "lookup", "tier": "critical", "when": {"id": {"eq": "root"}}}]}).tier_table(BASE).rules))
    assert catalog.effects == {"lookup": Effect.READ, "refund": Effect.WRITE, "wipe": Effect.WRITE}
    assert catalog.tier(ToolCall("wipe", {})) is C and catalog.tier(ToolCall("nope", {})) is W
    # a rule raises one call of a read tool: that call is classified as a write (staged, with an intent)
    assert catalog.classify(ToolCall("lookup", {"id": "root"})) is Effect.WRITE
    assert catalog.classify(ToolCall("lookup", {"id": "alice"})) is Effect.READ
    listed = {t["name"]: t["annotations"] for t in catalog.listing()}
    assert listed == {"lookup": {"read_only": True, "tier": "read"}, "refund": {"read_only": False, "tier": "write"},
                      "wipe": {"read_only": False, "tier": "critical"}}


def test_a_catalog_without_tiers_takes_them_from_its_effects():
    catalog = Catalog(SCHEMAS, {"lookup": Effect.READ, "refund": Effect.WRITE})
    assert [catalog.tier(ToolCall(n, {})) for n in ("lookup", "refund", "wipe")] == [R, W, W]


def test_a_catalog_whose_effects_and_tiers_disagree_is_refused():
    with pytest.raises(ValueError, match="lookup"):
        Catalog(SCHEMAS, {"lookup": Effect.READ}, tiers=TierTable({"lookup": W}))
    with pytest.raises(ValueError, match="refund"):
        Catalog(SCHEMAS, {"refund": Effect.READ}, tiers=TierTable({"refund": C}))


def test_narrowed_and_joined_catalogs_keep_their_tiers():
    catalog = Catalog.tiered(SCHEMAS, BASE)
    assert catalog.narrowed({"wipe"}).tier(ToolCall("wipe", {})) is C
    assert catalog.narrowed({"wipe"}).tier(ToolCall("lookup", {})) is W  # gone: unknown
    joined = Catalog.tiered({"lookup": {}}, TierTable({"lookup": R})).joined(
        Catalog.tiered({"pay": {}}, TierTable({"pay": C})), "bank")
    assert joined.tier(ToolCall("pay", {})) is C and joined.tier(ToolCall("lookup", {})) is R


def test_a_catalog_under_its_sources_overrides_and_rules():
    """What a served session's catalog becomes: an override lowers a read-only MCP tool's effect to a
    write, a critical override keeps it a write, and a rule raises some calls."""
    plain = Catalog(SCHEMAS, {"lookup": Effect.READ, "refund": Effect.WRITE, "wipe": Effect.WRITE})
    source = McpSource.model_validate({**MCP, "overrides": {"lookup": "write", "wipe": "critical"},
                                       "tier_rules": [{"tool": "refund", "tier": "critical",
                                                       "when": {"amount": {"ge": 1000}}}]})
    catalog = plain.of_source(source, "bank")
    assert catalog.effects == {"lookup": Effect.WRITE, "refund": Effect.WRITE, "wipe": Effect.WRITE}
    assert catalog.tier(ToolCall("wipe", {})) is C and catalog.tier(ToolCall("refund", {"amount": "1e3"})) is C
    assert catalog.tier(ToolCall("refund", {"amount": 999})) is W
    with pytest.raises(ValueError, match="'bank'.*lookp"):
        plain.of_source(McpSource(command=["x"], overrides={"lookp": "read"}), "bank")
