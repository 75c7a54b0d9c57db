"""The OpenAI Agents SDK (``openai-agents``, pinned in the dev extra), run unchanged against the gateway
and coordinator in process, with the scripted engines and real MCP servers (the project's bank server,
whose journal counts calls on the server's side). The plan in each user message decides what the agent
does (``models/scripted_plan.py``).

The SDK replays the whole conversation on every request by default (its past ``function_call`` items
with their ids, then the outputs); with ``auto_previous_response_id=True`` it sends only new items."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from agents import (
    Agent,
    HostedMCPTool,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import BaseModel

from specagent_ray.testing.gateway_server import in_process_gateway

BANK = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
PARIS = 'call get_weather {"city": "Paris"}; say It is sunny in Paris.'
asked: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    asked.append(city)
    return f"sunny in {city}"


@pytest.fixture(scope="module", autouse=True)
def no_tracing():
    set_tracing_disabled(True)  # the SDK would export spans to OpenAI's servers


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal.jsonl"


@pytest.fixture
def gateway(tmp_path: Path, journal: Path):
    sources = {"bank": {"kind": "mcp", "command": [*BANK, "--journal", str(journal)], "trusted": True},
               "app": {"kind": "client"}}
    with in_process_gateway(tmp_path / "log", app={"engines": {"kind": "scripted"}, "tool_sources": sources}) as url:
        yield url


def model(url: str) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("specagent", AsyncOpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0))


def calls(journal: Path, name: str) -> list[dict]:
    lines = journal.read_text().splitlines() if journal.exists() else []
    return [c for c in map(json.loads, lines) if c["name"] == name]


@pytest.mark.parametrize("chained", [False, True], ids=["history-replay", "auto-previous-response-id"])
async def test_a_function_tool_agent_runs_in_both_modes(gateway, chained):
    asked.clear()
    agent = Agent(name="weather", instructions="Answer about the weather.", tools=[get_weather], model=model(gateway))
    result = await Runner.run(agent, PARIS, auto_previous_response_id=chained)
    assert result.final_output == "It is sunny in Paris." and asked == ["Paris"]  # the function ran once


async def test_a_streamed_run_gives_the_function_call_and_the_answer(gateway):
    asked.clear()
    agent = Agent(name="weather", instructions="Answer.", tools=[get_weather], model=model(gateway))
    run = Runner.run_streamed(agent, PARIS)
    kinds = [e.item.type async for e in run.stream_events() if e.type == "run_item_stream_event"]
    assert run.final_output == "It is sunny in Paris." and asked == ["Paris"]
    assert "tool_call_item" in kinds and "message_output_item" in kinds


class Forecast(BaseModel):
    city: str
    celsius: int


async def test_an_output_type_agent_gets_its_pydantic_model(gateway):
    agent = Agent(name="forecaster", instructions="Forecast.", output_type=Forecast, model=model(gateway))
    result = await Runner.run(agent, 'say {"city": "Oslo", "celsius": -3}')
    assert result.final_output == Forecast(city="Oslo", celsius=-3)


async def test_a_hosted_mcp_agent_asks_approval_and_the_rejected_draft_write_never_runs(gateway, journal):
    answered: list[str] = []

    def approve(request):
        answered.append(request.data.name)
        return {"approve": True}

    bank = HostedMCPTool(tool_config={"type": "mcp", "server_label": "bank", "require_approval": "always"},
                         on_approval_request=approve)
    agent = Agent(name="teller", instructions="Move money as asked.", tools=[bank], model=model(gateway),
                  model_settings=ModelSettings(store=False))
    moved = json.dumps({"source": "alice", "target": "bob", "amount": 5})
    weak = json.dumps({"source": "alice", "target": "bob", "amount": 500})
    result = await Runner.run(agent, f"call transfer {moved} weak {weak}; say Sent.")
    assert result.final_output == "Sent." and answered == ["transfer"]
    assert [c["arguments"]["amount"] for c in calls(journal, "transfer")] == [5]  # the weak 500 never ran


async def test_function_tools_and_a_hosted_mcp_server_mix_in_one_agent(gateway, journal):
    """One agent, a ``@function_tool`` and the bank's MCP server: the bank's read runs while drafting,
    its rejected draft write never runs (the verifier's repair does), and the function goes to the SDK."""
    asked.clear()
    bank = HostedMCPTool(tool_config={"type": "mcp", "server_label": "bank", "require_approval": "never"})
    agent = Agent(name="both", instructions="Help.", tools=[get_weather, bank], model=model(gateway))
    moved = json.dumps({"source": "alice", "target": "bob", "amount": 5})
    weak = json.dumps({"source": "alice", "target": "bob", "amount": 500})
    plan = (f'call get_balance {{"account": "alice"}}; call transfer {moved} weak {weak}; '
            f'call get_weather {{"city": "Paris"}}; say done')
    result = await Runner.run(agent, plan)
    assert result.final_output == "done" and asked == ["Paris"]
    assert [c["arguments"]["amount"] for c in calls(journal, "transfer")] == [5]
    assert len(calls(journal, "get_balance")) == 1
    kinds = [i.raw_item.type for i in result.new_items if hasattr(i.raw_item, "type")]
    assert "mcp_call" in kinds and "function_call" in kinds


@pytest.mark.parametrize("chained", [False, True], ids=["history-replay", "auto-previous-response-id"])
async def test_a_handoff_switches_instructions_and_tools_and_the_history_carries_over(gateway, chained):
    """Agent A hands off (its ``transfer_to_b`` function call); the SDK's next request brings B's
    instructions and tools: a new session starts from there, its context the conversation so far. B's
    message has no plan of its own, so the scripted engines' default answers (``say ok``)."""
    b = Agent(name="B", instructions="You are B; you answer billing questions.", model=model(gateway))
    a = Agent(name="A", instructions="You triage.", handoffs=[b], model=model(gateway))
    result = await Runner.run(a, "call transfer_to_b {}; say never said by A", auto_previous_response_id=chained)
    assert result.last_agent is b and result.final_output == "ok"
    handoff = [i for i in result.new_items if i.type == "handoff_output_item"]
    assert len(handoff) == 1
    created = first_record(gateway, result.raw_responses[-1].response_id)
    assert created["request"]["instructions"].startswith("You are B")
    assert "transfer_to_b" in created["request"]["context"]  # A's conversation, as B's context


def first_record(url: str, response_id: str) -> dict:
    """The ``created`` record of the session behind a response (its id names the session)."""
    sid = response_id.removeprefix("resp_").rsplit("_", 1)[0]
    with httpx.stream("GET", f"{url}/v1/sessions/{sid}/events", headers={"X-API-Key": "dev-key"},
                      params={"after": 0}, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                return json.loads(line[6:])
    raise AssertionError("no records")
