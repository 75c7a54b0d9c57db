"""A write that the client approves twice runs once, judged at the end of the session, not after a pause.

The real gateway and coordinator in process, with the project's bank MCP server, whose ``--journal`` counts
calls on the server's side. The approvals are posted on the sessions API's own route (the Responses API's
approvals are the same state machine: tests/integration/test_responses_sdk.py). A fixed wait after the first
call would pass a duplicate that comes later; here the session is taken to its ``final`` record (every step
it will ever run has run), the gateway is shut down (the bank server with it), and only then is the
server's journal read: it holds every call the server ever began.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from specagent_ray.testing.gateway_server import in_process_gateway

pytestmark = pytest.mark.slow  # one whole session with a real MCP server to its end: 2-4 s on 2 cores

BANK = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
KEY = {"X-API-Key": "dev-key"}
DEADLINE_S = 30.0


def transfer(amount: int) -> str:
    return f"call transfer {json.dumps({'source': 'alice', 'target': 'bob', 'amount': amount})}"


def journal(path: Path, name: str) -> list[dict]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [c for c in map(json.loads, lines) if c["name"] == name]


def records_until(url: str, sid: str, done: Callable[[dict], bool]) -> list[dict]:
    """The session's records from the first, up to the first one ``done`` accepts; fails after DEADLINE_S."""
    out: list[dict] = []
    deadline = time.monotonic() + DEADLINE_S
    with httpx.stream("GET", f"{url}/v1/sessions/{sid}/events", headers=KEY, params={"after": 0},
                      timeout=DEADLINE_S) as r:
        for line in r.iter_lines():
            assert time.monotonic() < deadline, f"no such record within {DEADLINE_S} s: {out[-3:]}"
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
                if done(out[-1]):
                    return out
    raise AssertionError(f"the stream ended first: {out[-3:]}")


def test_a_write_approved_twice_runs_once_by_the_end_of_the_session(tmp_path: Path) -> None:
    bank = tmp_path / "journal.jsonl"
    app = {"engines": {"kind": "scripted"}, "tool_sources": {
        "bank": {"kind": "mcp", "command": [*BANK, "--journal", str(bank)], "trusted": True}}}
    with in_process_gateway(tmp_path / "log", app=app) as url:
        created = httpx.post(f"{url}/v1/sessions", headers=KEY, timeout=30, json={
            "tool_source": "bank", "message": f"{transfer(4)}; say sent", "approval": {"tools": ["transfer"]}})
        sid = created.json()["session_id"]
        first = records_until(url, sid, lambda r: r["t"] == "approval_request")
        asked, kinds = first[-1], [r["t"] for r in first]
        assert asked["name"] == "transfer" and journal(bank, "transfer") == []
        assert kinds.index("staged") < kinds.index("accepted") < kinds.index("approval_request")  # verifier first
        answer = {"approval_request_id": asked["id"], "approve": True}
        for _ in range(2):
            assert httpx.post(f"{url}/v1/sessions/{sid}/approvals", headers=KEY, json=answer).status_code == 202
        flipped = httpx.post(f"{url}/v1/sessions/{sid}/approvals", headers=KEY, json={**answer, "approve": False})
        assert flipped.status_code == 409 and "already approved" in flipped.json()["detail"]
        records_until(url, sid, lambda r: r["t"] == "agent_message" and r["text"] == "sent")
        bye = httpx.post(f"{url}/v1/sessions/{sid}/messages", headers=KEY, json={"text": "bye", "stop": True})
        assert bye.status_code == 202
        records = records_until(url, sid, lambda r: r["t"] == "final")
        assert records[-1]["status"] == "done" and records[-1]["termination"] == "user_stop"
        intents = [r for r in records if r["t"] == "intent" and r["call"]["name"] == "transfer"]
        assert len(intents) == 1  # one intent, so one idempotency key for the tool host
    # the gateway and the bank server are down: no call can begin any more, and each that began is journaled
    assert [c["arguments"]["amount"] for c in journal(bank, "transfer")] == [4]
