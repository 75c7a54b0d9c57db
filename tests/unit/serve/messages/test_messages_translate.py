"""The Messages API's translation, pure: a request read apart into history (canon), new input and a
session's request; a turn's snapshot answered as Anthropic's Message and stream, which the official
``anthropic`` SDK's own stream accumulator must turn into the same message."""

from __future__ import annotations

import json

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message as SdkMessage

from specagent_ray.serve.agents import canon
from specagent_ray.serve.agents.terms import Terms
from specagent_ray.serve.core.api import ToolResult, UserMessage
from specagent_ray.serve.core.errors import BadRequest
from specagent_ray.serve.messages import answer
from specagent_ray.serve.messages.models import MessagesCreate
from specagent_ray.serve.messages.translate import (
    CONTINUE,
    content_canon,
    continues,
    create_request,
    dropped,
    ignored,
    read,
    rendered,
    turn_post,
)
from specagent_ray.serve.messages.translate import meta as meta_of

TERMS = Terms(methods=("specagent",), aliases={"claude-sonnet-4-5": "specagent"}, mcp=("bank",),
              function_source="app", mcp_urls={"https://bank.example/mcp": "bank"})
WRITE = {"name": "write_file", "description": "write a file",
         "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}}}
SID = "0-0123456789abcdef"


def body(messages: list, **extra) -> MessagesCreate:
    return MessagesCreate.model_validate({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages,
                                          **extra})


def loop_messages() -> list:
    """A tool loop as a client replays it: plan, a call, its result, a second call, its result."""
    return [{"role": "user", "content": "call read_file; call write_file"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"{SID}:w0", "name": "read_file",
                                               "input": {"path": "a"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"{SID}:w0", "content": "old"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Writing."},
                                              {"type": "tool_use", "id": f"{SID}:w1", "name": "write_file",
                                               "input": {"text": "b", "path": "a"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"{SID}:w1", "is_error": True,
                                          "content": [{"type": "text", "text": "disk full"}]},
                                         {"type": "text", "text": "try again"}]}]


def test_history_runs_to_the_last_assistant_message_and_the_rest_is_new_input():
    reading = read(body(loop_messages(), system=[{"type": "text", "text": "You code.",
                                                  "cache_control": {"type": "ephemeral"}}]))
    assert reading.instructions == "You code."
    assert reading.history == (canon.system("You code."), canon.user("call read_file; call write_file"),
                               canon.call(f"{SID}:w0", "read_file", {"path": "a"}), canon.result(f"{SID}:w0", "old"),
                               canon.assistant("Writing."), canon.call(f"{SID}:w1", "write_file", {"path": "a", "text": "b"}))
    assert reading.new == (canon.result(f"{SID}:w1", "disk full"), canon.user("try again"))
    assert reading.inputs == (ToolResult(call_id=f"{SID}:w1", content="disk full", error=True),
                              UserMessage(text="try again"))
    assert reading.opening == "try again" and reading.replayed


def test_a_new_session_gets_the_history_as_context_never_as_calls_to_run():
    reading = read(body(loop_messages()[:3], tools=[WRITE]))
    req = create_request(body(loop_messages()[:3], tools=[WRITE]), reading, TERMS)
    assert req.message == CONTINUE  # only a tool result is new: nothing to open with
    assert "context only" in req.context and "agent called read_file" in req.context and "result of call" in req.context
    assert [t.name for t in req.client_tools] == ["write_file"] and req.tool_source == "app"
    assert req.method == "specagent" and req.sampling.max_output_tokens == 1024


def test_a_first_request_has_no_history_and_no_context():
    reading = read(body([{"role": "user", "content": "hello"}], system="Be brief."))
    assert reading.history == (canon.system("Be brief."),) and not reading.replayed
    assert create_request(body([{"role": "user", "content": "hello"}]), reading, TERMS).context is None


def test_the_answer_replayed_by_the_client_is_the_transcript_remembered():
    snap = snapshot([{"type": "message", "content": [{"type": "output_text", "text": "Let me  look."}]},
                     {"type": "function_call", "call_id": f"{SID}:w2", "name": "read_file",
                      "arguments": '{"path": "x"}'}])
    msg = answer.message(snap, SID, 2, "claude-sonnet-4-5")
    first = read(body(loop_messages()))
    remembered = [*first.history, *first.new, *content_canon(msg["content"])]
    replay = [*loop_messages(), {"role": "assistant", "content": msg["content"]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"{SID}:w2", "content": "x!"}]}]
    assert list(read(body(replay, system=None)).history) == [i for i in remembered if i[0] != "system"]


