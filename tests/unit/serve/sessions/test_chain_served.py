"""Served sessions with the three-tier chain: a simulated mid engine (``engines.mid_replicas``) reviews each block
first, its calls are the ledger's role ``mid`` (model-call records, usage, the resource report, the Responses
API's usage), and the profile's ``chain`` rule decides what it settles; without a mid nothing changes."""

from __future__ import annotations


import pytest

from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.config import (
    AppConfig,
    CoordinatorConfig,
    SimEngines,
)
from specagent_ray.serve.engines.batch_wire import SimRequest
from specagent_ray.serve.engines.engine_client import SimEngineClient
from specagent_ray.serve.engines.sim_engine import SimEngine
from specagent_ray.serve.responses.items import usage
from specagent_ray.serve.sessions.coordinator import Coordinator
from specagent_ray.serve.sessions.reports import resource_report, usage_by_role
from specagent_ray.serve.sessions.session import Session
from specagent_ray.serve.sessions.usage import tenant_usage
from specagent_ray.testing.served import FAST, finished, sim_coordinator

HARDWARE = {"strong_model": "qwen3.5-397b-a17b", "strong_gpus": 16, "weak_model": "qwen3-4b", "weak_gpus": 1,
            "gpu": "h20", "mid_model": "qwen3-32b", "mid_gpus": 2}


def config(mid: int, chain: dict | None = None, domain_tiers: bool = False) -> AppConfig:
    airline = {"kind": "tau2", "domain": "airline", **({"domain_tiers": True} if domain_tiers else {})}
    return AppConfig(engines=SimEngines(latency=FAST, mid_replicas=mid), hardware=HARDWARE,
                     coordinator=CoordinatorConfig(lease_s=1.0, lease_skew_s=0.05),
                     tool_sources={"airline": airline}, **({"chain": chain} if chain is not None else {}))


def coordinator(tmp_path, cfg: AppConfig) -> Coordinator:
    return sim_coordinator(tmp_path / "log", cfg)


async def served(tmp_path, cfg: AppConfig, tasks=("0", "1", "2")) -> list[Session]:
    coord = coordinator(tmp_path, cfg)
    await coord.start()
    out = []
    for task in tasks:
        req = CreateSession(tool_source="airline", task_id=task, user="simulated")
        out.append(await finished(coord, (await coord.create(req))["session_id"]))
    return out


def kinds(s: Session) -> set[str]:
    return {r["t"] for r in s.events}


def logged_roles(s: Session) -> set[str]:
    return {c["role"] for r in s.events if r["t"] in ("commit", "calls") for c in r["calls"]}


async def test_a_served_session_with_a_mid_engine_runs_the_chain_and_reports_the_mids_calls(tmp_path):
    cfg = config(1)
    sessions = await served(tmp_path, cfg)
    for s in sessions:
        assert s.status == "done", s.error
        assert "mid" in logged_roles(s) and "mid" in {c.role for c in s.ledger.calls}
        assert all(c.purpose == "verify" for c in s.ledger.calls if c.role == "mid")
        assert kinds(s) & {"settled_by_mid", "escalated"}
        mid = usage_by_role(s.ledger)["mid"]  # the trajectory's usage, per role
        assert mid["calls"] == sum(c.role == "mid" for c in s.ledger.calls) > 0 and mid["prompt_tokens"] > 0
        report = resource_report(s.ledger, cfg.hardware)  # priced on hardware.mid_model
        assert report["tokens"]["mid"]["model"] == "qwen3-32b"
        turn = usage(s.events)["speculation"]["by_model"]  # the Responses API's usage
        assert turn["mid"]["input_tokens"] > 0
    day = tenant_usage([s.events for s in sessions], cfg.hardware)
    assert all(row["tokens"]["mid"]["calls"] > 0 for days in day.values() for row in days.values())


@pytest.mark.parametrize("chain, settled", [
    ({"escalate_below": 1.0}, False),  # no confidence reaches 1: every block escalates, the mid settles none
    ({"escalate_below": 0.0, "settles": ["write", "critical"]}, True),  # it settles what it accepts
])
async def test_the_profiles_chain_rule_decides_what_the_mid_settles(tmp_path, chain, settled):
    sessions = await served(tmp_path, config(1, chain), tasks=("0", "1"))
    assert all(s.status == "done" for s in sessions), [s.error for s in sessions]
    events = set().union(*(kinds(s) for s in sessions))
    assert ("settled_by_mid" in events) is settled
    reasons = [r["detail"] for s in sessions for r in s.events if r["t"] == "escalated"]
    if not settled:
        assert reasons and all(r.startswith("mid confidence") for r in reasons)
    else:
        assert not any(r.startswith("mid confidence") for r in reasons)


