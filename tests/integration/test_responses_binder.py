"""The session binder on the Responses API, through the official OpenAI SDK, against the real gateway and
coordinator in process on the scripted engines (the plan in the user message decides every step).

Stateless clients replay their whole history every step. Two popular agent frameworks replay their past
``function_call`` items with the ``call_id`` this server minted but without the item's ``id``: such a
replay must continue its session (one session for the whole loop), not start a new one each step whose
agent, on a fresh plan, would call the tool again. Hostile: another tenant's history, replayed byte for
byte with its ids, or a forged id, binds to nothing, reveals nothing and is never a 404; a replay of an
earlier point forks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import openai
import pytest

from specagent_ray.testing.gateway_server import in_process_gateway

BANK = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
MCP = {"type": "mcp", "server_label": "bank"}
LOOP = "; ".join(f'call lookup {{"q": "{q}"}}' for q in "abcd") + "; say all found"


@pytest.fixture
def gateway(tmp_path: Path):
    sources = {"bank": {"kind": "mcp", "command": BANK, "trusted": True}, "app": {"kind": "client"}}
    with in_process_gateway(tmp_path / "log", app={"engines": {"kind": "scripted"}, "tool_sources": sources},
                            keys=("key-a", "key-b")) as url:
        yield url


def sdk(url: str, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def session(response_id: str) -> str:
    return response_id.removeprefix("resp_").rsplit("_", 1)[0]


def replayed(output: list, ids: bool = False) -> list[dict]:
    """Output items as a stateless framework replays them: without their ``id`` (``ids``: with it)."""
    return [{k: v for k, v in item.model_dump(exclude_none=True).items() if ids or k != "id"} for item in output]


def run_loop(client: openai.OpenAI, steps: int = 5, ids: bool = False) -> tuple[list[str], list[str], list[dict]]:
    """The agent loop of a stateless client: the whole history every step, each call's output after it.
    Answers the response ids, the queries the agent asked, and the history."""
    history: list[dict] = [{"role": "user", "content": LOOP}]
    rids, asked = [], []
    for _ in range(steps):
        r = client.responses.create(model="specagent", tools=[LOOKUP], input=history)
        rids.append(r.id)
        history += replayed(r.output, ids)
        calls = [i for i in r.output if i.type == "function_call"]
        if not calls:
            break
        q = json.loads(calls[0].arguments)["q"]
        asked.append(q)
        history.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": f"found {q}"})
    return rids, asked, history


def test_a_five_step_loop_replaying_function_calls_without_ids_is_one_session(gateway):
    rids, asked, history = run_loop(sdk(gateway))
    assert asked == ["a", "b", "c", "d"]  # a new session per step would start the plan again: a, a, a, ...
    assert len({session(r) for r in rids}) == 1 and [int(r.rsplit("_", 1)[1]) for r in rids] == [0, 1, 2, 3, 4]
    assert history[-1]["content"][0]["text"] == "all found"


def test_the_id_based_replay_still_continues_its_session(gateway):
    rids, asked, _ = run_loop(sdk(gateway), ids=True)
    assert asked == ["a", "b", "c", "d"] and len({session(r) for r in rids}) == 1


def test_a_text_conversation_replayed_without_ids_continues_its_session(gateway):
    """No call ids at all: the binder's index (a tenant-scoped fingerprint of the history) finds it."""
    client = sdk(gateway)
    first = client.responses.create(model="specagent", input="say one")
    history = [{"role": "user", "content": "say one"}, *replayed(first.output), {"role": "user", "content": "say two"}]
    second = client.responses.create(model="specagent", input=history)
    assert second.output_text == "two" and session(second.id) == session(first.id)
    history += [*replayed(second.output), {"role": "user", "content": " say   three "}]  # whitespace is tolerated
    third = client.responses.create(model="specagent", input=history)
    assert third.output_text == "three" and session(third.id) == session(first.id)


def test_another_tenants_history_replayed_byte_for_byte_gets_a_new_session_and_nothing_of_theirs(gateway):
    """A's session read the bank (an MCP call: server-side, its output seen by A) and then took A's own
    tool output. B replays A's history byte for byte, ids included, with B's own tool output: B's turn
    runs in a new session, and nothing A saw that B did not send reaches B."""
    a, b = sdk(gateway, "key-a"), sdk(gateway, "key-b")
    plan = 'call get_balance {"account": "alice"}; call lookup {"q": "x"}; say done'
    first = a.responses.create(model="specagent", tools=[LOOKUP, MCP], input=plan)
    call = first.output[-1]
    assert call.type == "function_call" and any(i.type == "mcp_call" for i in first.output)
    theirs = [{"role": "user", "content": plan}, *replayed(first.output, ids=True)]
    a_next = a.responses.create(model="specagent", tools=[LOOKUP, MCP], input=[
        *theirs, {"type": "function_call_output", "call_id": call.call_id, "output": "A-SECRET"}])
    assert session(a_next.id) == session(first.id)  # A's own replay continues A's session
    sent = [item for item in theirs if item.get("type") != "mcp_call"]  # B never saw the bank's answer
    mine = b.responses.create(model="specagent", tools=[LOOKUP], input=[
        *sent, {"type": "function_call_output", "call_id": call.call_id, "output": "B-OUTPUT"}])
    assert mine.status == "completed" and session(mine.id) != session(first.id)
    shown = mine.model_dump_json() + json.dumps(b.responses.input_items.list(mine.id).model_dump())
    assert "A-SECRET" not in shown and not any(i.type == "mcp_call" for i in mine.output)
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(first.id)


@pytest.mark.parametrize("forged", ["theirs", "made-up"])
def test_a_forged_call_id_or_item_id_behaves_like_no_match(gateway, forged):
    """A call id or item id of another tenant's session, or one this server never minted, is context for
    a new session: 200, never a 404 that would tell the session exists."""
    a, b = sdk(gateway, "key-a"), sdk(gateway, "key-b")
    first = a.responses.create(model="specagent", tools=[LOOKUP], input='call lookup {"q": "x"}; say done')
    sid = session(first.id) if forged == "theirs" else "0-0123456789abcdef"
    for with_id in (False, True):
        call = {"type": "function_call", "call_id": f"{sid}:w0", "name": "lookup", "arguments": '{"q": "x"}',
                **({"id": f"fc_{sid}_3"} if with_id else {})}
        r = b.responses.create(model="specagent", tools=[LOOKUP], input=[
            {"role": "user", "content": 'call lookup {"q": "x"}; say done'}, call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "forged"}])
        assert r.status == "completed" and session(r.id) != sid
    assert a.responses.retrieve(first.id).output[-1].call_id == f"{session(first.id)}:w0"  # A's is untouched


def test_a_replay_of_an_earlier_point_forks(gateway):
    client = sdk(gateway)
    rids, _, history = run_loop(client, steps=3)
    earlier = history[:2]  # the opening and the first call: the end of response 0
    fork = client.responses.create(model="specagent", tools=[LOOKUP], input=[
        *earlier, {"type": "function_call_output", "call_id": earlier[-1]["call_id"], "output": "other"},
        {"role": "user", "content": "say forked"}])
    assert fork.output_text == "forked" and session(fork.id) != session(rids[0])
    assert client.responses.retrieve(rids[-1]).output[-1].type == "function_call"  # the original is untouched
