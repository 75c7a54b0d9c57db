"""A served session's tool adapter sees tiers (serve/sessions/runner.py ``SessionTools``): its tier and its
classification come from the session's Catalog, so a call a rule raises is staged and runs as a write."""

from __future__ import annotations

from specagent_ray.protocol.interfaces import TieredTools
from specagent_ray.protocol.types import Effect, Tier, ToolCall
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.sessions.runner import SessionTools
from specagent_ray.tools.tiers import Predicate, TierRule, TierTable

TABLE = TierTable({"lookup": Tier.READ, "refund": Tier.WRITE, "wipe": Tier.CRITICAL},
                  [TierRule("lookup", Tier.CRITICAL, (Predicate("id", "eq", "root"),))])
CATALOG = Catalog.tiered({n: {"type": "object"} for n in TABLE.tools}, TABLE)


def tools(catalog: Catalog = CATALOG) -> SessionTools:
    return SessionTools(None, catalog, None, None)  # type: ignore[arg-type]  # tier and classify need no session


def test_session_tools_are_tiered_from_the_catalog():
    t = tools()
    assert isinstance(t, TieredTools)
    assert t.tier(ToolCall("wipe", {})) is Tier.CRITICAL and t.tier(ToolCall("refund", {})) is Tier.WRITE
    assert t.tier(ToolCall("unknown", {})) is Tier.WRITE


def test_a_read_a_rule_raises_is_classified_as_a_write():
    """execute() takes the write path (durable intent, idempotency key) exactly when classify says WRITE."""
    t = tools()
    assert t.classify(ToolCall("lookup", {"id": "root"})) is Effect.WRITE
    assert t.classify(ToolCall("lookup", {"id": "alice"})) is Effect.READ


def test_a_catalog_without_tiers_gives_todays_tiers():
    t = tools(Catalog({"lookup": {}, "pay": {}}, {"lookup": Effect.READ, "pay": Effect.WRITE}))
    assert [t.tier(ToolCall(n, {})) for n in ("lookup", "pay")] == [Tier.READ, Tier.WRITE]
