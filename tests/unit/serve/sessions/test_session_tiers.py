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


def test_a_write_intent_names_its_author_weak_staged_mid_repair_or_strong():
    """After a restart the intent's author is what the committed step says: the mid's fused repair stays the mid's."""
    from specagent_ray.protocol.types import Action, Event, Task
    from specagent_ray.serve.core.api import CreateSession
    from specagent_ray.serve.sessions.session import Session

    s = Session("s1", CreateSession(tool_source="x", user="client", message="hi"), Task("0", "hi"),
                log=lambda sid, rec, data: None)
    staged, mid_fix, strong_fix = (Action.tool("refund", id=i) for i in ("a", "b", "c"))
    s.event(Event("staged", "", staged))
    assert s.intents[s.intent(staged.call)].author == "weak"
    s.event(Event("rejected", "no", staged))
    s.event(Event("fused_repair", "b", mid_fix, "mid"))
    assert s.intents[s.intent(mid_fix.call)].author == "mid"
    assert s.intents[s.intent(strong_fix.call)].author == "strong"


def test_an_approval_rule_can_name_tiers_as_well_as_tools():
    from specagent_ray.serve.core.api import Approval

    every, critical = Approval(), Approval(tiers=["critical"])
    assert every.needed("refund", "write") and every.needed("wipe", "critical")
    assert critical.needed("wipe", "critical") and not critical.needed("refund", "write")
    both = Approval(tools=["refund"], tiers=["critical"], exempt=["wipe"])
    assert both.needed("refund", "write") and not both.needed("wipe", "critical")
    assert both.needed("other", "critical") and not both.needed("other", "write")


async def test_a_critical_write_waits_for_the_client_and_a_plain_one_does_not():
    import asyncio

    from specagent_ray.protocol.types import Observation, Task
    from specagent_ray.serve.core.api import Approval, CreateSession
    from specagent_ray.serve.sessions.session import Session

    request = CreateSession(tool_source="x", user="client", message="hi", approval=Approval(tiers=["critical"]))
    s = Session("s1", request, Task("0", "hi"), log=lambda sid, rec, data: None)
    ran = []

    async def run(call, key):
        ran.append(call.name)
        return Observation("done")

    async def durable():
        return None

    t = SessionTools(s, CATALOG, run, durable)
    await t.execute(ToolCall("refund", {}))
    assert ran == ["refund"] and s.approvals.open_for(ToolCall("refund", {})) is None
    waiting = asyncio.get_running_loop().create_task(t.execute(ToolCall("wipe", {})))
    await asyncio.sleep(0.01)
    assert ran == ["refund"] and s.approvals.open_for(ToolCall("wipe", {})) is not None
    waiting.cancel()
