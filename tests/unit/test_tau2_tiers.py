"""tau2 domains' risk tiers (tools/tau2.py): every tool they name exists in its domain, money movement and
cancellations are CRITICAL, reads stay READ, and the plain adapter stays untiered unless asked."""

from __future__ import annotations

import pytest

pytest.importorskip("tau2")

from specagent_ray.protocol.interfaces import TieredTools
from specagent_ray.protocol.types import Effect, Tier, ToolCall
from specagent_ray.tools.tau2 import CRITICAL_TOOLS, DOMAINS, TIER_RULES, Tau2Domain, Tau2Tools, tool_names

C, W, R = Tier.CRITICAL, Tier.WRITE, Tier.READ


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_tool_a_tier_table_names_exists_in_its_domain(domain):
    names = tool_names(domain)
    assert names, domain
    named = set(CRITICAL_TOOLS[domain]) | {r.tool for r in TIER_RULES[domain]}
    assert named - names == set()
    assert all(reason.strip() for reason in CRITICAL_TOOLS[domain].values())  # each says why
    d = Tau2Domain.load(domain)
    assert {n: d.tiers().effect(n) for n in names} == {n: d.effect(n) for n in names}  # tau2's own tags agree


@pytest.mark.parametrize("domain", DOMAINS)
def test_tool_names_are_the_loaded_domains_tools(domain):
    assert tool_names(domain) == set(Tau2Domain.load(domain).tool_schemas)


@pytest.mark.parametrize("domain, tool, tier", [
    ("airline", "cancel_reservation", C), ("airline", "book_reservation", C), ("airline", "send_certificate", C),
    ("airline", "update_reservation_flights", C), ("airline", "update_reservation_passengers", W),
    ("airline", "get_reservation_details", R), ("airline", "calculate", R),
    ("retail", "return_delivered_order_items", C), ("retail", "exchange_delivered_order_items", C),
    ("retail", "cancel_pending_order", C), ("retail", "modify_user_address", W), ("retail", "get_order_details", R),
    ("telecom", "suspend_line", C), ("telecom", "send_payment_request", C), ("telecom", "resume_line", W),
    ("telecom", "get_customer_by_id", R), ("telecom", "transfer_to_human_agents", W),
])
def test_domain_tiers(domain, tool, tier):
    d = Tau2Domain.load(domain)
    table = d.tiers()
    assert table.tool(tool) is tier and table.tier(ToolCall(tool, {})) is tier
    assert table.effect(tool) is d.effect(tool)  # tiers never disagree with tau2's own READ/WRITE tags


@pytest.mark.parametrize("call, tier", [
    (ToolCall("update_reservation_baggages", {"nonfree_baggages": 0}), W),
    (ToolCall("update_reservation_baggages", {"nonfree_baggages": 2}), C),  # pays for bags
    (ToolCall("update_reservation_baggages", {"nonfree_baggages": "2"}), C),
    (ToolCall("update_reservation_baggages", {}), C),  # cannot tell: fail-closed
])
def test_airline_paid_baggage_is_critical(call, tier):
    assert Tau2Domain.load("airline").tiers().tier(call) is tier


@pytest.mark.parametrize("gb, tier", [(1, W), (2, W), (2.5, C), ("10", C)])
def test_telecom_large_data_refuels_are_critical(gb, tier):
    call = ToolCall("refuel_data", {"customer_id": "C1", "line_id": "L1", "gb_amount": gb})
    assert Tau2Domain.load("telecom").tiers().tier(call) is tier


def test_the_adapter_is_untiered_unless_asked():
    domain = Tau2Domain.load("airline")
    plain = Tau2Tools(domain)
    assert not isinstance(plain, TieredTools)
    tiered = plain.with_tiers()
    assert isinstance(tiered, TieredTools) and tiered.adapter is plain
    call = ToolCall("cancel_reservation", {"reservation_id": "ZFA04Y"})
    assert tiered.tier(call) is C and tiered.classify(call) is Effect.WRITE and plain.classify(call) is Effect.WRITE
    assert tiered.validate(call) is None and tiered.domain is domain
