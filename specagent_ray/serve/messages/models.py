"""Anthropic's Messages API request bodies (``POST /v1/messages``, ``/v1/messages/count_tokens``), as the
official SDK's types write them (``anthropic/types/message_create_params.py`` and its beta form): every
field a current client sends is taken for its shape. A field this server does not know is taken and
ignored: each model notes the names it was given and ignored (``unknown_fields`` lists them as dotted
paths), and the route names them in a header, or refuses them where the profile is strict.

These models only say what a request may hold; what the server does with each field (honour it, or take
it and ignore it) is ``messages/translate.py``'s, and docs/serving.md's table. Types are JSON's, strictly:
no string for a number or a bool.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from ..agents import fields
from ..core.api import json_integer

TEXT = 1_000_000  # characters of one text (the gateway caps the whole body in bytes)
Text = Annotated[str, Field(max_length=TEXT)]
Id = Annotated[str, Field(min_length=1, max_length=200)]
Loose = dict[str, Any]  # an object this server takes and does not read (cache_control, citations, sources, ...)


class Spec(fields.Spec):
    """A shape Anthropic's specification owns (``agents/fields.py``): its fields, JSON types only; a field
    it lacks is dropped and its name kept."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, populate_by_name=True)


class Named(BaseModel):
    """A block or tool of a kind this server names and never reads (a document, a thinking block, a
    server tool's result, a server tool): any fields, kept as given."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)
    type: str = Field(max_length=128)


class TextBlock(Spec):
    type: Literal["text"]
    text: Text
    cache_control: Loose | None = None
    citations: list[Loose] | None = None


class ImageBlock(Spec):
    """An image: named (``[image]``), never read; the engines on this path read text."""

    type: Literal["image"]
    source: Loose
    cache_control: Loose | None = None
    transformations: Loose | None = None


def _kind(known: tuple[str, ...]) -> Any:
    def kind(value: Any) -> str | None:
        tag = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return tag if tag in known else "other" if isinstance(tag, str) else None
    return Discriminator(kind)


ResultPart = Annotated[Annotated[TextBlock, Tag("text")] | Annotated[ImageBlock, Tag("image")]
                       | Annotated[Named, Tag("other")], _kind(("text", "image"))]


class ToolUseBlock(Spec):
    type: Literal["tool_use"]
    id: Id
    name: Annotated[str, Field(min_length=1, max_length=200)]
    input: dict[str, Any]
    cache_control: Loose | None = None
    caller: Loose | None = None
    toolset_name: str | None = None


class ToolResultBlock(Spec):
    type: Literal["tool_result"]
    tool_use_id: Id
    content: Text | list[ResultPart] | None = None
    is_error: bool | None = None
    cache_control: Loose | None = None
    toolset_name: str | None = None


Block = Annotated[Annotated[TextBlock, Tag("text")] | Annotated[ImageBlock, Tag("image")]
                  | Annotated[ToolUseBlock, Tag("tool_use")] | Annotated[ToolResultBlock, Tag("tool_result")]
                  | Annotated[Named, Tag("other")], _kind(("text", "image", "tool_use", "tool_result"))]


class Message(Spec):
    role: Literal["user", "assistant", "system"]
    content: Text | Annotated[list[Block], Field(max_length=100_000)]


class CustomTool(Spec):
    """A tool the client runs (``type`` absent or ``custom``): the agent's function tool."""

    name: Annotated[str, Field(min_length=1, max_length=128)]
    input_schema: dict[str, Any]
    description: str | None = Field(None, max_length=100_000)
    type: Literal["custom"] | None = None
    cache_control: Loose | None = None
    defer_loading: bool | None = None
    eager_input_streaming: bool | None = None
    input_examples: list[Loose] | None = None
    strict: bool | None = None
    allowed_callers: list[str] | None = None


Tool = Annotated[Annotated[CustomTool, Tag("custom")] | Annotated[Named, Tag("other")],
                 Discriminator(lambda v: "custom" if (v.get("type") if isinstance(v, dict) else getattr(v, "type", None))
                               in (None, "custom") else "other")]


class ToolChoice(Spec):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(None, max_length=200)
    disable_parallel_tool_use: bool | None = None


class Metadata(Spec):
    user_id: str | None = Field(None, max_length=512)


class JsonFormat(Spec):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(Spec):
    effort: str | None = Field(None, max_length=32)
    format: JsonFormat | None = None


class McpServer(Spec):
    """A remote MCP server the client names by URL (beta ``mcp_servers``)."""

    type: Literal["url"]
    url: str = Field(max_length=2048)
    name: str = Field(max_length=200)
    authorization_token: str | None = Field(None, max_length=10_000)
    tool_configuration: Loose | None = None


class MessagesBody(Spec):
    """What ``POST /v1/messages/count_tokens`` takes; ``MessagesCreate`` adds what only a create takes."""

    model: str = Field(min_length=1, max_length=256)
    messages: list[Message] = Field(min_length=1, max_length=100_000)
    system: Text | list[TextBlock] | None = None
    tools: list[Tool] | None = Field(None, max_length=512)
    tool_choice: ToolChoice | None = None
    thinking: Loose | None = None
    output_config: OutputConfig | None = None
    output_format: JsonFormat | None = None  # the structured-outputs beta's spelling, before output_config
    context_management: Loose | None = None
    mcp_servers: list[McpServer] | None = Field(None, max_length=32)
    cache_control: Loose | None = None
    betas: list[str] | None = Field(None, max_length=64)  # the SDK sends them as a header; a body may too


class MessagesCreate(MessagesBody):
    """``POST /v1/messages``: the body, every field Anthropic's SDK sends (its beta form's too)."""

    # a create takes a server only by a URL this server's operator configured, without credentials (else 400);
    # no static schema can list those URLs, so none is published (count_tokens takes any: it reaches none)
    mcp_servers: list[McpServer] | None = Field(None, max_length=32, json_schema_extra={"maxItems": 0})
    max_tokens: int = Field(ge=0, le=1_000_000)  # the most an output may be asked for (``Sampling``)
    stream: bool | None = None
    metadata: Metadata | None = None
    stop_sequences: list[Annotated[str, Field(max_length=1000)]] | None = Field(None, max_length=64)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    service_tier: str | None = Field(None, max_length=64)
    container: str | Loose | None = None
    inference_geo: str | None = Field(None, max_length=64)
    speed: str | None = Field(None, max_length=32)
    diagnostics: Loose | None = None
    user_profile_id: str | None = Field(None, max_length=256)
    workspace_id: str | None = Field(None, max_length=256)
    compaction: Loose | None = None
    fallbacks: list[Loose] | Loose | None = None
    fallback_credit_token: str | Loose | None = None
    billing_policy: str | Loose | None = None
    thread: str | Loose | None = None

    _integers = field_validator("max_tokens", "top_k", mode="before")(json_integer)


class CountTokensBody(MessagesBody):
    """``POST /v1/messages/count_tokens``."""


# One event of ``POST /v1/messages``'s ``text/event-stream`` answer, as OpenAPI 3.2's ``itemSchema`` (the route's
# 200 names it): Anthropic's event sequence, each event's ``data`` its JSON object.
STREAM_EVENT = {"type": "object", "required": ["event", "data"], "properties": {
    "event": {"enum": ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                       "message_delta", "message_stop", "ping", "error"]},
    "data": {"type": "string", "contentMediaType": "application/json"}}}
