"""``POST /v1/responses/{id}/cancel`` answers the response once it is no longer in progress (OpenAI's
answer is the cancelled response, not one still running), and every 4xx of the Responses and
Conversations routes carries a string ``code`` that a client can branch on. Against the real gateway
and coordinator in process, the bank MCP server holding its tool calls while a file exists."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from specagent_ray.testing.gateway_server import in_process_gateway

BANK = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
HEADERS = {"Authorization": "Bearer dev-key"}


@pytest.fixture
def gateway(tmp_path: Path):
    bank = [*BANK, "--journal", str(tmp_path / "journal.jsonl"), "--hold", str(tmp_path / "hold")]
    sources = {"bank": {"kind": "mcp", "command": bank, "trusted": True}, "app": {"kind": "client"}}
    with in_process_gateway(tmp_path / "log", app={"engines": {"kind": "scripted"}, "tool_sources": sources},
                            gateway={"events_wait_s": 5.0}) as url:
        yield url


def test_a_cancel_answers_the_response_as_cancelled_not_in_progress(gateway, tmp_path):
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="dev-key", max_retries=0, timeout=30)
    (tmp_path / "hold").touch()  # the bank holds every tool call while this file exists
    try:
        running = client.responses.create(model="specagent", background=True, input='call get_balance '
                                          '{"account": "alice"}; say read', tools=[{"type": "mcp", "server_label": "bank"}])
        deadline = time.monotonic() + 10
        while not (tmp_path / "journal.jsonl").exists():  # the read is at the server, held there
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert client.responses.retrieve(running.id).status == "in_progress"
        cancelled = client.responses.cancel(running.id)
        assert cancelled.status == "cancelled" and cancelled.id == running.id
        assert client.responses.retrieve(running.id).status == "cancelled"
        with pytest.raises(openai.ConflictError) as again:
            client.responses.cancel(running.id)
        assert again.value.code == "not_in_progress"
    finally:
        (tmp_path / "hold").unlink()


def test_every_4xx_of_the_responses_routes_has_a_string_code(gateway):
    rid = "resp_0-0123456789abcdef_0"
    asks = [("POST", "/v1/responses", {"model": "specagent", "input": 3}),  # a wrong type
            ("POST", "/v1/responses", {"model": "nobody", "input": "hi"}),  # an unknown model
            ("POST", "/v1/responses", b"{not json"),  # a body that does not parse
            ("POST", "/v1/responses", {"model": "specagent", "input": "hi", "previous_response_id": rid}),
            ("GET", f"/v1/responses/{rid}", None), ("POST", f"/v1/responses/{rid}/cancel", None),
            ("DELETE", f"/v1/responses/{rid}", None), ("GET", f"/v1/responses/{rid}/input_items", None),
            ("GET", "/v1/responses/resp_malformed", None), ("GET", "/v1/conversations/conv_nothing", None),
            ("POST", "/v1/conversations", {"items": "x"}), ("POST", "/v1/responses/input_tokens", {"input": 3})]
    with httpx.Client(base_url=gateway, headers=HEADERS, timeout=30) as http:
        for method, path, sent in asks:
            r = http.request(method, path, **({"content": sent} if isinstance(sent, bytes) else {"json": sent}))
            assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
            code = r.json()["error"]["code"]
            assert isinstance(code, str) and code, (method, path, r.text)
        unkeyed = httpx.post(f"{gateway}/v1/responses", json={"model": "specagent", "input": "hi"})
        assert unkeyed.status_code == 401 and isinstance(unkeyed.json()["error"]["code"], str)
