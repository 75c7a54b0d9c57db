"""Coordinator shards behind one gateway (in process, real HTTP): a session's id names its shard, every
call follows it, an id naming no shard is 404 without reaching any, and /v1/stats adds the shards up."""

from __future__ import annotations

import time

import httpx
import pytest

from specagent_ray.serve.sessions.shards import ShardRouter, combined, shard_log, shard_of
from specagent_ray.testing.gateway_server import in_process_gateway

KEY = {"X-API-Key": "dev-key"}
CLIENT = {"tool_source": "airline", "task_id": "0", "user": "client", "message": "hi"}


def test_a_session_id_names_its_shard():
    assert [shard_of(s) for s in ("0-ab12", "3-ab12", "ab12cd34", "x-ab12", "3-", "1234-ab")] == [0, 3, 0, None, None, None]
    assert shard_log("s3://b/log/", 0) == "s3://b/log/" and shard_log("s3://b/log/", 2) == "s3://b/log/shard-2"


def test_sessions_split_over_two_shards_and_every_call_follows_its_id(tmp_path):
    with in_process_gateway(tmp_path, app={"coordinators": 2}) as url, httpx.Client(base_url=url, headers=KEY) as http:
        sids = [http.post("/v1/sessions", json=CLIENT).json()["session_id"] for _ in range(10)]
        assert sorted(shard_of(s) for s in sids) == [0] * 5 + [1] * 5
        for sid in sids:  # each session runs its first turn after the create returns, then waits for its user
            assert settled_status(http, sid) == "waiting_user"
        stats = http.get("/v1/stats").json()
        assert stats["coordinators"] == 2 and stats["sessions"]["running"] == 10
        assert [s["shard"] for s in stats["shards"]] == [0, 1]
        assert [s["sessions"]["running"] for s in stats["shards"]] == [5, 5]
        assert (tmp_path / "shard-1").is_dir()  # shard 1 logs in its own namespace


def settled_status(http: httpx.Client, sid: str, timeout_s: float = 10.0) -> str:
    """The session's status once it has left ``running`` (or ``running`` at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while (status := http.get(f"/v1/sessions/{sid}").json()["status"]) == "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    return status


@pytest.mark.parametrize("stale", ["2-0123456789abcdef", "9-0123456789abcdef", "zz-0123", "0-0123456789abcdef"])
def test_an_id_that_names_no_shard_or_no_session_is_404_on_every_route(tmp_path, stale):
    with in_process_gateway(tmp_path, app={"coordinators": 2}) as url, httpx.Client(base_url=url, headers=KEY) as http:
        answers = [http.get(f"/v1/sessions/{stale}"), http.post(f"/v1/sessions/{stale}/messages", json={"text": "x"}),
                   http.post(f"/v1/sessions/{stale}/tool_results", json={"call_id": "c", "content": "x"}),
                   http.delete(f"/v1/sessions/{stale}"), http.get(f"/v1/sessions/{stale}/events")]
        assert [r.status_code for r in answers] == [404] * 5
        assert all("no session" in r.json()["detail"] for r in answers)


async def test_a_create_with_an_idempotency_key_always_goes_to_the_same_shard():
    seen = []

    async def call_shard(i, method, *args, **kwargs):
        seen.append(i)

    router = ShardRouter(call_shard, 4)
    for _ in range(5):
        await router("create", None, owner="key-a", idempotency_key="op-7")
    assert len(set(seen)) == 1
    seen.clear()
    for _ in range(8):
        await router("create", None, owner="key-a")
    assert sorted(seen) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_combined_stats_sum_counters_and_keep_the_worst_percentiles():
    def shard(i, running, p99):
        return {"engines": "sim", "shard": i, "sessions": {"running": running, "done": 1}, "in_memory": 2,
                "committed_steps": 10, "queued": 0, "log_flushes": 3, "resumed": 0, "fallbacks": 1, "redrafts": 0,
                "process_cpu_s": 1.5, "batch_sizes": {"verify": {1: 2, 4: 1}},
                "speculation": {"mode": "adaptive", "chosen_k": {"0": i, "2": 1, **({"10": 3} if i else {})}},
                "overhead_s": {"n": 5, "p50": 0.001, "p99": p99}, "intent_log_wait_s": {"n": 0, "p50": None},
                "engine_wait_s": {"write": {"n": 2, "p99": p99}, "draft": {"n": 0, "p99": None}},
                "cache": {"strong": {"prompt_tokens": 1000, "cached_tokens": 900 - i * 400, "predicted_cached_tokens": 950,
                                     "session_cached_share": {"n": 3, "p10": 0.9 - i * 0.4, "p50": 0.95}}}}
    out = combined([shard(0, 3, 0.01), shard(1, 4, 0.02)])
    assert out["sessions"] == {"running": 7, "done": 2} and out["committed_steps"] == 20
    assert out["batch_sizes"]["verify"] == {1: 4, 4: 2} and out["overhead_s"] == {"n": 10, "p50": 0.001, "p99": 0.02}
    assert out["intent_log_wait_s"] == {"n": 0, "p50": None} and len(out["shards"]) == 2
    assert out["engine_wait_s"] == {"write": {"n": 4, "p99": 0.02}, "draft": {"n": 0, "p99": None}}
    cache = out["cache"]["strong"]  # shares of the summed tokens; the per-session share of the worst shard
    assert cache["cached_share"] == 0.7 and cache["predicted_share"] == 0.95 and cache["gap"] == 0.25
    assert cache["session_cached_share"] == {"n": 6, "p10": 0.5, "p50": 0.95}
    assert out["speculation"] == {"mode": "adaptive", "chosen_k": {"0": 1, "2": 2, "10": 3}}
    assert list(out["speculation"]["chosen_k"]) == ["0", "2", "10"]  # by K, not as text
