"""A client source's ``read_tools``: the tools an operator trusts as reads whatever the client says (wires
without a read-only flag: Chat Completions, Anthropic Messages). Every other client tool is a write."""

from __future__ import annotations

import json

import openai

from specagent_ray.serve.core.config import ClientSource
from specagent_ray.testing.gateway_server import in_process_gateway

READ = {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
WRITE = {"type": "function", "name": "write_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}


def test_read_tools_are_reads_and_an_override_of_the_same_tool_wins():
    source = ClientSource(read_tools=["read_file", "grep"], overrides={"grep": "write"})
    assert source.reads() == {"read_file": "read", "grep": "write"}


def test_a_listed_read_goes_out_while_drafting_and_an_unlisted_tool_is_reviewed_first(tmp_path):
    app = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client", "read_tools": ["read_file"]}}}
    with in_process_gateway(tmp_path / "log", app=app, keys=("dev-key",)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0, timeout=30)
        plan = 'call read_file {"path": "a"}; call write_file {"path": "a"}; say done'
        first = client.responses.create(model="specagent", tools=[READ, WRITE], input=plan)
        assert first.output[-1].name == "read_file"
        assert first.usage.speculation["blocks"] == 0  # a read: out while the draft is written, before any review
        second = client.responses.create(model="specagent", previous_response_id=first.id, input=[
            {"type": "function_call_output", "call_id": first.output[-1].call_id, "output": "text"}])
        assert second.output[-1].name == "write_file" and json.loads(second.output[-1].arguments) == {"path": "a"}
        assert second.usage.speculation["blocks"] >= 1  # the write was staged and verified before it went out
