"""No Responses request waits on something that cannot come (hostile tests, written first).

Each test posts what real agent clients send at the wrong moment (a new user turn before a tool's result,
a new turn that ignores an open approval request, a cancel while a client tool runs, a stream that the
client drops) against the real gateway and coordinator in process, with the official ``openai`` SDK,
and holds the server to a deadline: an answer within ``DEADLINE_S``, and a conversation that stays usable.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from specagent_ray.testing.gateway_server import in_process_gateway

DEADLINE_S = 1.0
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
BANK = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
ALWAYS = [{"type": "mcp", "server_label": "bank", "require_approval": "always"}]
TRANSFER = 'call transfer {"source": "alice", "target": "bob", "amount": 5}; say sent'


@pytest.fixture
def gateway(tmp_path: Path):
    bank = [*BANK, "--journal", str(tmp_path / "journal.jsonl"), "--hold", str(tmp_path / "hold")]
    sources = {"bank": {"kind": "mcp", "command": bank, "trusted": True}, "app": {"kind": "client"}}
    with in_process_gateway(tmp_path / "log", app={"engines": {"kind": "scripted"}, "tool_sources": sources},
                            keys=("dev-key",)) as url:
        yield url


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0, timeout=30)


def post(url: str, body: dict, timeout: float = DEADLINE_S + 2) -> httpx.Response:
    """``body`` posted as JSON (``stream: true`` reads the whole stream), timed."""
    with httpx.Client(timeout=timeout) as client:
        return client.post(f"{url}/v1/responses", json=body, headers={"Authorization": "Bearer dev-key"})


def calling(url: str) -> tuple[str, str]:
    """A response that ended with a function call: (its id, the call's call_id)."""
    first = sdk(url).responses.create(model="specagent", input='call lookup {"q": "rate"}; say the rate is in',
                                      tools=[LOOKUP])
    assert first.output[-1].type == "function_call"
    return first.id, first.output[-1].call_id


@pytest.mark.parametrize("stream", [False, True])
def test_a_new_user_turn_before_a_tools_output_is_400_at_once_and_the_conversation_stays_usable(gateway, stream):
    rid, call_id = calling(gateway)
    started = time.monotonic()
    r = post(gateway, {"model": "specagent", "previous_response_id": rid, "tools": [LOOKUP], "stream": stream,
                       "input": [{"role": "user", "content": "what now?"}]})
    assert time.monotonic() - started < DEADLINE_S
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "missing_function_call_output" and call_id in error["message"]
    done = sdk(gateway).responses.create(model="specagent", previous_response_id=rid, tools=[LOOKUP], input=[
        {"type": "function_call_output", "call_id": call_id, "output": "1.1"}])
    assert done.status == "completed" and done.output_text == "the rate is in"


def test_a_new_user_turn_that_ignores_an_open_approval_request_is_400_naming_it(gateway):
    asked = sdk(gateway).responses.create(model="specagent", input=TRANSFER, tools=ALWAYS)
    request = asked.output[-1]
    assert request.type == "mcp_approval_request"
    started = time.monotonic()
    r = post(gateway, {"model": "specagent", "previous_response_id": asked.id, "tools": ALWAYS, "input": "hello?"})
    assert time.monotonic() - started < DEADLINE_S
    assert r.status_code == 400 and r.json()["error"]["code"] == "missing_approval_response", r.text
    assert request.id in r.json()["error"]["message"]
    answered = sdk(gateway).responses.create(model="specagent", previous_response_id=asked.id, tools=ALWAYS, input=[
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}])
    assert answered.status == "completed" and answered.output_text == "sent"