def test_unknown_fields_are_named_and_refused_where_strict():
    b = body([{"role": "user", "content": [{"type": "text", "text": "hi", "glitter": 1}]}], sparkle=True,
             thinking={"type": "enabled", "budget_tokens": 2048}, context_management={"edits": []},
             service_tier="auto", container="c1", metadata={"user_id": "u1"}, top_k=5, temperature=0.2)
    assert ignored(b, strict=False) == ["messages.content.glitter", "sparkle"]
    with pytest.raises(BadRequest) as err:
        ignored(b, strict=True)
    assert err.value.param == "messages.content.glitter"
    assert meta_of(b, 0).metadata == {"user_id": "u1"}


def test_server_tools_are_dropped_and_named_custom_tools_are_the_agents():
    b = body([{"role": "user", "content": "x"}],
             tools=[WRITE, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
                    {"type": "bash_20250124", "name": "bash"}, {"type": "text_editor_20250728",
                                                                 "name": "str_replace_based_edit_tool"}])
    assert dropped(b) == ["web_search_20250305", "bash_20250124", "text_editor_20250728"]
    assert [t.name for t in create_request(b, read(b), TERMS).client_tools] == ["write_file"]
    with pytest.raises(BadRequest):
        create_request(b, read(b), Terms(**{**TERMS.__dict__, "unhosted": "refuse"}))
    none = body([{"role": "user", "content": "x"}], tools=[WRITE], tool_choice={"type": "none"})
    assert create_request(none, read(none), TERMS).client_tools == []


def test_mcp_servers_of_the_clients_choosing_are_refused_configured_ones_are_used():
    def req(server: dict):
        b = body([{"role": "user", "content": "x"}], mcp_servers=[{"type": "url", "name": "s", **server}])
        return create_request(b, read(b), TERMS)

    with pytest.raises(BadRequest) as err:
        req({"url": "https://evil.example/mcp"})
    assert err.value.code == "client_chosen_server"
    with pytest.raises(BadRequest):
        req({"url": "https://bank.example/mcp", "authorization_token": "secret"})
    used = req({"url": "https://BANK.example/mcp/", "tool_configuration": {"allowed_tools": ["get_balance"]}})
    assert [(s.tool_source, s.allowed_tools) for s in used.more_sources] == [("bank", ["get_balance"])]


