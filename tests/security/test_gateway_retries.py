"""Through the real HTTP gateway: only calls that are safe to repeat are retried,
only while the coordinator is unavailable, and an ``Idempotency-Key`` makes a repeated create or message
answer with the first one instead of starting a second agent on the same task."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from specagent_ray.serve.core.config import GatewayConfig
from specagent_ray.serve.core.handles import NoReplica, taken
from specagent_ray.serve.core.tenants import tenant_of
from specagent_ray.serve.gateway.routes import make_api
from specagent_ray.testing.gateway_server import in_process_gateway
from specagent_ray.testing.http import serve_in_thread

pytestmark = pytest.mark.security
KEY = {"X-API-Key": "k"}
BODY = {"tool_source": "airline", "task_id": "0", "user": "client", "message": "hi"}


class Flaky:
    """A coordinator that raises ``error`` for its first ``fails`` calls, then answers."""

    def __init__(self, error: BaseException, fails: int = 1_000_000):
        self.error, self.fails, self.calls = error, fails, 0

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error
        return {"session_id": "s1", "status": "running"}


def serve(coordinator: Flaky, retry_s: float = 3.0):
    api = make_api(coordinator, GatewayConfig(coordinator_retry_s=retry_s), lambda: {"k": tenant_of("k")})
    return serve_in_thread(api)


def test_an_unexpected_coordinator_error_is_a_500_at_once_and_never_retried():
    flaky = Flaky(ValueError("a bug with /srv/secret/path in its message"))
    with serve(flaky, retry_s=60) as url:
        started = time.monotonic()
        r = httpx.get(url + "/v1/sessions/s1", headers=KEY, timeout=30)
    assert r.status_code == 500 and flaky.calls == 1 and time.monotonic() - started < 5
    assert "secret" not in r.text and "Traceback" not in r.text


def test_a_create_without_idempotency_key_is_not_retried_when_the_coordinator_is_gone():
    flaky = Flaky(ConnectionError("replica died"), fails=1)
    with serve(flaky) as url:
        r = httpx.post(url + "/v1/sessions", json=BODY, headers=KEY, timeout=30)
    assert r.status_code == 503 and flaky.calls == 1 and "Idempotency-Key" in r.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/s1/messages"])
def test_a_post_with_idempotency_key_is_retried_while_the_coordinator_restarts(path):
    flaky = Flaky(ConnectionError("replica died"), fails=2)
    body = BODY if path == "/v1/sessions" else {"text": "hello"}
    with serve(flaky) as url:
        r = httpx.post(url + path, json=body, headers={**KEY, "Idempotency-Key": "op-1"}, timeout=30)
    assert r.status_code in (201, 202) and flaky.calls == 3


def test_reads_are_retried_while_the_coordinator_restarts_and_then_503():
    with serve(flaky := Flaky(ConnectionError("replica died"), fails=2)) as url:
        assert httpx.get(url + "/v1/sessions/s1", headers=KEY, timeout=30).status_code == 200
    assert flaky.calls == 3
    with serve(Flaky(ConnectionError("replica died")), retry_s=0.5) as url:
        r = httpx.get(url + "/v1/sessions/s1", headers=KEY, timeout=30)
    assert r.status_code == 503 and r.headers["Retry-After"]


def test_the_same_idempotency_key_returns_the_first_session_and_starts_no_second(tmp_path):
    with in_process_gateway(tmp_path, keys=("k", "other")) as url, httpx.Client(base_url=url) as http:
        key = {**KEY, "Idempotency-Key": "create-1"}
        first = http.post("/v1/sessions", json=BODY, headers=key)
        again = http.post("/v1/sessions", json=BODY, headers=key)
        assert first.status_code == again.status_code == 201
        assert first.json()["session_id"] == again.json()["session_id"]
        assert http.get("/v1/stats", headers=KEY).json()["sessions"]["running"] == 1
        other = http.post("/v1/sessions", json={**BODY, "message": "something else"}, headers=key)
        assert other.status_code == 409
        theirs = http.post("/v1/sessions", json=BODY, headers={"X-API-Key": "other", "Idempotency-Key": "create-1"})
        assert theirs.json()["session_id"] != first.json()["session_id"]  # keys are per tenant

        sid = first.json()["session_id"]
        post = {**KEY, "Idempotency-Key": "msg-1"}
        for _ in range(3):
            assert http.post(f"/v1/sessions/{sid}/messages", json={"text": "my id is 42"}, headers=post
                             ).status_code == 202
        changed = http.post(f"/v1/sessions/{sid}/messages", json={"text": "my id is 43"}, headers=post)
        assert changed.status_code == 409
        http.delete(f"/v1/sessions/{sid}", headers=KEY)
        stream = http.get(f"/v1/sessions/{sid}/events", headers=KEY, timeout=30).text
        posted = [line for line in stream.splitlines() if '"t": "user_message"' in line]
        assert len(posted) == 1 and '"my id is 42"' in posted[0] and "my id is 43" not in stream


class Queued:
    """A Serve ``DeploymentResponse`` that no replica ever takes (its deployment cannot start)."""

    def __init__(self):
        self.cancelled = False

    async def _fetch_future_result_async(self) -> Any:
        await asyncio.Event().wait()

    def cancel(self) -> None:
        self.cancelled = True

    def __await__(self):
        raise AssertionError("awaited although no replica took the call")


async def test_a_call_that_no_replica_takes_is_given_up_and_withdrawn_after_the_patience():
    queued = Queued()
    begun = time.monotonic()
    with pytest.raises(NoReplica, match="within 0.2 s"):
        await taken(queued, 0.2)
    assert queued.cancelled and time.monotonic() - begun < 2  # withdrawn: it can never run later


@pytest.mark.parametrize("headers", [{}, {"Idempotency-Key": "op-1"}])
def test_a_coordinator_that_takes_no_call_is_a_503_after_one_wait(headers):
    flaky = Flaky(NoReplica("no replica took the call within 3 s"))
    with serve(flaky, retry_s=3) as url:
        r = httpx.post(url + "/v1/sessions", json=BODY, headers={**KEY, **headers}, timeout=30)
    assert r.status_code == 503 and "no replica took the call" in r.json()["detail"] and r.headers["Retry-After"]
    assert flaky.calls == 1  # it already waited out the patience: no second wait
