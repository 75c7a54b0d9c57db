"""A served session with an ``output_format``: its final message (a message that ends the agent's turn) is one
the client's schema accepts, whoever wrote it. On the scripted engines, through the real coordinator; and in
SpecAgent's loop over a real ``Session`` and ``SessionTools``: a drafted message the schema refuses is an
invalid action, never sent, and the strong model writes the step."""

from __future__ import annotations

import asyncio
import json

import pytest

from specagent_ray.models.scripted_plan import PlanEngineClient
from specagent_ray.models.scripted import ScriptedPolicy, ScriptedVerifier
from specagent_ray.models.structured import MessageFormat
from specagent_ray.protocol import Action, Parts, SpecConfig, Task, run_specagent
from specagent_ray.protocol.types import Observation
from specagent_ray.serve.core.api import CreateSession, OutputFormat
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.core.config import AppConfig, CoordinatorConfig
from specagent_ray.serve.core.handles import Local
from specagent_ray.serve.engines.priority import ProgramPriority
from specagent_ray.serve.sessions.coordinator import Coordinator
from specagent_ray.serve.sessions.runner import SessionTools
from specagent_ray.serve.sessions.session import Session
from specagent_ray.serve.toolhost.tool_host import ToolHost
from specagent_ray.storage.local import LocalStore

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "celsius", "sky"],
           "properties": {"city": {"type": "string"}, "celsius": {"type": "integer", "minimum": -40},
                          "sky": {"type": "string", "enum": ["clear", "cloudy"]}}}


def weather_format() -> OutputFormat:
    """Validated when a test runs, not at collection: validating compiles the schema with xgrammar, whose
    import (torch and transformers) costs about 2 s in every xdist worker."""
    return OutputFormat.model_validate({"type": "json_schema", "name": "weather", "schema": WEATHER, "strict": True})


def scripted_coordinator(tmp_path) -> Coordinator:
    cfg = AppConfig.model_validate({"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client"}},
                                    "coordinator": CoordinatorConfig(lease_s=1.0, lease_skew_s=0.05).model_dump()})
    store = LocalStore(tmp_path / "log")
    return Coordinator(cfg, PlanEngineClient(ProgramPriority()), Local(ToolHost(cfg.tool_sources, store)), store)


async def first_message(coord: Coordinator, sid: str) -> tuple[str, list[dict]]:
    seen: list[dict] = []
    async with asyncio.timeout(20):
        while not any(e["t"] == "agent_message" for e in seen):
            seen += (await coord.events(sid, len(seen), wait_s=1))["events"]
            assert not any(e["t"] == "final" for e in seen), seen
    return next(e["text"] for e in seen if e["t"] == "agent_message"), seen


@pytest.mark.parametrize("method", ["specagent", "strong"])
@pytest.mark.parametrize("opening", ["hello", "say it is sunny"])
async def test_a_scripted_sessions_final_message_is_one_the_clients_schema_accepts(tmp_path, method, opening):
    coord = scripted_coordinator(tmp_path)
    await coord.start()
    sid = (await coord.create(CreateSession(tool_source="app", message=opening, method=method,
                                            output_format=weather_format())))["session_id"]
    text, events = await first_message(coord, sid)
    assert MessageFormat(WEATHER).check(text) is None, text
    json.loads(text)
    if opening != "hello" and method == "specagent":  # the plan's words were drafted, refused, and repaired
        assert any(e["t"] == "invalid_action" and "weather" in e["detail"] for e in events), events
        assert any(e["t"] == "strong_repair" for e in events)
    await coord.cancel(sid)


async def test_a_session_without_an_output_format_says_what_it_always_said(tmp_path):
    coord = scripted_coordinator(tmp_path)
    await coord.start()
    sid = (await coord.create(CreateSession(tool_source="app", message="hello")))["session_id"]
    assert (await first_message(coord, sid))[0] == "ok"
    await coord.cancel(sid)


async def run_drafts(request: CreateSession, weak: list, strong: list) -> Session:
    """SpecAgent over a real session and its tools: the weak and strong policies say what they are given."""
    s = Session("s1", request, Task("0", "hi"), log=lambda sid, rec, data: None)

    async def durable() -> None:
        return None

    class Said:  # the user: records what reached them, then stops the conversation
        def __init__(self) -> None:
            self.heard: list[str] = []

        async def reply(self, text):
            self.heard.append(text)
            return Observation("thanks", user_stop=True)

    user = Said()
    parts = Parts(ScriptedPolicy(weak), ScriptedPolicy(strong), ScriptedVerifier([]),
                  SessionTools(s, Catalog({}, {}), lambda call, key: None, durable), user, s.ledger)
    trajectory = await run_specagent(s.task, parts, SpecConfig(k=3))
    s.heard = user.heard  # type: ignore[attr-defined]
    s.trajectory = trajectory  # type: ignore[attr-defined]
    return s


GOOD = '{"city":"Oslo","celsius":3,"sky":"cloudy"}'


@pytest.mark.parametrize("bad", ["It is cloudy in Oslo.", '{"city": "Oslo"}', '["Oslo", 3]'])
async def test_a_drafted_final_message_the_schema_refuses_is_never_sent_and_the_strong_model_repairs_it(bad):
    request = CreateSession(tool_source="app", message="hi", output_format=weather_format())
    s = await run_drafts(request, [Action.message(bad)], [Action.message(GOOD)])
    assert s.heard == [GOOD]  # type: ignore[attr-defined]
    kinds = [(e.kind, e.detail) for e in s.trajectory.events]  # type: ignore[attr-defined]
    assert any(k == "invalid_action" and d.startswith("weak:") for k, d in kinds), kinds
    assert any(k == "strong_repair" for k, _ in kinds)


async def test_without_an_output_format_any_message_is_sent_as_drafted():
    s = await run_drafts(CreateSession(tool_source="app", message="hi"), [Action.message("It is cloudy.")], [])
    assert s.heard == ["It is cloudy."]  # type: ignore[attr-defined]


async def test_json_object_takes_any_object_and_refuses_anything_else():
    request = CreateSession(tool_source="app", message="hi", output_format=OutputFormat(type="json_object"))
    s = await run_drafts(request, [Action.message("[1]")], [Action.message('{"free": "form"}')])
    assert s.heard == ['{"free": "form"}']  # type: ignore[attr-defined]


async def test_simulated_engines_refuse_an_output_format_and_say_why(tmp_path):
    """The simulated engines replay benchmark messages, which no client schema describes: such a session is
    refused (400 at create, where the tool sources check it) or fails at once saying why, never runs unformatted."""
    from specagent_ray.serve.core.config import SimEngines
    from specagent_ray.serve.core.errors import BadRequest
    from specagent_ray.testing.served import FAST, finished, sim_coordinator

    cfg = AppConfig(engines=SimEngines(latency=FAST), tool_sources={"airline": {"kind": "tau2", "domain": "airline"}},
                    coordinator=CoordinatorConfig(lease_s=1.0, lease_skew_s=0.05))
    coord = sim_coordinator(tmp_path / "log", cfg)
    await coord.start()
    req = CreateSession(tool_source="airline", task_id="0", user="simulated", output_format=weather_format())
    try:
        sid = (await coord.create(req))["session_id"]
    except BadRequest as exc:
        assert "output_format" in str(exc)
        return
    s = await finished(coord, sid)
    assert s.status == "failed" and "output_format" in s.error and not s.steps
