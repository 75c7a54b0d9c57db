"""The Chat Completions wire's translation, pure: a request's messages read apart into instructions, history
(canon items) and new input; its fields into the session's; a turn's snapshot into OpenAI's
``ChatCompletion`` and ``ChatCompletionChunk`` objects, checked against openai-python's own types. And the
one property the session binder rests on: what the wire remembers after a turn is exactly the history
that the client's next request reads as, when the client appends the answer as the SDK gives it."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from specagent_ray.serve.agents.terms import Terms
from specagent_ray.serve.agents.transcript import canon_of
from specagent_ray.serve.agents import fields
from specagent_ray.serve.chat.answer import (
    Chunks,
    Turn,
    completion,
    failure,
    finish_reason,
)
from specagent_ray.serve.chat.models import ChatCreate
from specagent_ray.serve.chat.translate import (
    CONTINUE,
    applied,
    continues,
    dropped,
    ignored,
    read,
    translate,
)
from specagent_ray.serve.core.api import ToolResult, UserMessage
from specagent_ray.serve.core.errors import BadRequest

TERMS = Terms(("specagent", "strong"), {"my-agent": "specagent"}, (), "app")
READ = {"type": "function", "function": {"name": "read_file", "description": "read a file",
                                         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
WRITE = {"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}}}}
SID = "0-0123456789abcdef"


def body(messages: list[dict], **extra) -> ChatCreate:
    return ChatCreate.model_validate({"model": "my-agent", "messages": messages, "tools": [READ, WRITE], **extra})


def snapshot(output: list[dict], status: str = "completed") -> dict:
    usage = {"input_tokens": 420, "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 320},
             "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 470,
             "speculation": {"blocks": 1, "drafted_steps": 2, "accepted_steps": 2, "strong_calls": 0}}
    return {"id": f"resp_{SID}_0", "status": status, "output": output, "usage": usage, "error": None,
            "incomplete_details": None}


def fn_call(call_id: str, name: str, args: dict) -> dict:
    return {"type": "function_call", "id": f"fc_{SID}_3", "call_id": call_id, "name": name,
            "arguments": json.dumps(args), "status": "completed"}


def said(text: str) -> dict:
    return {"type": "message", "id": f"msg_{SID}_9", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


MCP = {"type": "mcp_call", "id": f"mcp_{SID}_2_0", "server_label": "bank", "name": "get_balance",
       "arguments": "{}", "output": "100", "error": None, "status": "completed"}


def test_messages_read_apart_into_instructions_history_and_new_input():
    req = body([{"role": "system", "content": "You are a coder."},
                {"role": "user", "content": [{"type": "text", "text": "fix  it"}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"{SID}:r0.0-0badc0de", "type": "function",
                     "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]},
                {"role": "developer", "content": "Be brief."},
                {"role": "tool", "tool_call_id": f"{SID}:r0.0-0badc0de", "content": "hello"},
                {"role": "user", "content": "and now?"}])
    reading = read(req.messages)
    assert reading.instructions == "You are a coder.\n\nBe brief."  # wherever they stand, in order
    assert reading.history == (("system", "You are a coder. Be brief."), ("user", "fix it"),
                               ("call", f"{SID}:r0.0-0badc0de", "read_file", '{"path":"a"}'))
    turn = translate(req, TERMS)
    assert turn.inputs == (ToolResult(call_id=f"{SID}:r0.0-0badc0de", content="hello"),
                           UserMessage(text="and now?"))
    assert turn.said == (("result", f"{SID}:r0.0-0badc0de", "hello"), ("user", "and now?"))
    r = turn.request
    assert (r.method, r.tool_source, r.message, r.instructions) == ("specagent", "app", "and now?",
                                                                     "You are a coder.\n\nBe brief.")
    assert [t.name for t in r.client_tools] == ["read_file", "write_file"]
    # were it a new session, the history and the tool result are context, never actions
    assert "agent called read_file" in r.context and "result of call" in r.context and "do not repeat" in r.context


def test_a_first_request_has_no_bindable_history_and_opens_with_its_user_text():
    turn = translate(body([{"role": "user", "content": "call read_file {}"}]), TERMS)
    assert not turn.reading.bindable() and turn.request.message == "call read_file {}"
    assert turn.request.context is None and turn.reading.history == ()
    only_tool = translate(body([{"role": "assistant", "content": "hi"},
                                {"role": "tool", "tool_call_id": "x", "content": "r"}]), TERMS)
    assert only_tool.request.message == CONTINUE and "result of call x: r" in only_tool.request.context


def test_fields_sampling_format_tool_choice_and_parallel():
    req = body([{"role": "user", "content": "hi"}], temperature=0.5, top_p=0.9, max_tokens=64,
               max_completion_tokens=32, response_format={"type": "json_schema", "json_schema": {
                   "name": "out", "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                                                             "required": ["a"], "additionalProperties": False}}},
               tool_choice={"type": "function", "function": {"name": "write_file"}}, parallel_tool_calls=False)
    r = translate(req, replace(TERMS, parallel=True)).request
    assert (r.sampling.temperature, r.sampling.top_p, r.sampling.max_output_tokens) == (0.5, 0.9, 32)
    assert r.output_format.type == "json_schema" and r.output_format.name == "out" and r.output_format.strict
    assert [t.name for t in r.client_tools] == ["write_file"] and r.parallel_calls is False
    assert applied(r, sampled=False) == {"tools": ["write_file"], "parallel_tool_calls": False,
                                         "response_format": "json_schema", "sampling": None}
    assert applied(r, sampled=True)["sampling"] == {"temperature": 0.5, "top_p": 0.9, "max_output_tokens": 32}
    none = translate(body([{"role": "user", "content": "hi"}], tool_choice="none", top_p=0,
                          response_format={"type": "json_object"}), TERMS).request
    assert none.client_tools == [] and none.sampling.temperature == 0.0 and none.output_format.type == "json_object"
    legacy = ChatCreate.model_validate({"model": "specagent", "messages": [{"role": "user", "content": "hi"}],
                                        "functions": [READ["function"]], "function_call": "auto"})
    assert [t.name for t in translate(legacy, TERMS).request.client_tools] == ["read_file"]


def test_refusals_n_unknown_model_and_strict_unknown_fields_and_a_small_token_limit_raised():
    with pytest.raises(BadRequest, match="n: 2") as e:
        translate(body([{"role": "user", "content": "hi"}], n=2), TERMS)
    assert e.value.param == "n"
    translate(body([{"role": "user", "content": "hi"}], n=1), TERMS)
    with pytest.raises(BadRequest) as e:
        translate(body([{"role": "user", "content": "hi"}], model="gpt-4o"), TERMS)
    assert e.value.code == "model_not_found"
    small = translate(body([{"role": "user", "content": "hi"}], max_tokens=4), TERMS)  # OpenAI allows 1: raised
    assert small.request.sampling.max_output_tokens == 16
    odd = body([{"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}}], top_k=5,
               stream_options={"include_usage": True, "x": 1},
               tools=[{**READ, "function": {**READ["function"], "defer": True}}, {"type": "custom", "custom": {"name": "g"}}])
    assert ignored(odd, False) == ["messages.cache_control", "stream_options.x", "tools.function.defer", "top_k"]
    assert dropped(odd) == ["custom"]
    with pytest.raises(BadRequest, match="unknown parameter: messages.cache_control") as e:
        ignored(odd, True)
    assert e.value.code == "unknown_parameter"
    with pytest.raises(BadRequest, match="custom"):
        translate(odd, replace(TERMS, unhosted="refuse"))


def test_ignored_names_are_logged_once_and_named_in_a_header(caplog, monkeypatch):
    monkeypatch.setattr(fields, "_logged", set())  # other tests in this process may have filled the log's cap
    with caplog.at_level(logging.WARNING):
        first = fields.noticed(["zz_chat_probe"], ["custom"], "Chat Completions")
        fields.noticed(["zz_chat_probe"])
    assert first == {fields.IGNORED: "zz_chat_probe", fields.DROPPED: "custom"}
    assert sum("zz_chat_probe" in r.getMessage() for r in caplog.records) == 1


def test_continues_only_with_the_same_model_instructions_tools_and_new_input():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
    turn = translate(body(msgs), TERMS)
    assert continues(turn, turn.request)
    assert not continues(turn, turn.request.model_copy(update={"instructions": "other"}))
    assert not continues(turn, turn.request.model_copy(update={"method": "strong"}))
    assert not continues(turn, turn.request.model_copy(update={"client_tools": []}))
    nothing_new = translate(body(msgs[:3]), TERMS)
    assert not continues(nothing_new, nothing_new.request)


def test_a_completion_with_calls_validates_as_openais_chat_completion():
    snap = snapshot([MCP, said("Reading it."), fn_call(f"{SID}:w0", "write_file", {"path": "a", "text": "b"})])
    out = completion(snap, Turn(SID, 2, True, "my-agent", 1700000000), {"k": "v"})
    parsed = ChatCompletion.model_validate(out)
    choice = parsed.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Reading it."
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == [
        (f"{SID}:w0", "write_file", {"path": "a", "text": "b"})]
    assert (parsed.usage.prompt_tokens, parsed.usage.completion_tokens, parsed.usage.total_tokens) == (420, 50, 470)
    ext = out["specagent"]
    assert ext["session_id"] == SID and ext["turn"] == 2 and ext["session"] == "continued"
    assert ext["speculation"]["accepted_steps"] == 2 and [s["name"] for s in ext["server_steps"]] == ["get_balance"]
    assert "mcp" not in json.dumps(out["choices"])  # server-side steps are no chat output


def test_finish_reasons_and_failures():
    assert finish_reason(snapshot([said("done")])) == "stop"
    assert finish_reason(snapshot([said("so far")], "incomplete")) == "length"
    assert ChatCompletion.model_validate(completion(snapshot([], "incomplete"), Turn(SID, 0, False, "m", 1)))
    assert failure(snapshot([], "failed")).status == 500 and failure(snapshot([], "cancelled")).status == 409
    assert failure(snapshot([said("x")])) is None


def test_the_stream_is_openais_chunk_sequence():
    turn = Turn(SID, 0, False, "my-agent", 1700000000)
    chunks = Chunks(turn, include_usage=True)
    running = snapshot([said("Let me look.")], "in_progress")
    ended = snapshot([said("Let me look."), fn_call(f"{SID}:r0.0-0badc0de", "read_file", {"path": "a"}),
                      fn_call(f"{SID}:w0", "write_file", {"path": "a", "text": "b"})])
    out = [*chunks.feed(running), *chunks.feed(ended)]
    parsed = [ChatCompletionChunk.model_validate(c) for c in out]
    assert len({c.id for c in parsed}) == 1
    assert parsed[0].choices[0].delta.role == "assistant"
    assert parsed[1].choices[0].delta.content == "Let me look."
    assert [(d.index, d.id, d.function.name) for c in parsed[2:4] for d in c.choices[0].delta.tool_calls] == [
        (0, f"{SID}:r0.0-0badc0de", "read_file"), (1, f"{SID}:w0", "write_file")]
    assert parsed[4].choices[0].finish_reason == "tool_calls" and out[4]["specagent"]["session_id"] == SID
    assert parsed[5].choices == [] and parsed[5].usage.total_tokens == 470
    assert all(c.usage is None for c in parsed[:5])
    plain = list(Chunks(turn).feed(snapshot([said("hi")])))
    assert [c["choices"][0]["finish_reason"] for c in plain] == [None, None, "stop"] and "usage" not in plain[0]


def test_what_is_remembered_is_what_the_next_request_reads_as_history():
    """The binder's property, wire side: the client appends the answer (as the SDK returns it) and a tool
    message; that request's history equals the previous history, its new input and the turn's output."""
    first = [{"role": "system", "content": "You code."},
             {"role": "user", "content": 'call read_file {"path": "a"}; say done'}]
    turn = translate(body(first), TERMS)
    snap = snapshot([fn_call(f"{SID}:r0.0-0badc0de", "read_file", {"path": "a"})])
    remembered = [*turn.reading.history, *turn.said, *canon_of(snap["output"])]
    answer = ChatCompletion.model_validate(completion(snap, Turn(SID, 0, False, "my-agent", 1)))
    replay = [*first, answer.choices[0].message.model_dump(exclude_none=True),
              {"role": "tool", "tool_call_id": answer.choices[0].message.tool_calls[0].id, "content": "x"}]
    nxt = translate(body(replay), TERMS)
    assert list(nxt.reading.history) == remembered and nxt.reading.bindable()
    assert nxt.inputs == (ToolResult(call_id=f"{SID}:r0.0-0badc0de", content="x"),)
