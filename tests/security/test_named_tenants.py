"""Named tenants through the real HTTP gateway: a tenant's keys share its sessions, and only its own; its
limits stop it and nobody else; a key that belongs to no tenant gets 401; the profile refuses what cannot
work."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from specagent_ray.serve.core.config import AppConfig
from specagent_ray.serve.core.tenants import key_owners
from specagent_ray.testing.gateway_server import in_process_gateway

pytestmark = pytest.mark.security
ENV = {"ACME_KEYS": "acme-1, acme-2", "GLOBEX_KEYS": "globex-1,globex-2"}
TENANTS = {"acme": {"keys_env": "ACME_KEYS", "max_sessions": 2},
           "globex": {"keys_env": "GLOBEX_KEYS", "methods": ["specagent"], "tool_sources": ["airline"],
                      "rate_per_s": 0.01, "burst": 8}}
CLIENT = {"tool_source": "airline", "task_id": "0", "user": "client", "message": "hi"}  # waits on its user


def key(k: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {k}"}


def gateway(tmp_path):
    return in_process_gateway(tmp_path / "log", keys=("dev-key",), app={"tenants": TENANTS}, env=ENV,
                              operators=("op-key",))


async def settled(http: httpx.AsyncClient, sid: str, who: dict[str, str]) -> dict:
    for _ in range(300):
        r = await http.get(f"/v1/sessions/{sid}", headers=who)
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("waiting_user", "done", "cancelled"):
            return r.json()
        await asyncio.sleep(0.05)
    raise AssertionError("the session never settled")


def test_a_session_made_with_one_key_is_read_continued_and_cancelled_with_the_tenants_other_key(tmp_path):
    async def run(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            made = await http.post("/v1/sessions", json=CLIENT, headers=key("acme-1"))
            assert made.status_code == 201, made.text
            sid = made.json()["session_id"]
            assert (await settled(http, sid, key("acme-2")))["status"] == "waiting_user"
            for intruder in ("globex-1", "op-key"):  # another tenant; an operator is its own tenant too
                assert (await http.get(f"/v1/sessions/{sid}", headers=key(intruder))).status_code == 404
                assert (await http.delete(f"/v1/sessions/{sid}", headers=key(intruder))).status_code == 404
            before = (await settled(http, sid, key("acme-1")))["events"]
            posted = await http.post(f"/v1/sessions/{sid}/messages", json={"text": "thanks"}, headers=key("acme-2"))
            assert posted.status_code == 202, posted.text
            for _ in range(100):  # the agent answers the message key 2 sent
                if (await settled(http, sid, key("acme-1")))["events"] > before + 1:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the session did not go on after key 2's message")
            other = (await http.post("/v1/sessions", json=CLIENT, headers=key("acme-1"))).json()["session_id"]
            assert (await settled(http, other, key("acme-2")))["status"] == "waiting_user"
            cancelled = await http.delete(f"/v1/sessions/{other}", headers=key("acme-2"))
            assert cancelled.status_code == 200, cancelled.text
            assert (await settled(http, other, key("acme-1")))["status"] == "cancelled"
    with gateway(tmp_path) as url:
        asyncio.run(run(url))


def test_a_tenants_quota_and_rate_stop_that_tenant_and_nobody_else(tmp_path):
    async def run(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            first = await http.post("/v1/sessions", json=CLIENT, headers=key("acme-1"))
            second = await http.post("/v1/sessions", json=CLIENT, headers=key("acme-2"))
            again = await http.post("/v1/sessions", json=CLIENT, headers=key("acme-2"))  # the same tenant's quota
            assert (first.status_code, second.status_code, again.status_code) == (201, 201, 429), again.text
            assert "tenant" in again.json()["detail"]
            other = await asyncio.gather(*(http.post("/v1/sessions", json=CLIENT, headers=key(f"globex-{1 + i % 2}"))
                                           for i in range(3)))
            assert [r.status_code for r in other] == [201] * 3  # acme's quota is not globex's
            # globex's own rate: a burst of 8 shared by both its keys, then 429; acme is not slowed
            answers = [await http.get("/v1/stats", headers=key("globex-1")) for _ in range(8)]
            assert answers[-1].status_code == 429 and "Retry-After" in answers[-1].headers
            assert (await http.get(f"/v1/sessions/{first.json()['session_id']}", headers=key("acme-1"))).status_code == 200
    with gateway(tmp_path) as url:
        asyncio.run(run(url))


def test_keys_of_no_tenant_get_401_and_a_tenant_gets_only_its_methods_and_sources(tmp_path):
    async def run(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for stranger in ("dev-key", "acme-3", "acme-1x"):  # with tenants, the profile's own keys are no tenant's
                assert (await http.post("/v1/sessions", json=CLIENT, headers=key(stranger))).status_code == 401
            strong = await http.post("/v1/sessions", json={**CLIENT, "method": "strong"}, headers=key("globex-1"))
            retail = await http.post("/v1/sessions", json={**CLIENT, "tool_source": "retail"}, headers=key("globex-1"))
            assert (strong.status_code, retail.status_code) == (403, 403)
            assert "tenant" in strong.json()["detail"] and "tenant" in retail.json()["detail"]
            assert (await http.post("/v1/sessions", json={**CLIENT, "method": "strong"},
                                    headers=key("acme-1"))).status_code == 201  # acme may
    with gateway(tmp_path) as url:
        asyncio.run(run(url))


@pytest.mark.parametrize("tenants, error", [
    ({"Acme": {"keys_env": "X"}}, "tenant name"),
    ({"key-1": {"keys_env": "X"}}, "tenant name"),
    ({"other": {"keys_env": "X"}}, "tenant name"),
    ({"acme": {"keys_env": "X", "methods": ["weak"]}}, "methods"),
    ({"acme": {"keys_env": "X", "tool_sources": ["files"]}}, "tool_sources"),
])
def test_the_profile_refuses_tenants_that_cannot_work(tenants, error):
    with pytest.raises(ValueError, match=error):
        AppConfig.model_validate({"tenants": tenants})


def test_one_key_listed_for_two_tenants_is_refused_and_none_is_stored_in_the_config():
    cfg = AppConfig.model_validate({"tenants": TENANTS})
    with pytest.raises(ValueError, match="also another tenant's"):
        key_owners(cfg.tenants, {"ACME_KEYS": "shared", "GLOBEX_KEYS": "shared"}, frozenset(), frozenset())
    assert "acme-1" not in cfg.model_dump_json()
    owners = key_owners(cfg.tenants, ENV, frozenset({"dev-key"}), frozenset({"op-key"}))
    assert owners["acme-1"] == owners["acme-2"] == "acme" and "dev-key" not in owners
    assert owners["op-key"].startswith("key-")


def test_usage_by_tenant_is_for_operator_keys_and_counts_each_tenant_apart(tmp_path):
    async def run(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for who in ("acme-1", "globex-2"):
                sid = (await http.post("/v1/sessions", json=CLIENT, headers=key(who))).json()["session_id"]
                await settled(http, sid, key(who))
            assert (await http.get("/v1/usage", headers=key("acme-1"))).status_code == 403
            assert (await http.get("/v1/usage?since=yesterday", headers=key("op-key"))).status_code == 422
            everyone = (await http.get("/v1/usage", headers=key("op-key"))).json()["tenants"]
            assert set(everyone) == {"acme", "globex"}
            (day, acme), = everyone["acme"].items()
            assert acme["sessions_created"] == 1 and sum(t["calls"] for t in acme["tokens"].values()) >= 1
            assert acme["gpu_seconds"] > 0
            assert len(day) == 10 and "estimated" in acme["label"]
            one = (await http.get("/v1/usage?tenant=globex", headers=key("op-key"))).json()["tenants"]
            assert set(one) == {"globex"}
    with gateway(tmp_path) as url:
        asyncio.run(run(url))


def test_metrics_label_only_named_tenants_and_shards_usage_adds_up():
    from specagent_ray.serve.sessions.usage import merged
    from specagent_ray.telemetry.metrics import tenant_label

    named = frozenset(TENANTS)
    assert [tenant_label(o, named) for o in ("acme", "globex", "key-0123abcd", "local")] == [
        "acme", "globex", "other", "other"]
    day = {"tokens": {"strong": {"calls": 1, "prompt": 10}}, "gpu_seconds": 1.5, "label": "estimated",
           "sessions_done": 1}
    out = merged([{"acme": {"2026-12-02": day}}, {"acme": {"2026-12-02": {**day, "sessions_failed": 1}},
                                                  "globex": {"2026-12-01": day}}])
    assert out["acme"]["2026-12-02"] == {"tokens": {"strong": {"calls": 2, "prompt": 20}}, "gpu_seconds": 3.0,
                                         "label": "estimated", "sessions_done": 2, "sessions_failed": 1}
    assert out["globex"] == {"2026-12-01": day}


@pytest.mark.parametrize("app, env, error", [
    ({"gateway": {"dev_api_key": "dev"}}, {}, None),  # a local profile: the dev key is also an operator's
    ({}, {"SPECAGENT_API_KEYS": "a,b", "SPECAGENT_OPERATOR_KEYS": "op"}, None),
    ({}, {"SPECAGENT_OPERATOR_KEYS": "op"}, "no API keys"),  # operators alone serve no client
    ({"tenants": TENANTS}, ENV, None),
    ({"tenants": TENANTS, "gateway": {"dev_api_key": "dev"}}, {}, "no tenant has a key"),
])
def test_a_gateway_replica_starts_only_where_some_client_can_authenticate(app, env, error):
    from specagent_ray.serve.gateway.routes import gateway_keys

    cfg = AppConfig.model_validate(app)
    if error:
        with pytest.raises(ValueError, match=error):
            gateway_keys(cfg, env)
    else:
        owners, operators = gateway_keys(cfg, env)
        assert owners and set(operators) <= set(owners)
