"""The Open Responses compliance cases, as the official suite runs them (openresponses/openresponses,
``src/lib/compliance-tests.ts``: the same 7 request bodies, the same checks), against the gateway with
the scripted engines and a client tool source; and the request fields agent clients send on their first
request. Every response body and every stream event is validated against the specification's own
models (``openresponses-types``, pinned in the dev extra), and parsed with openai-python's types.

The scripted engines answer a message without a plan by their documented default (``models/scripted_plan.py``):
call the first function tool once with arguments its schema accepts, then say ok."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import openresponses_types as ort
import pytest
from openai.types.responses import Response

from specagent_ray.testing.gateway_server import in_process_gateway

KEY = "dev-key"
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather for a location",
           "parameters": {"type": "object", "properties": {"location": {
               "type": "string", "description": "The city and state, e.g. San Francisco, CA"}}, "required": ["location"]}}
HEART = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAACAAAAAgCAYAAABzenr0AAAAPklEQVR4nO3OMQ0AAAgDoNm/tCV2"
         "eAQEJO1uLgYEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEhAEBAQEBAQsE7QMBZNg9CQAAAABJRU5ErkJggg==")


def user(text: Any) -> dict:
    return {"type": "message", "role": "user", "content": text}


# (id, body, stream, checks): the official suite's seven cases
CASES = [
    ("basic-response", {"input": [user("Say hello in exactly 3 words.")]}, False, ("output", "completed")),
    ("streaming-response", {"input": [user("Count from 1 to 5.")]}, True, ("events", "completed")),
    ("system-prompt", {"input": [{"type": "message", "role": "system",
                                  "content": "You are a pirate. Always respond in pirate speak."},
                                 user("Say hello.")]}, False, ("output", "completed")),
    ("tool-calling", {"input": [user("What's the weather like in San Francisco?")], "tools": [WEATHER]}, False,
     ("output", "function_call")),
    ("tool-calling-streaming", {"input": [user("What's the weather like in San Francisco?")], "tools": [WEATHER]},
     True, ("events", "function_call_events")),
    ("image-input", {"input": [user([{"type": "input_text", "text": "What do you see in this image? Answer in one "
                                      "sentence."}, {"type": "input_image", "image_url": HEART}])]}, False,
     ("output", "completed")),
    ("multi-turn", {"input": [user("My name is Alice."), {"type": "message", "role": "assistant", "content":
                              "Hello Alice! Nice to meet you. How can I help you today?"}, user("What is my name?")]},
     False, ("output", "completed")),
]
EVENTS = {  # the stream events the specification defines (the suite's parser refuses any other)
    "response.created": ort.ResponseCreatedStreamingEvent, "response.queued": ort.ResponseQueuedStreamingEvent,
    "response.in_progress": ort.ResponseInProgressStreamingEvent,
    "response.completed": ort.ResponseCompletedStreamingEvent, "response.failed": ort.ResponseFailedStreamingEvent,
    "response.incomplete": ort.ResponseIncompleteStreamingEvent,
    "response.output_item.added": ort.ResponseOutputItemAddedStreamingEvent,
    "response.output_item.done": ort.ResponseOutputItemDoneStreamingEvent,
    "response.content_part.added": ort.ResponseContentPartAddedStreamingEvent,
    "response.content_part.done": ort.ResponseContentPartDoneStreamingEvent,
    "response.output_text.delta": ort.ResponseOutputTextDeltaStreamingEvent,
    "response.output_text.done": ort.ResponseOutputTextDoneStreamingEvent,
    "response.function_call_arguments.delta": ort.ResponseFunctionCallArgumentsDeltaStreamingEvent,
    "response.function_call_arguments.done": ort.ResponseFunctionCallArgumentsDoneStreamingEvent,
    "error": ort.ErrorStreamingEvent}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory):
    app = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client"}}}
    with in_process_gateway(Path(tmp_path_factory.mktemp("log")), app=app, keys=(KEY, "other-key")) as url:
        yield url


def post(url: str, body: dict, stream: bool = False, key: str = KEY) -> tuple[dict, list[dict]]:
    """The final response and the stream's events, as the official suite gets them (its SSE parser
    splits on bare newlines and dispatches on an empty line; it fails on a non-2xx answer)."""
    with httpx.stream("POST", f"{url}/v1/responses", json={"model": "specagent", **body, "stream": stream},
                      headers={"Authorization": f"Bearer {key}"}, timeout=60) as r:
        raw = r.read().decode()
    assert r.status_code == 200, raw
    if not stream:
        return json.loads(raw), []
    assert "\r\n" not in raw
    events = [json.loads(line[6:]) for block in raw.split("\n\n") for line in block.split("\n")
              if line.startswith("data: ")]
    final = next(e["response"] for e in reversed(events) if e["type"] in (
        "response.completed", "response.failed", "response.incomplete"))
    return final, events


def valid(resource: dict, events: list[dict]) -> None:
    """Every body and event against the specification's models, and openai-python's types."""
    ort.ResponseResource.model_validate(resource)
    Response.model_validate(resource)
    for e in events:
        assert e["type"] in EVENTS, f"{e['type']} is no Open Responses event"
        EVENTS[e["type"]].model_validate(e)
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers))


@pytest.mark.parametrize("case, body, stream, checks", CASES, ids=[c[0] for c in CASES])
def test_the_open_responses_compliance_cases_pass(gateway, case, body, stream, checks):
    resource, events = post(gateway, body, stream)
    valid(resource, events)
    types = [i["type"] for i in resource["output"]]
    if "output" in checks:
        assert types
    if "completed" in checks:
        assert resource["status"] == "completed"
    if "events" in checks:
        assert events
    if "function_call" in checks:
        assert "function_call" in types
    if "function_call_events" in checks:
        kinds = [(e["type"], e.get("item", {}).get("type")) for e in events]
        for needed in (("response.output_item.added", "function_call"), ("response.function_call_arguments.delta",
                       None), ("response.function_call_arguments.done", None),
                       ("response.output_item.done", "function_call")):
            assert needed in kinds, kinds


def test_the_default_plan_calls_the_first_function_with_schema_valid_arguments(gateway):
    resource, _ = post(gateway, CASES[3][1])
    call = next(i for i in resource["output"] if i["type"] == "function_call")
    assert call["name"] == "get_weather" and set(json.loads(call["arguments"])) == {"location"}


def test_the_fields_agent_clients_send_first_are_taken_and_echoed_as_applied(gateway):
    """include: [] (the Agents SDK), temperature, max_output_tokens, a developer message, reasoning."""
    resource, _ = post(gateway, {"input": [{"role": "developer", "content": "Be terse."}, user("say hi")],
                                 "include": [], "temperature": 0.9, "max_output_tokens": 50, "top_p": 0.5,
                                 "reasoning": {"effort": "none"}, "text": {"verbosity": "low"},
                                 "parallel_tool_calls": True, "prompt_cache_key": "pk", "safety_identifier": "s1"})
    valid(resource, [])
    assert resource["output"][-1]["content"][0]["text"] == "hi" and resource["instructions"] == "Be terse."
    assert (resource["temperature"], resource["top_p"], resource["max_output_tokens"]) == (0.0, 1.0, None)
    assert (resource["parallel_tool_calls"], resource["prompt_cache_key"], resource["safety_identifier"]) == (
        False, "pk", "s1")


def test_store_false_leaves_nothing_retrievable(gateway):
    resource, _ = post(gateway, {"input": "say hi", "store": False})
    assert resource["store"] is False and resource["output"][-1]["content"][0]["text"] == "hi"
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key=KEY, max_retries=0)
    for attempt in (lambda: client.responses.retrieve(resource["id"]),
                    lambda: client.responses.input_items.list(resource["id"]),
                    lambda: client.responses.create(model="specagent", input="say x",
                                                    previous_response_id=resource["id"])):
        with pytest.raises(openai.NotFoundError):
            attempt()


def test_a_continuation_from_an_earlier_response_forks_the_conversation(gateway):
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key=KEY, max_retries=0)
    first = client.responses.create(model="specagent", input="say one")
    second = client.responses.create(model="specagent", input="say two", previous_response_id=first.id)
    fork = client.responses.create(model="specagent", input="say three", previous_response_id=first.id)
    assert fork.output_text == "three" and fork.id.split("_")[1] != second.id.split("_")[1]  # a new session
    after = client.responses.create(model="specagent", input="say four", previous_response_id=second.id)
    assert after.output_text == "four"  # the original goes on untouched
    with pytest.raises(openai.NotFoundError):  # another tenant forks nothing
        openai.OpenAI(base_url=f"{gateway}/v1", api_key="other-key", max_retries=0).responses.create(
            model="specagent", input="say x", previous_response_id=first.id)


def test_a_background_response_streams_and_a_stream_resumes_after_a_sequence_number(gateway):
    started, _ = post(gateway, {"input": "say hello there", "background": True})
    with httpx.stream("GET", f"{gateway}/v1/responses/{started['id']}", params={"stream": "true"},
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as r:
        whole = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    valid(whole[-1]["response"], whole)
    assert whole[-1]["type"] == "response.completed"
    with httpx.stream("GET", f"{gateway}/v1/responses/{started['id']}", params={"stream": "true",
                      "starting_after": 2}, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as r:
        rest = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert rest == whole[3:]  # the same events, the same numbers, from number 3 on
