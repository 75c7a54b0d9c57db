"""A session's sampling and output format reach its engines, on the wire: the OpenAI engine client, with its
real ``ChatBackend`` (the openai SDK), against a real HTTP server that speaks the chat-completions format and
keeps every request body. The drafter's and the strong model's own text (drafts, strong steps, repairs) is
sampled as the client asked, capped at the profile's max_tokens; every verdict (verifier, mid verifier,
critical look) stays greedy; a structured session's action schema makes a message the client's object."""

from __future__ import annotations

import contextlib
import json
import types

import pytest
from fastapi import FastAPI, Request

from specagent_ray.costs.ledger import Ledger
from specagent_ray.protocol.types import Action, Effect, History, Step, Task
from specagent_ray.serve.core.api import CreateSession, OutputFormat, Sampling
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.core.config import CoordinatorConfig, Endpoint, OpenAIEngines
from specagent_ray.serve.engines.engine_client import OpenAIEngineClient
from specagent_ray.testing.http import serve_in_thread

CATALOG = Catalog({"lookup": {"type": "object", "properties": {}}}, {"lookup": Effect.READ}, "Be careful.")
H = History(Task("t", "hi"))
ANSWER = {"type": "object", "additionalProperties": False, "required": ["answer"],
          "properties": {"answer": {"type": "string"}}}

bodies: list[dict] = []
app = FastAPI()


@app.post("/v1/chat/completions")
async def chat(request: Request):
    body = await request.json()
    bodies.append(body)
    review = "You are now the reviewer" in body["messages"][-1]["content"]
    text = {"answer": "42"} if body["response_format"]["json_schema"]["schema"].get("$defs", {}).get("output") \
        else "forty-two"
    content = ({"accepted_prefix": 1, "reason": "", "repair": None, "confidence": 0.9} if review
               else {"kind": "message", "text": text})
    return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": json.dumps(content)},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}


@pytest.fixture(scope="module")
def url():
    with serve_in_thread(app) as base:
        yield f"{base}/v1"


def session(request: CreateSession):
    return types.SimpleNamespace(id="s1", outside=contextlib.nullcontext, ledger=Ledger(), domain="",
                                 task=Task("0", "hi"), request=request)


def client(url: str, max_tokens: int = 256) -> OpenAIEngineClient:
    engines = OpenAIEngines(drafter=Endpoint(url=url, model="drafter"), verifier=Endpoint(url=url, model="strong"),
                            mid=Endpoint(url=url, model="mid"), max_tokens=max_tokens)
    return OpenAIEngineClient(engines, CoordinatorConfig(batch_window_ms=1), {})


async def every_call(c: OpenAIEngineClient, request: CreateSession) -> dict[str, dict]:
    """One of each call a session makes, by what it is: the request body each sent."""
    s = session(request)
    weak, strong, verifier = c.models(s, CATALOG)
    mid = c.mid(s, CATALOG)
    block = [Step(Action.message("x"), None, "weak", Effect.WRITE)]
    out = {}
    for what, call in [("draft", lambda: weak.propose(H)), ("strong step", lambda: strong.propose(H)),
                       ("repair", lambda: strong.propose(H, (), "wrong")), ("verify", lambda: verifier.verify(H, block)),
                       ("critical", lambda: verifier.for_critical().verify(H, block)),
                       ("exact", lambda: verifier.by_exact_match().verify(H, block)),
                       ("mid", lambda: mid.verify(H, block))]:
        bodies.clear()
        await call()
        out[what] = bodies[-1]
    return out


async def test_the_agents_own_text_is_sampled_as_asked_and_every_verdict_stays_greedy(url):
    asked = CreateSession(tool_source="app", message="hi",
                          sampling=Sampling(temperature=0.7, top_p=0.9, max_output_tokens=100))
    sent = await every_call(client(url), asked)
    for what in ("draft", "strong step", "repair"):
        assert (sent[what]["temperature"], sent[what]["top_p"], sent[what]["max_tokens"]) == (0.7, 0.9, 100), what
    assert sent["draft"]["model"] == "drafter" and sent["repair"]["model"] == "strong"
    for what in ("verify", "critical", "exact", "mid"):
        assert sent[what]["temperature"] == 0 and "top_p" not in sent[what], what
        assert sent[what]["max_tokens"] == 256, what  # a verdict is no output of the agent's: the profile's cap


async def test_max_output_tokens_never_raises_the_profiles_cap_and_no_sampling_is_greedy(url):
    sent = await every_call(client(url, max_tokens=64), CreateSession(
        tool_source="app", message="hi", sampling=Sampling(max_output_tokens=1000)))
    assert sent["draft"]["max_tokens"] == 64 and sent["draft"]["temperature"] == 0
    plain = await every_call(client(url), CreateSession(tool_source="app", message="hi"))
    assert all(b["temperature"] == 0 and "top_p" not in b and b["max_tokens"] == 256 for b in plain.values())


async def test_a_structured_session_asks_every_engine_for_the_clients_object_and_gets_it_as_json_text(url):
    fmt = OutputFormat.model_validate({"type": "json_schema", "name": "answer", "schema": ANSWER, "strict": True})
    c = client(url)
    s = session(CreateSession(tool_source="app", message="hi", output_format=fmt))
    weak, strong, verifier = c.models(s, CATALOG)
    bodies.clear()
    draft = await weak.propose(H)
    assert draft.action == Action.message('{"answer":"42"}')
    schema = bodies[-1]["response_format"]["json_schema"]["schema"]
    assert schema["$defs"]["output"] == ANSWER
    assert (await strong.propose(H, (), "why")).action == Action.message('{"answer":"42"}')
    await verifier.verify(H, [Step(draft.action, None, "weak", Effect.WRITE)])
    assert bodies[-1]["response_format"]["json_schema"]["schema"]["$defs"]["output"] == ANSWER  # its repairs too
    plain = session(CreateSession(tool_source="app", message="hi"))
    assert (await c.models(plain, CATALOG)[0].propose(H)).action == Action.message("forty-two")
