"""Forward-compatible requests: what OpenAI's own clients send that this server does not know (a coding
agent's ``client_metadata``, a newer SDK's ``context_management``, ``tools[].defer_loading``) is taken,
ignored, logged once and named in the ``x-specagent-ignored-fields`` header, unless the profile is strict
(``gateway.strict_fields``: 400 unknown_parameter). A tool type this server does not host is dropped and
named in ``x-specagent-dropped-tools``; a namespace of function tools is expanded into them. Through the
official SDK against the real gateway and coordinator in process (scripted engines), and at the
translation, which also echoes the sampling and the output format that were applied."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import httpx
import openai
import pytest

from specagent_ray.serve.core.errors import BadRequest
from specagent_ray.serve.responses import route_docs
from specagent_ray.serve.responses.models import ITEMS, TEXT
from specagent_ray.serve.agents import fields
from specagent_ray.serve.responses.route_docs import noticed
from specagent_ray.serve.responses.schema import create_schema
from specagent_ray.serve.responses.tools import dropped, echoed_tools
from specagent_ray.serve.responses.translate import (
    ResponseCreate,
    Terms,
    create_request,
    ignored,
    meta,
    turn_post,
)
from specagent_ray.testing.gateway_server import in_process_gateway

APP = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client"}}}
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
CODEX = {"client_metadata": {"originator": "codex_cli_rs", "session": "s-1"},
         "context_management": [{"type": "compaction", "compact_threshold": 200000}]}
TERMS = Terms(("specagent", "strong"), {}, ("bank",), "app")  # scripted engines: they sample nothing
SAMPLED = replace(TERMS, sampled=True)  # vLLM or a cloud API: they sample as asked
CRM = {"type": "namespace", "name": "crm", "description": "the CRM", "tools": [
    {"type": "function", "name": "get_contact", "description": "a contact", "defer_loading": True,
     "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}},
    {"type": "function", "name": "lookup"}]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with in_process_gateway(tmp_path_factory.mktemp("log"), app=APP) as url:
        yield url


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    with in_process_gateway(tmp_path_factory.mktemp("log"), app=APP, gateway={"strict_fields": True}) as url:
        yield url


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0, timeout=60)


def body(**fields) -> ResponseCreate:
    return ResponseCreate.model_validate({"model": "specagent", "input": "say hi", **fields})


# -- through the official SDK ---------------------------------------------------------------------------

def test_an_sdk_request_with_fields_and_tools_this_server_lacks_is_served_and_the_headers_name_them(served):
    raw = sdk(served).responses.with_raw_response.create(
        model="specagent", input="say hi", tools=[{**LOOKUP, "defer_loading": True}, {"type": "web_search"}],
        extra_body=CODEX)
    assert raw.headers["x-specagent-ignored-fields"] == "client_metadata,context_management,tools.defer_loading"
    assert raw.headers["x-specagent-dropped-tools"] == "web_search"
    r = raw.parse()
    assert r.status == "completed" and r.output_text == "hi"
    assert [t.type for t in r.tools] == ["function"]  # what the agent had: web_search was dropped
    with sdk(served).responses.with_streaming_response.create(
            model="specagent", input="say streamed", stream=True, tools=[{"type": "web_search"}],
            extra_body=CODEX) as streamed:
        assert streamed.headers["x-specagent-ignored-fields"] == "client_metadata,context_management"
        assert streamed.headers["x-specagent-dropped-tools"] == "web_search"
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["output"][-1]["content"][0][
        "text"] == "streamed"
    plain = sdk(served).responses.with_raw_response.create(model="specagent", input="say hi")
    assert "x-specagent-ignored-fields" not in plain.headers and "x-specagent-dropped-tools" not in plain.headers


def test_a_strict_profile_refuses_the_same_request_by_the_fields_name(strict):
    with pytest.raises(openai.BadRequestError, match="unknown parameter: client_metadata") as refused:
        sdk(strict).responses.create(model="specagent", input="say hi", tools=[{"type": "web_search"}],
                                     extra_body=CODEX)
    assert (refused.value.param, refused.value.code) == ("client_metadata", "unknown_parameter")
    with pytest.raises(openai.BadRequestError) as in_a_tool:
        sdk(strict).responses.create(model="specagent", input="say hi", tools=[{**LOOKUP, "defer_loading": True}])
    assert (in_a_tool.value.param, in_a_tool.value.code) == ("tools.defer_loading", "unknown_parameter")
    ok = sdk(strict).responses.with_raw_response.create(model="specagent", input="say hi",
                                                        tools=[{"type": "web_search"}])
    assert ok.parse().output_text == "hi" and ok.headers["x-specagent-dropped-tools"] == "web_search"


def test_unknown_fields_in_items_and_parts_are_named_by_path_on_every_route_that_takes_a_body(served, strict):
    item = {"role": "user", "content": [{"type": "input_text", "text": "say hi", "cache_control": "x"}], "seen": 1}
    headers = {"Authorization": "Bearer dev-key"}
    with httpx.Client(base_url=served, headers=headers, timeout=30) as http:
        r = http.post("/v1/responses", json={"model": "specagent", "input": [item]})
        assert r.status_code == 200 and r.headers["x-specagent-ignored-fields"] == "input.content.cache_control,input.seen"
        counted = http.post("/v1/responses/input_tokens", json={"input": [item], "tools": [{"type": "web_search"}],
                                                               "client_metadata": {}})
        assert counted.status_code == 200, counted.text
        assert counted.headers["x-specagent-ignored-fields"] == "client_metadata,input.content.cache_control,input.seen"
        conversation = http.post("/v1/conversations", json={"items": [item], "metadata": {}, "x_trace": "t"})
        assert conversation.status_code == 200, conversation.text
        assert conversation.headers["x-specagent-ignored-fields"] == "items.content.cache_control,items.seen,x_trace"
        cid = conversation.json()["id"]
        added = http.post(f"/v1/conversations/{cid}/items", json={"items": [item]})
        assert added.status_code == 200 and "seen" not in json.dumps(added.json())  # ignored: not even stored
        updated = http.post(f"/v1/conversations/{cid}", json={"metadata": {"a": "b"}, "x_trace": "t"})
        assert updated.status_code == 200 and updated.headers["x-specagent-ignored-fields"] == "x_trace"
    with httpx.Client(base_url=strict, headers=headers, timeout=30) as http:
        for path, sent in (("/v1/responses", {"model": "specagent", "input": [item]}),
                           ("/v1/responses/input_tokens", {"input": [item]}), ("/v1/conversations", {"x_trace": 1})):
            r = http.post(path, json=sent)
            assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter", (path, r.text)


def test_a_namespace_of_function_tools_reaches_the_agent_and_its_call_goes_out(served):
    r = sdk(served).responses.create(model="specagent", input='call crm.get_contact {"id": "7"}; say found',
                                     tools=[CRM])
    call = r.output[-1]
    assert call.type == "function_call" and json.loads(call.arguments) == {"id": "7"}
    assert (call.name, getattr(call, "namespace", None)) in (("get_contact", "crm"), ("crm.get_contact", None))
    assert [t.type for t in r.tools] == ["namespace"]


# -- at the translation --------------------------------------------------------------------------------

def test_a_namespace_is_expanded_into_its_functions_and_one_with_other_tools_is_dropped():
    req = create_request(body(tools=[CRM, LOOKUP]), TERMS)
    assert [t.name for t in req.client_tools] == ["lookup", "crm.get_contact", "crm.lookup"]
    assert req.client_tools[1].description == "a contact" and req.client_tools[1].parameters["properties"] == {
        "id": {"type": "string"}}
    asked = body(tools=[CRM])
    assert ignored(asked, strict=False) == ["tools.tools.defer_loading"] and dropped(asked) == []
    assert echoed_tools(asked, TERMS)[0]["tools"][0] == {"type": "function", "name": "get_contact",
                                                         "description": "a contact", "strict": None,
                                                         "parameters": CRM["tools"][0]["parameters"]}
    custom = {**CRM, "tools": [*CRM["tools"], {"type": "custom", "name": "apply_patch"}]}
    assert dropped(body(tools=[custom, LOOKUP])) == ["namespace"]
    assert [t.name for t in create_request(body(tools=[custom, LOOKUP]), TERMS).client_tools] == ["lookup"]
    narrowed = create_request(body(tools=[CRM], tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [
        {"type": "function", "name": "crm.lookup"}]}), TERMS)
    assert [t.name for t in narrowed.client_tools] == ["crm.lookup"]
    replayed = create_request(body(input=[
        {"type": "function_call", "call_id": "c1", "name": "get_contact", "namespace": "crm", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "Ada"}, {"role": "user", "content": "say hi"}]),
        TERMS)
    assert "agent called crm.get_contact({})" in replayed.context


@pytest.mark.parametrize("terms, echo", [
    (TERMS, (0.0, 1.0, None)),  # scripted engines decode no tokens: the fixed values, whatever was asked
    (SAMPLED, (0.7, 0.9, 512)),  # vLLM or a cloud API: what was asked
])
def test_sampling_is_the_sessions_and_the_echo_says_what_the_engines_apply(terms, echo):
    asked = body(temperature=0.7, top_p=0.9, max_output_tokens=512)
    session = create_request(asked, terms)
    assert (session.sampling.temperature, session.sampling.top_p, session.sampling.max_output_tokens) == (0.7, 0.9, 512)
    m = meta(asked, 1, [], session=session, sampled=terms.sampled)
    assert (m.echo["temperature"], m.echo["top_p"], m.echo["max_output_tokens"]) == echo
    later = turn_post(body(input="say more", temperature=1.5, max_output_tokens=64), 0, session, terms, 2)
    assert (later.meta.echo["temperature"], later.meta.echo["max_output_tokens"]) == echo[::2]  # the session's
    plain = create_request(body(), SAMPLED)
    assert plain.sampling is None
    default = meta(body(), 1, [], session=plain, sampled=True).echo
    assert (default["temperature"], default["top_p"], default["max_output_tokens"]) == (0.0, 1.0, None)
    greedy = create_request(body(temperature=0.9, top_p=0), SAMPLED)  # top_p 0 keeps only the likeliest token
    assert (greedy.sampling.temperature, greedy.sampling.top_p) == (0.0, None)


def test_the_output_format_is_the_sessions_and_echoed_as_applied_by_every_engine_kind():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    asked = body(text={"format": {"type": "json_schema", "name": "weather", "schema": schema, "strict": True}})
    session = create_request(asked, TERMS)
    assert (session.output_format.type, session.output_format.name, session.output_format.schema_) == (
        "json_schema", "weather", schema)
    echoed = {"format": {"type": "json_schema", "name": "weather", "schema": schema, "strict": True}}
    assert meta(asked, 1, [], session=session).echo["text"] == echoed
    assert turn_post(body(input="say x", text={"format": {"type": "text"}}), 0, session, TERMS, 2).meta.echo[
        "text"] == echoed  # the session's format, not the continuation's
    as_object = create_request(body(text={"format": {"type": "json_object"}}), TERMS)
    assert as_object.output_format.type == "json_object"
    assert meta(body(), 1, [], session=as_object).echo["text"] == {"format": {"type": "json_object"}}
    assert create_request(body(text={"format": {"type": "text"}}), TERMS).output_format is None
    with pytest.raises(BadRequest) as schema_for_text:
        create_request(body(text={"format": {"type": "text", "schema": schema}}), TERMS)
    assert schema_for_text.value.param == "text.format.schema"
    assert meta(body(), 1, []).echo["text"] == {"format": {"type": "text"}}


def test_previous_response_id_is_echoed_as_the_request_named_it():
    named = body(previous_response_id="resp_0-0123456789abcdef_3")
    assert meta(named, 1, []).echo["previous_response_id"] == "resp_0-0123456789abcdef_3"
    assert "previous_response_id" not in meta(body(), 1, []).echo  # a turn's own: the one before it


def test_bounds_take_a_long_coding_session():
    long = body(input=[{"role": "user", "content": "x" * TEXT}] + [{"role": "user", "content": "y"}] * (ITEMS - 1))
    assert len(long.input) == ITEMS == 2048 and TEXT == 1_000_000
    with pytest.raises(ValueError):
        body(input=[{"role": "user", "content": "y"}] * (ITEMS + 1))


def test_fields_that_break_a_guarantee_stay_refused_when_others_are_ignored():
    with pytest.raises(BadRequest) as prompt:
        create_request(body(prompt={"id": "pmpt_1"}, client_metadata={}), TERMS)
    assert (prompt.value.param, prompt.value.code) == ("prompt", "unsupported_parameter")
    for field in ("headers", "authorization", "connector_id"):
        with pytest.raises(BadRequest) as refused:
            create_request(body(tools=[{"type": "mcp", "server_label": "bank", field: "x"}]), TERMS)
        assert refused.value.code == "client_chosen_server"


def test_each_ignored_name_is_logged_once_and_the_header_cannot_be_forged(caplog, monkeypatch):
    monkeypatch.setattr(fields, "_logged", set())
    with caplog.at_level(logging.WARNING, logger=fields.__name__):
        noticed(["client_metadata"])
        noticed(["client_metadata", "tools.defer_loading"])
    assert [r.getMessage().count("client_metadata") for r in caplog.records] == [1, 0]
    headers = noticed(["a\r\nx-evil: 1", "ok"], ["web search"])
    assert headers == {"x-specagent-ignored-fields": "a%0D%0Ax-evil%3A%201,ok",
                       "x-specagent-dropped-tools": "web%20search"}
    many = noticed([f"f{i}" for i in range(40)])["x-specagent-ignored-fields"]
    assert many.endswith(",f31,(+8 more)")
    assert noticed(["x" * 100_000]) == {"x-specagent-ignored-fields": "x" * 64 + "..."}


def test_the_published_schema_takes_unknown_fields_unless_the_profile_is_strict():
    lax, lax_defs = create_schema(TERMS)
    tight, tight_defs = create_schema(replace(TERMS, strict=True))
    assert all(b.get("additionalProperties", True) is True for b in lax["anyOf"])
    assert all(b["additionalProperties"] is False for b in tight["anyOf"])
    assert lax_defs["ResponsesMessageItem"].get("additionalProperties", True) is True
    assert tight_defs["ResponsesMessageItem"]["additionalProperties"] is False
    by_url = create_schema(replace(TERMS, mcp=("bank", "git"), mcp_urls={"https://bank.example/mcp": "bank"}))[0]
    mcp = by_url["anyOf"][0]["properties"]["tools"]["items"]["anyOf"][0]["anyOf"]
    assert mcp[0]["properties"]["server_label"] == {"enum": ["bank", "git"]}
    assert mcp[1]["properties"]["server_url"] == {"enum": ["https://bank.example/mcp"]}
    assert mcp[1]["properties"]["server_label"]["anyOf"][1]["not"] == {"enum": ["git"]}  # another server's label
    assert all(mcp[0]["properties"][k] == {"type": "null"} for k in ("headers", "authorization", "connector_id"))
