"""The Chat Completions request body (``POST /v1/chat/completions``), as OpenAI's specification writes it
(openai-python 2.x's ``completion_create_params``): every field a client following it may send is taken for
its shape, each bounded. A field this server does not know (a newer specification's, or a client's own,
such as vLLM's ``top_k`` or LiteLLM's ``cache_control`` on a message) is taken and ignored: each model notes
it (``fields.unknown_fields``), and the route names it in a header, or refuses it where the profile is strict.

These models only say what a request may hold; what the server does with each field is ``translate.py``'s
(and docs/serving.md's table). Types are JSON's, strictly: no string for a number.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, field_validator

from ..agents.fields import Spec
from ..core.api import json_integer

TEXT = 1_000_000  # characters of one text (the gateway caps the whole body in bytes)
MESSAGES = 4096  # messages in one request (a coding agent's long session replays them all)
PARTS = 64  # content parts in one message
MAX_OUTPUT = 1_000_000  # the most tokens an output may be asked for (``core.api.Sampling.max_output_tokens``)

Text = Annotated[str, Field(max_length=TEXT)]
Name = Annotated[str, Field(min_length=1, max_length=128)]
Id = Annotated[str, Field(min_length=1, max_length=200)]
Loose = Annotated[dict[str, Any], Field(max_length=64)]  # a nested object this server keeps only as context


class CacheBreakpoint(Spec):
    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class TextPart(Spec):
    type: Literal["text"]
    text: Text
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class RefusalPart(Spec):
    type: Literal["refusal"]
    refusal: Text


class ImageUrl(Spec):
    url: Annotated[str, Field(max_length=TEXT)]
    detail: Literal["auto", "low", "high", "original"] | None = None


class ImagePart(Spec):
    type: Literal["image_url"]
    image_url: ImageUrl
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class InputAudio(Spec):
    data: Annotated[str, Field(max_length=TEXT)]
    format: Literal["wav", "mp3"]


class AudioPart(Spec):
    type: Literal["input_audio"]
    input_audio: InputAudio
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class FileData(Spec):
    file_data: Annotated[str, Field(max_length=TEXT)] | None = None
    file_id: Id | None = None
    filename: Annotated[str, Field(max_length=256)] | None = None


class FilePart(Spec):
    type: Literal["file"]
    file: FileData
    prompt_cache_breakpoint: CacheBreakpoint | None = None


UserPart = Annotated[TextPart | ImagePart | AudioPart | FilePart, Field(discriminator="type")]
AssistantPart = Annotated[TextPart | RefusalPart, Field(discriminator="type")]
TextContent = Text | Annotated[list[TextPart], Field(max_length=PARTS)]


class SystemMessage(Spec):
    """``system`` or ``developer``: the agent's instructions, wherever the message stands."""

    role: Literal["system", "developer"]
    content: TextContent
    name: Name | None = None


class ChatUserMessage(Spec):
    role: Literal["user"]
    content: Text | Annotated[list[UserPart], Field(max_length=PARTS)]
    name: Name | None = None


class FunctionCall(Spec):
    name: Name
    arguments: Text


class FunctionToolCall(Spec):
    """A past tool call, replayed: context, never run."""

    type: Literal["function"]
    id: Id
    function: FunctionCall


class CustomCall(Spec):
    name: Name
    input: Text


class CustomToolCall(Spec):
    type: Literal["custom"]
    id: Id
    custom: CustomCall


ToolCall = Annotated[FunctionToolCall | CustomToolCall, Field(discriminator="type")]


class AudioRef(Spec):
    id: Id


class AssistantMessage(Spec):
    """The agent's past turn: its text and/or its tool calls (history, replayed by the client)."""

    role: Literal["assistant"]
    content: Text | Annotated[list[AssistantPart], Field(max_length=PARTS)] | None = None
    tool_calls: list[ToolCall] | None = Field(None, max_length=128)
    function_call: FunctionCall | None = None  # the deprecated single call
    refusal: Text | None = None
    name: Name | None = None
    audio: AudioRef | None = None


class ToolMessage(Spec):
    """The client's result of a tool call: new input where it answers this server's pending call."""

    role: Literal["tool"]
    content: TextContent
    tool_call_id: Id


class FunctionMessage(Spec):
    """The deprecated result of an assistant's ``function_call`` (by function name, without a call id)."""

    role: Literal["function"]
    content: Text | None
    name: Name


def _role(v: Any) -> str:
    role = v.get("role") if isinstance(v, dict) else getattr(v, "role", None)
    return "system" if role == "developer" else str(role)


