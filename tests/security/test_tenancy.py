"""Through the real HTTP gateway: a key is a tenant whose sessions nobody
else can see or touch, one tenant cannot crowd out another, and a burst cannot overrun admission."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from specagent_ray.serve.core.config import LatencyModel
from specagent_ray.testing.gateway_server import in_process_gateway

pytestmark = pytest.mark.security
A, B = {"X-API-Key": "key-a"}, {"Authorization": "Bearer key-b"}
KEYS = ("key-a", "key-b")
CLIENT = {"tool_source": "airline", "task_id": "0", "user": "client", "message": "hi"}  # waits on its user


def no_session(detail: str, sid: str) -> str:
    return detail.replace(sid, "<sid>")


async def cross_tenant_answers(http: httpx.AsyncClient, sid: str, intruder: dict) -> list[tuple[int, str]]:
    """Every call a tenant can make on a session, made by ``intruder``: (status, detail without the id)."""
    calls = [http.get(f"/v1/sessions/{sid}", headers=intruder),
             http.get(f"/v1/sessions/{sid}/events", headers=intruder),
             http.post(f"/v1/sessions/{sid}/messages", json={"text": "refund me"}, headers=intruder),
             http.post(f"/v1/sessions/{sid}/tool_results", json={"call_id": f"{sid}:r1", "content": "ok"},
                       headers=intruder),
             http.delete(f"/v1/sessions/{sid}", headers=intruder)]
    return [(r.status_code, no_session(r.json()["detail"], sid)) for r in await asyncio.gather(*calls)]


async def waiting_events(http: httpx.AsyncClient, made: dict[str, list[str]]) -> dict[str, int]:
    """Each session's event count, read by its owner once all of them wait for their user (the agent has
    spoken and nothing else can happen until a message comes)."""
    owners = {sid: key for name, key in (("a", A), ("b", B)) for sid in made[name]}
    for _ in range(300):
        answers = await asyncio.gather(*(http.get(f"/v1/sessions/{sid}", headers=key) for sid, key in owners.items()))
        assert all(r.status_code == 200 for r in answers)
        if all(r.json()["status"] == "waiting_user" for r in answers):
            return {r.json()["session_id"]: r.json()["events"] for r in answers}
        await asyncio.sleep(0.1)
    raise AssertionError("the sessions never came to wait for their user")


def test_two_tenants_with_100_sessions_each_cannot_read_post_or_cancel_each_others(tmp_path):
    async def run(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            made = {}
            for name, key in (("a", A), ("b", B)):
                answers = await asyncio.gather(*(http.post("/v1/sessions", json=CLIENT, headers=key)
                                                 for _ in range(100)))
                assert [r.status_code for r in answers] == [201] * 100
                made[name] = [r.json()["session_id"] for r in answers]
            before = await waiting_events(http, made)
            missing = await cross_tenant_answers(http, "0123456789abcdef", A)
            assert {status for status, _ in missing} == {404}
            for sids, intruder in ((made["a"], B), (made["b"], A)):
                for sid in sids:
                    assert await cross_tenant_answers(http, sid, intruder) == missing  # same as no session
            assert await waiting_events(http, made) == before  # the owners still can, and nothing changed
            running = (await http.get("/v1/stats", headers=A)).json()["sessions"]["running"]
            assert running == 200

    with in_process_gateway(tmp_path, keys=KEYS) as url:
        asyncio.run(run(url))


def test_a_session_record_names_its_owner_by_a_hash_never_the_key(tmp_path):
    with in_process_gateway(tmp_path, keys=KEYS) as url, httpx.Client(base_url=url, timeout=30) as http:
        sid = http.post("/v1/sessions", json=CLIENT, headers=A).json()["session_id"]
        http.delete(f"/v1/sessions/{sid}", headers=A)  # a finished session's stream ends
        created = http.get(f"/v1/sessions/{sid}/events", headers=A).text.split("\n")[2]
        assert '"owner": "key-' in created and "key-a" not in created
    assert not any(b"key-a" in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_a_tenant_at_its_limit_gets_429_and_another_tenant_is_still_admitted(tmp_path):
    with in_process_gateway(tmp_path, keys=KEYS, tenant_max_sessions=3, max_sessions=10) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        assert [http.post("/v1/sessions", json=CLIENT, headers=A).status_code for _ in range(3)] == [201] * 3
        refused = http.post("/v1/sessions", json=CLIENT, headers=A)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert "limit is 3" in refused.json()["detail"]
        assert http.post("/v1/sessions", json=CLIENT, headers=B).status_code == 201
        sid = http.post("/v1/sessions", json=CLIENT, headers=B).json()["session_id"]
        http.delete(f"/v1/sessions/{sid}", headers=B)  # B's ended session frees B's slot, not A's
        assert http.post("/v1/sessions", json=CLIENT, headers=A).status_code == 429


def test_a_tenant_over_its_rate_gets_429_with_retry_after_and_another_is_not_slowed(tmp_path):
    with in_process_gateway(tmp_path, keys=KEYS, gateway={"rate_per_s": 0.5, "burst": 3}) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        answers = [http.get("/v1/stats", headers=A) for _ in range(4)]
        assert [r.status_code for r in answers] == [200, 200, 200, 429]
        assert int(answers[-1].headers["Retry-After"]) >= 1
        assert http.get("/v1/stats", headers=B).status_code == 200


def test_a_client_that_never_answers_times_out_and_frees_its_slot(tmp_path):
    with in_process_gateway(tmp_path, keys=KEYS, idle_timeout_s=0.5, tenant_max_sessions=1) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        sid = http.post("/v1/sessions", json=CLIENT, headers=A).json()["session_id"]
        final = http.get(f"/v1/sessions/{sid}/events", headers=A, timeout=30).text.strip().split("\n")[-1]
        assert '"status": "timed_out"' in final and "no user message within 0.5 s" in final
        assert http.post("/v1/sessions", json=CLIENT, headers=A).status_code == 201
        assert http.post(f"/v1/sessions/{sid}/messages", json={"text": "late"}, headers=A).status_code == 409


def test_posted_messages_a_session_has_not_answered_are_bounded(tmp_path):
    slow = LatencyModel(draft_base_s=2.0)  # the agent takes its time: posted messages wait for it
    with in_process_gateway(tmp_path, keys=KEYS, inbox_limit=2, latency=slow) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        sid = http.post("/v1/sessions", json=CLIENT, headers=A).json()["session_id"]
        codes = [http.post(f"/v1/sessions/{sid}/messages", json={"text": f"m{i}"}, headers=A).status_code
                 for i in range(5)]
        assert codes.count(202) <= 3 and codes[-1] == 429  # the first may be taken before the rest arrive


def test_a_burst_of_200_creates_over_http_admits_exactly_max_sessions(tmp_path):
    async def run(url: str) -> list[int]:
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=200)) as http:
            answers = await asyncio.gather(*(http.post("/v1/sessions", json=CLIENT, headers=A) for _ in range(200)))
            return [r.status_code for r in answers]

    with in_process_gateway(tmp_path, keys=KEYS, max_sessions=50) as url:
        codes = asyncio.run(run(url))
    assert codes.count(201) == 50 and codes.count(429) == 150


def test_only_operator_keys_read_the_cluster_wide_stats(tmp_path):
    with in_process_gateway(tmp_path / "log", keys=("key-a", "key-b", "ops"), operators=("ops",)) as url:
        with httpx.Client(base_url=url, timeout=30) as http:
            refused = http.get("/v1/stats", headers=A)  # would show other tenants' broken session ids, nodes
            assert refused.status_code == 403 and "operator keys" in refused.json()["detail"]
            assert "sessions" not in refused.text
            assert http.get("/v1/stats", headers={"X-API-Key": "ops"}).status_code == 200
            assert http.get("/v1/stats", headers={"X-API-Key": "nobody"}).status_code == 401


@pytest.mark.slow  # starts Locust (a few seconds)
def test_a_tenants_load_test_runs_without_the_cluster_wide_stats(tmp_path):
    from specagent_ray.loadtest.locust_load import LocustLoad
    from specagent_ray.loadtest.run import LoadConfig
    from specagent_ray.loadtest.workload import Workload, parse_mix

    with in_process_gateway(tmp_path / "log", keys=("key-a", "key-b", "ops"), operators=("ops",)) as url:
        cfg = LoadConfig(url, "key-a", Workload(parse_mix("airline:0-1")), concurrency=2, sessions=2, duration_s=60,
                         drain_s=30, baseline_sessions=0)
        result = LocustLoad(cfg).run()
    assert [r.outcome for r in result.load()] == ["done", "done"] and result.stats_after is None


def test_the_served_gateway_takes_operator_keys_from_their_own_variable():
    from specagent_ray.serve.core.config import GatewayConfig
    from specagent_ray.serve.gateway.routes import operator_keys

    cfg = GatewayConfig(dev_api_key=None)
    assert operator_keys(cfg, {"SPECAGENT_OPERATOR_KEYS": " ops1, ops2 ,", "SPECAGENT_API_KEYS": "t1"}) == {"ops1", "ops2"}
    assert operator_keys(GatewayConfig(dev_api_key="dev"), {}) == {"dev"}  # local profiles: the dev key
