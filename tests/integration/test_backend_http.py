"""ChatBackend against a real HTTP server: uvicorn serving a small FastAPI app on 127.0.0.1 that speaks
the OpenAI chat-completions wire format, with scripted behaviours chosen by the request's ``model``."""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from specagent_ray.models.backend import BackendError, ChatBackend
from specagent_ray.testing.http import serve_in_thread
from specagent_ray.models.llm import LLMPolicy
from specagent_ray.models.parsing import parse_action
from specagent_ray.models.prompts import PromptConfig, Prompts
from specagent_ray.protocol import Action, History, MalformedOutput, Task, Usage
from specagent_ray.tools.scripted import object_schema

SCHEMAS = {"get_user_details": object_schema(user_id="string")}
PROMPTS = Prompts(PromptConfig(policy="Be helpful."), SCHEMAS)
HISTORY = History(Task("t", "I am emma_kim_9957."))
ACTION = {"kind": "tool", "name": "get_user_details", "arguments": {"user_id": "emma_kim_9957"}}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

requests: list[dict] = []
seen: Counter[str] = Counter()
app = FastAPI()


def _error(status: int, message: str) -> JSONResponse:
    # retry-after-ms keeps the client's retries fast; the client honours it instead of its backoff
    return JSONResponse({"error": {"message": message, "type": "server_error"}}, status_code=status,
                        headers={"retry-after-ms": "10"})


@app.post("/v1/chat/completions")
async def chat_completions(request: Request):
    body = await request.json()
    behaviour = body["model"]
    requests.append({"body": body, "headers": dict(request.headers)})
    seen[behaviour] += 1
    if behaviour == "down" or (behaviour == "flaky" and seen[behaviour] == 1):
        return _error(500, "engine overloaded\nplease retry")
    if behaviour == "slow":
        await asyncio.sleep(1.5)
    content = "Sure, let me look up your profile." if behaviour == "prose" else json.dumps(ACTION)
    details = None if behaviour == "no-details" else {"cached_tokens": 96}
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": behaviour,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129,
                  "prompt_tokens_details": details},
    }


@pytest.fixture(scope="module")
def base_url():
    with serve_in_thread(app) as root:
        yield f"{root}/v1"


@pytest.fixture(autouse=True)
def fresh_script():
    requests.clear()
    seen.clear()


def backend(base_url: str, model: str, **kw) -> ChatBackend:
    return ChatBackend(base_url, model=model, **kw)


async def ask(b: ChatBackend, headers=None):
    return await b.complete(PROMPTS.draft(HISTORY), PROMPTS.action_schema, max_tokens=64, headers=headers)


async def test_completion_carries_text_usage_schema_and_traceparent(base_url):
    b = backend(base_url, "ok", extra_headers={"x-tenant": "bench"})
    completion = await ask(b, headers={"traceparent": TRACEPARENT})
    assert parse_action(completion.text, SCHEMAS, completion.finish_reason) == Action.tool(
        "get_user_details", user_id="emma_kim_9957")
    assert completion.usage == Usage(prompt_tokens=120, cached_prompt_tokens=96, decode_tokens=9)
    assert completion.finish_reason == "stop" and completion.model == "ok"
    [request] = requests
    assert request["body"]["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "action", "schema": PROMPTS.action_schema, "strict": True}}
    assert request["body"]["max_tokens"] == 64 and request["body"]["temperature"] == 0.0
    assert request["body"]["messages"] == PROMPTS.draft(HISTORY)
    assert request["headers"]["traceparent"] == TRACEPARENT
    assert request["headers"]["x-tenant"] == "bench"


async def test_missing_cached_token_details_count_as_zero_and_no_schema_sends_no_response_format(base_url):
    b = backend(base_url, "no-details")
    completion = await b.complete([{"role": "user", "content": "hi"}], None, max_tokens=8)
    assert completion.usage == Usage(120, 0, 9)
    assert "response_format" not in requests[0]["body"]
    assert "traceparent" not in requests[0]["headers"]


async def test_a_500_is_retried_and_then_succeeds(base_url):
    completion = await ask(backend(base_url, "flaky", max_retries=2))
    assert json.loads(completion.text) == ACTION
    assert seen["flaky"] == 2


async def test_persistent_500_becomes_one_clear_backend_error(base_url):
    with pytest.raises(BackendError) as err:
        await ask(backend(base_url, "down", max_retries=2))
    message = str(err.value)
    assert seen["down"] == 3  # the first try and two retries
    assert f"chat endpoint {base_url} (model down): HTTP 500 after 2 retries" in message
    assert "engine overloaded please retry" in message and "\n" not in message


async def test_a_slow_response_beyond_the_timeout_is_a_backend_error(base_url):
    with pytest.raises(BackendError, match=r"\(model slow\): timed out after 0.3s \(1 retries\)"):
        await ask(backend(base_url, "slow", timeout_s=0.3, max_retries=1))
    assert seen["slow"] == 2


async def test_a_refused_connection_names_the_endpoint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    with pytest.raises(BackendError, match=rf"chat endpoint http://127.0.0.1:{port}/v1 \(model m\): connection failed"):
        await ask(ChatBackend(f"http://127.0.0.1:{port}/v1", model="m", max_retries=0))


async def test_a_backend_that_ignores_the_schema_yields_malformed_output(base_url):
    completion = await ask(backend(base_url, "prose"))
    with pytest.raises(MalformedOutput, match="invalid JSON: Expecting value at line 1 column 1"):
        parse_action(completion.text, SCHEMAS, completion.finish_reason)


async def test_llm_policy_over_http_retries_prose_once_and_sums_usage(base_url):
    policy = LLMPolicy(backend(base_url, "prose"), PromptConfig(policy="Be helpful."), SCHEMAS, headers=None)
    with pytest.raises(MalformedOutput, match="after one retry: invalid JSON") as err:
        await policy.propose(HISTORY)
    assert err.value.usage == Usage(240, 192, 18)
    assert seen["prose"] == 2
    policy = LLMPolicy(backend(base_url, "ok"), PromptConfig(policy="Be helpful."), SCHEMAS,
                       headers=lambda: {"traceparent": TRACEPARENT})
    proposal = await policy.propose(HISTORY)
    assert proposal.action.call.name == "get_user_details" and proposal.usage == Usage(120, 96, 9)
    assert requests[-1]["headers"]["traceparent"] == TRACEPARENT