Message = Annotated[
    Annotated[SystemMessage, Tag("system")] | Annotated[ChatUserMessage, Tag("user")]
    | Annotated[AssistantMessage, Tag("assistant")] | Annotated[ToolMessage, Tag("tool")]
    | Annotated[FunctionMessage, Tag("function")], Discriminator(_role)]


class FunctionDefinition(Spec):
    name: Annotated[str, Field(min_length=1, max_length=128)]
    description: Annotated[str, Field(max_length=100_000)] | None = None
    parameters: Annotated[dict[str, Any], Field(max_length=256)] | None = None
    strict: bool | None = None


class FunctionTool(Spec):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Spec):
    name: Name


class NamedChoice(Spec):
    type: Literal["function"]
    function: NamedFunction


class NamedCustomChoice(Spec):
    type: Literal["custom"]
    custom: NamedFunction


class AllowedTools(Spec):
    mode: Literal["auto", "required"]
    tools: list[Loose] = Field(max_length=128)


class AllowedChoice(Spec):
    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


ToolChoice = Annotated[NamedChoice | NamedCustomChoice | AllowedChoice, Field(discriminator="type")]


# OpenAI's strict rules at a strict schema's root, as published (``core.api.OutputFormat`` checks them everywhere)
STRICT_ROOT = {"required": ["type", "additionalProperties"], "not": {"required": ["anyOf"]},
               "properties": {"type": {"const": "object"}, "additionalProperties": {"const": False}}}


class JsonSchema(Spec):
    """A ``json_schema`` response format; published as taken: a strict one needs its schema, strict at its root."""

    model_config = ConfigDict(json_schema_extra={
        "if": {"required": ["strict"], "properties": {"strict": {"const": True}}},
        "then": {"required": ["schema"], "properties": {"schema": STRICT_ROOT}}})

    name: Annotated[str, Field(min_length=1, max_length=64)]
    description: Annotated[str, Field(max_length=2000)] | None = None
    schema_: Loose | None = Field(None, alias="schema")
    strict: bool | None = None


class ChatTextFormat(Spec):
    type: Literal["text", "json_object"]


class SchemaFormat(Spec):
    type: Literal["json_schema"]
    json_schema: JsonSchema


ResponseFormat = Annotated[ChatTextFormat | SchemaFormat, Field(discriminator="type")]


class ChatStreamOptions(Spec):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


Metadata = Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
                     Field(max_length=16)]
Stop = Annotated[str, Field(max_length=1000)] | Annotated[list[Annotated[str, Field(max_length=1000)]],
                                                          Field(max_length=4)]


class ChatCreate(Spec):
    """``POST /v1/chat/completions``: every field of OpenAI's create body, each bounded. Tools are kept
    loose (``tools``): a tool type this server does not host is dropped or refused, not a 400 of shape."""

    model: Annotated[str, Field(min_length=1, max_length=128)]
    messages: list[Message] = Field(min_length=1, max_length=MESSAGES)
    tools: list[Loose] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    functions: list[FunctionDefinition] | None = Field(None, max_length=128)
    function_call: Literal["none", "auto"] | NamedFunction | None = None
    response_format: ResponseFormat | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1, le=MAX_OUTPUT)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=MAX_OUTPUT)] | None = None
    stop: Stop | None = None
    seed: int | None = None
    user: Annotated[str, Field(max_length=256)] | None = None
    metadata: Metadata | None = None
    stream: bool | None = None
    stream_options: ChatStreamOptions | None = None
    # taken up to 128 so that the route refuses n > 1 in its own words; published as what it runs: 1
    n: Annotated[int, Field(ge=1, le=128, json_schema_extra={"maximum": 1})] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    logit_bias: Annotated[dict[str, int], Field(max_length=1024)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    modalities: list[Literal["text", "audio"]] | None = Field(None, max_length=2)
    audio: Loose | None = None
    prediction: Loose | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    store: bool | None = None
    prompt_cache_key: Annotated[str, Field(max_length=256)] | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: Loose | None = None
    safety_identifier: Annotated[str, Field(max_length=256)] | None = None
    web_search_options: Loose | None = None
    moderation: Loose | None = None

    _integers = field_validator("max_completion_tokens", "max_tokens", "seed", "n", "top_logprobs",
                                mode="before")(json_integer)


# One event of the route's ``text/event-stream`` answer, as OpenAPI 3.2's ``itemSchema`` (the route's 200 names it):
# ``data`` is a ``chat.completion.chunk`` as JSON, an error object, or ``[DONE]``.
STREAM_EVENT = {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string", "description": "a chat.completion.chunk (JSON), an error object (JSON), or [DONE]"}}}