def test_sampling_format_and_model():
    b = body([{"role": "user", "content": "x"}], max_tokens=1, temperature=0.5,
             output_config={"effort": "low", "format": {"type": "json_schema", "schema": {
                 "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}})
    req = create_request(b, read(b), TERMS)
    assert req.sampling.max_output_tokens == 16 and req.sampling.temperature == 0.5
    assert req.output_format.type == "json_schema" and req.output_format.schema_["required"] == ["a"]
    with pytest.raises(BadRequest) as err:
        create_request(body([{"role": "user", "content": "x"}], model="gpt-x"), read(b), TERMS)
    assert err.value.code == "model_not_found"


def test_images_are_named_not_read_and_refused_for_a_text_only_model():
    b = body([{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                                           {"type": "text", "text": "what is this"}]}])
    reading = read(b)
    assert reading.new == (canon.user("[image] what is this"),) and reading.media == ("image",)
    with pytest.raises(BadRequest):
        create_request(b, reading, Terms(**{**TERMS.__dict__, "text_only_model": "tiny"}))


def test_a_continuation_needs_the_same_model_instructions_and_tools():
    b = body(loop_messages(), tools=[WRITE], system="S")
    reading = read(b)
    first = create_request(b, reading, TERMS)
    assert continues(first, create_request(b, reading, TERMS))
    other = body(loop_messages(), tools=[WRITE], system="T")
    assert not continues(first, create_request(other, read(other), TERMS))
    post = turn_post(reading, 1, meta_of(b, 0))
    assert post.previous == 1 and len(post.inputs) == 2
    prefill = body([*loop_messages()[:2]])
    assert turn_post(read(prefill), 0, meta_of(prefill, 0)) is None


def test_count_tokens_renders_system_messages_and_tools():
    text = rendered(body(loop_messages(), system="S", tools=[WRITE]))
    assert text.startswith("S\n") and "disk full" in text and '"name": "write_file"' in text


# -- answers -----------------------------------------------------------------------------------------------

def snapshot(output: list, status: str = "completed") -> dict:
    return {"status": status, "output": output, "error": None,
            "usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 120}, "output_tokens": 40,
                      "speculation": {"blocks": 1, "accepted_steps": 2}}}


CALL = {"type": "function_call", "call_id": f"{SID}:w0", "name": "write_file", "arguments": '{"path": "a", "text": "b"}'}
MCP = {"type": "mcp_call", "name": "get_balance", "server_label": "bank", "arguments": "{}", "output": "100",
       "error": None}


def test_a_snapshot_is_an_anthropic_message_that_the_sdk_parses():
    msg = answer.message(snapshot([MCP, {"type": "message", "content": [{"type": "output_text", "text": "ok"}]}, CALL]),
                         SID, 3, "claude-sonnet-4-5")
    parsed = SdkMessage.model_validate(msg)
    assert parsed.id == f"msg_{SID}_3" and parsed.stop_reason == "tool_use"
    assert [b.type for b in parsed.content] == ["text", "tool_use"]
    assert parsed.content[1].id == f"{SID}:w0" and parsed.content[1].input == {"path": "a", "text": "b"}
    assert (parsed.usage.input_tokens, parsed.usage.cache_read_input_tokens, parsed.usage.output_tokens) == (180, 120, 40)
    assert msg["specagent"]["server_tool_calls"][0]["output"] == "100"
    assert msg["specagent"]["speculation"]["accepted_steps"] == 2


def test_stop_reasons_and_failures():
    said = [{"type": "message", "content": [{"type": "output_text", "text": "done"}]}]
    assert answer.message(snapshot(said), SID, 0, "m")["stop_reason"] == "end_turn"
    assert answer.message(snapshot([], "incomplete"), SID, 0, "m")["stop_reason"] == "max_tokens"
    failed = {**snapshot([], "failed"), "error": {"message": "engine down"}}
    assert answer.failure(failed).status == 500 and "engine down" in answer.failure(failed).message
    assert answer.failure(snapshot(said)) is None


def test_the_stream_accumulated_by_the_sdk_equals_the_message():
    final = answer.message(snapshot([{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}, CALL]),
                           SID, 1, "claude-sonnet-4-5")
    events = answer.started(SID, 1, "claude-sonnet-4-5")
    for i, block in enumerate(final["content"]):
        events += list(answer.block_events(block, i))
    events += answer.ended(final)
    kinds = [e["type"] for e in events]
    assert kinds == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    snap, bufs = None, {}
    for e in json.loads(json.dumps(events)):  # as sent
        if e["type"] != "ping":
            snap = accumulate_event(event=e, current_snapshot=snap, json_bufs=bufs)
    skip = {"specagent"}
    assert snap.model_dump(exclude=skip) == SdkMessage.model_validate(final).model_dump(exclude=skip)


def test_a_stream_error_event_is_anthropics_shape():
    assert answer.error_event(503, "later") == {"type": "error", "error": {"type": "overloaded_error",
                                                                          "message": "later"}}
