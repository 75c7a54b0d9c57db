"""Served sessions give a critical call its second check, as the profile's ``critical`` section says.

A tau2 source with ``domain_tiers`` makes its domain's money-moving tools CRITICAL (tools/tau2.py). In a
served session on the simulated engines, each weak critical call that runs was first confirmed by the
second check (protocol/review.py), and the check is the profile's: ``agree`` costs one strong decode
(purpose ``confirm``) per checked block, ``verdicts`` with k costs k - 1 more strong verify calls and no
decode. Counted from the session's own ledger and records, never from the config it was given.
"""

from __future__ import annotations

import pytest

from specagent_ray.protocol.types import Tier, ToolCall
from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.config import AppConfig, CoordinatorConfig, SimEngines
from specagent_ray.serve.sessions.session import Session
from specagent_ray.testing.served import FAST, finished, sim_coordinator
from specagent_ray.tools.tau2 import Tau2Domain

TASKS = ("2", "3")  # task 2's gold path sends a certificate (critical); task 3's writes are plain


def config(critical: dict | None, domain_tiers: bool = True) -> AppConfig:
    airline = {"kind": "tau2", "domain": "airline", "domain_tiers": domain_tiers}
    return AppConfig(engines=SimEngines(latency=FAST), tool_sources={"airline": airline},
                     coordinator=CoordinatorConfig(lease_s=1.0, lease_skew_s=0.05),
                     **({"critical": critical} if critical is not None else {}))


async def served(tmp_path, cfg: AppConfig) -> list[Session]:
    coord = sim_coordinator(tmp_path / "log", cfg)
    await coord.start()
    out = []
    for task in TASKS:
        req = CreateSession(tool_source="airline", task_id=task, user="simulated")
        out.append(await finished(coord, (await coord.create(req))["session_id"]))
    assert all(s.status == "done" for s in out), [s.error for s in out]
    return out


def count(s: Session, kind: str) -> int:
    return sum(r["t"] == kind for r in s.events)


def strong_calls(s: Session, purpose: str) -> int:
    return sum(c.role == "strong" and c.purpose == purpose for c in s.ledger.calls)


@pytest.mark.parametrize("critical, extra_verdicts, confirms", [
    (None, 0, 1),  # the default: agree, one strong decode per checked block
    ({"mode": "agree"}, 0, 1),
    ({"mode": "verdicts", "k": 3}, 2, 0),  # two more verdicts per checked block, no decode
    ({"mode": "verdicts", "k": 2}, 1, 0),
])
async def test_the_profiles_critical_check_is_the_one_a_served_session_runs(tmp_path, critical, extra_verdicts,
                                                                           confirms):
    sessions = await served(tmp_path, config(critical))
    assert sum(count(s, "second_check") for s in sessions) >= 1  # a critical call was accepted and checked
    for s in sessions:
        checks = count(s, "second_check")
        assert strong_calls(s, "confirm") == confirms * checks
        # one verdict per reviewed block (each ends in an ``accepted`` record), and the check's own
        assert strong_calls(s, "verify") == count(s, "accepted") + extra_verdicts * checks


async def test_every_weak_critical_write_that_runs_was_confirmed_by_the_second_check(tmp_path):
    """From the records alone: a weak write's intent follows its block's ``staged`` record; where the call is
    critical by the domain's table, that block has a ``second_check`` record that confirmed it."""
    tiers = Tau2Domain.load("airline").tiers()
    ran = 0
    for s in await served(tmp_path, config(None)):
        block: list[dict] = []
        for r in s.events:
            block = [r] if r["t"] == "staged" else [*block, r]
            if r["t"] != "intent" or r["author"] != "weak":
                continue
            call = ToolCall(r["call"]["name"], r["call"]["arguments"])
            if tiers.tier(call) is not Tier.CRITICAL:
                continue
            ran += 1
            checks = [x for x in block if x["t"] == "second_check"]
            assert [x["detail"] for x in checks] == ["1/1 confirmed"], (call, checks)
            assert checks[0]["action"]["name"] == call.name and checks[0]["action"]["arguments"] == call.arguments
    assert ran >= 1  # a weak critical write ran: the check above was not vacuous


async def test_without_domain_tiers_no_call_is_critical_and_nothing_is_checked_twice(tmp_path):
    sessions = await served(tmp_path, config({"mode": "verdicts", "k": 3}, domain_tiers=False))
    for s in sessions:
        assert count(s, "second_check") == 0 and strong_calls(s, "confirm") == 0
        assert strong_calls(s, "verify") == count(s, "accepted")