def test_a_denied_approval_ends_its_response_and_an_answer_after_a_delete_is_refused_at_once(gateway):
    client = sdk(gateway).with_options(timeout=10)
    asked = client.responses.create(model="specagent", input=TRANSFER, tools=ALWAYS)
    deny = {"type": "mcp_approval_response", "approval_request_id": asked.output[-1].id, "approve": False}
    denied = client.responses.create(model="specagent", previous_response_id=asked.id, tools=ALWAYS, input=[deny])
    assert denied.status == "completed"
    again = client.responses.create(model="specagent", previous_response_id=denied.id, input=TRANSFER, tools=ALWAYS)
    assert again.output[-1].type == "mcp_approval_request"
    client.responses.delete(again.id)  # the conversation ends while its write waits for approval
    started = time.monotonic()
    r = post(gateway, {"model": "specagent", "previous_response_id": again.id, "tools": ALWAYS, "input": [
        {"type": "mcp_approval_response", "approval_request_id": again.output[-1].id, "approve": True}]})
    assert time.monotonic() - started < DEADLINE_S and r.status_code in (404, 409), r.text


def test_a_cancel_while_a_tool_runs_answers_cancelled_at_once(gateway, tmp_path):
    (tmp_path / "hold").touch()  # the bank server holds every tool call while this file exists
    try:
        running = sdk(gateway).responses.create(model="specagent", background=True, tools=ALWAYS,
                                                input='call get_balance {"account": "alice"}; say read')
        deadline = time.monotonic() + 10
        while not (tmp_path / "journal.jsonl").exists():  # the read has reached the server and is held there
            assert time.monotonic() < deadline
            time.sleep(0.02)
        started = time.monotonic()
        cancelled = sdk(gateway).responses.cancel(running.id)
        assert time.monotonic() - started < DEADLINE_S
        assert cancelled.status == "cancelled"
        assert sdk(gateway).responses.retrieve(running.id).status == "cancelled"
    finally:
        (tmp_path / "hold").unlink()


def test_a_client_that_drops_a_stream_leaves_the_conversation_usable(gateway):
    with httpx.Client(timeout=10) as client, client.stream(
            "POST", f"{gateway}/v1/responses", headers={"Authorization": "Bearer dev-key"},
            json={"model": "specagent", "input": 'call lookup {"q": "a"}; say a', "tools": [LOOKUP],
                  "stream": True}) as r:
        first = json.loads(next(line for line in r.iter_lines() if line.startswith("data: "))[6:])
    rid = first["response"]["id"]
    deadline = time.monotonic() + 10
    while (got := sdk(gateway).responses.retrieve(rid)).status == "in_progress":
        assert time.monotonic() < deadline, "the dropped stream's response never ended"
        time.sleep(0.05)
    call = got.output[-1]
    done = sdk(gateway).responses.create(model="specagent", previous_response_id=rid, tools=[LOOKUP], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "1"}])
    assert done.output_text == "a"


def test_a_turn_that_runs_out_of_steps_is_incomplete_and_errors_name_a_code(tmp_path):
    app = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client"}},
           "defaults": {"max_steps": 2}}
    with in_process_gateway(tmp_path / "log", app=app, keys=("dev-key",)) as url:
        tools = [{**LOOKUP, "name": "note"}]
        r = sdk(url).responses.create(model="specagent", tools=tools, input=(
            'call note {"q": "1"}; call note {"q": "2"}; call note {"q": "3"}; say done'))
        for _ in range(3):  # step 1 and 2 are the first two calls; the third would be step 3
            assert r.status == "completed" and r.output[-1].type == "function_call"
            r = sdk(url).responses.create(model="specagent", previous_response_id=r.id, tools=tools, input=[
                {"type": "function_call_output", "call_id": r.output[-1].call_id, "output": "ok"}])
            if r.status != "completed":
                break
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_steps" and r.output == []
        missing = post(url, {"model": "specagent", "previous_response_id": "resp_0-0000000000000000_0", "input": "x"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_a_fork_echoes_the_previous_response_id_its_request_named(gateway):
    client = sdk(gateway)
    first = client.responses.create(model="specagent", input="say one")
    second = client.responses.create(model="specagent", previous_response_id=first.id, input="say two")
    fork = client.responses.create(model="specagent", previous_response_id=first.id, input="say three")
    assert second.previous_response_id == first.id
    assert fork.id.split("_")[1] != first.id.split("_")[1] and fork.previous_response_id == first.id