REMIT = "the staged step is critical, which the mid verifier may not settle"


def blocks(s: Session) -> list[tuple[dict, dict]]:
    """Each reviewed block of a session: its ``staged`` record and the chain's ruling on it (``settled_by_mid``
    with "j/n", or ``escalated`` with why), in order."""
    staged = [r for r in s.events if r["t"] == "staged"]
    rulings = [r for r in s.events if r["t"] in ("settled_by_mid", "escalated")]
    assert len(staged) == len(rulings), "a staged block without the chain's ruling, or one ruled twice"
    return list(zip(staged, rulings, strict=True))


async def test_a_block_whose_staged_step_is_critical_escalates_block_by_block(tmp_path):
    """The profile's chain rule settles writes only (the default): the mid may settle a critical block's
    rejection (the call never runs), never its acceptance. Judged per block, from the session's own records
    and the domain's tier table; a confident mid accept of a critical call is among them, so the remit check
    (``review.escalation``) is what decides it."""
    from specagent_ray.protocol.types import Tier, ToolCall
    from specagent_ray.tools.tau2 import Tau2Domain

    tiers = Tau2Domain.load("airline").tiers()
    sessions = await served(tmp_path, config(1, domain_tiers=True), tasks=("0", "1", "2"))
    assert all(s.status == "done" for s in sessions), [s.error for s in sessions]
    critical = []
    for s in sessions:
        for staged, ruling in blocks(s):
            action = staged["action"]
            if action["kind"] != "tool" or tiers.tier(ToolCall(action["name"], action["arguments"])) is not Tier.CRITICAL:
                continue
            critical.append(ruling)
            if ruling["t"] == "settled_by_mid":
                j, n = map(int, ruling["detail"].split("/"))
                assert j < n, f"the mid settled {action['name']} ({ruling['detail']}) outside its remit"
    assert any(r["t"] == "escalated" and r["detail"] == REMIT for r in critical), critical  # the check ran


async def test_without_a_mid_engine_no_session_runs_the_chain(tmp_path):
    cfg = config(0)
    (s,) = await served(tmp_path, cfg, tasks=("0",))
    assert s.status == "done", s.error
    assert "mid" not in logged_roles(s) and not kinds(s) & {"settled_by_mid", "escalated"}
    assert set(usage_by_role(s.ledger)) == {"weak", "strong"}
    assert "mid" not in usage(s.events)["speculation"]["by_model"]


async def test_only_specagent_sessions_run_the_chain(tmp_path):
    """specagent-exact's judge is the strong one's exact criterion: a semantic mid in front would change it."""
    cfg = config(1).model_copy(update={"methods": ("specagent", "specagent-exact")})
    coord = coordinator(tmp_path, cfg)
    await coord.start()
    req = CreateSession(tool_source="airline", task_id="0", user="simulated", method="specagent-exact")
    s = await finished(coord, (await coord.create(req))["session_id"])
    assert s.status == "done", s.error
    assert "mid" not in logged_roles(s) and not kinds(s) & {"settled_by_mid", "escalated"}


def test_the_sim_client_has_mid_lanes_only_with_a_mid_engine():
    cfg = config(2)
    engines = SimEngineClient(_Handle(), _Handle(), cfg.engines, cfg.coordinator, mid=_Handle())
    assert len(engines.batchers()["mid"]) == 2 and engines.queued() == 0
    plain = config(0)
    assert "mid" not in SimEngineClient(_Handle(), _Handle(), plain.engines, plain.coordinator).batchers()
    with pytest.raises(ValueError, match="mid_replicas is 0"):
        SimEngineClient(_Handle(), _Handle(), plain.engines, plain.coordinator, mid=_Handle())
    with pytest.raises(ValueError, match="handle missing"):
        SimEngineClient(_Handle(), _Handle(), cfg.engines, cfg.coordinator)


async def test_a_mid_replica_answers_verifies_with_the_mid_judge_and_drafts_nothing():
    cfg = config(1)
    engine = SimEngine("mid", cfg.engines, cfg.hardware)
    req = SimRequest("s1", "airline", "0", 0, (), (), None, "semantic", False)
    (review,) = await engine.verify_batch([req])
    assert 0.0 < review.confidence < 1.0  # the mid judge reports a confidence; the strong one's is 1.0
    (strong,) = await SimEngine("verifier", cfg.engines).verify_batch([req])
    assert strong.confidence == 1.0
    with pytest.raises(ValueError, match="mid replicas only verify"):
        await engine.propose_batch([req])


class _Handle:
    def routed(self, key):
        return self

    async def propose_batch(self, batch):
        raise AssertionError("not asked")

    verify_batch = propose_batch
