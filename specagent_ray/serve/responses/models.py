"""The Responses API's request body and input items, as the published specifications write them (Open
Responses 2026-04-24 and OpenAI's own fields): a body that a client following either may send is taken
for its shape. A field that this server does not know (a newer specification's, or a client's own such
as a coding agent's ``client_metadata``) is taken and ignored, as vLLM's OpenAI server does: each model
notes the names it was given and ignored (``unknown_fields`` lists them as dotted paths), and the routes
name them in a header, or refuse them where the profile is strict (``gateway.strict_fields``).

These models only say what a request may hold. What the server does with each field (honour it, or
take it and echo what was applied) is ``responses/translate.py``'s, and docs/serving.md's table. Their
types are strict: JSON Schema's types, no string for a number, so that the published schema
(``json_schema``; ``responses/schema.py``) and what is taken agree in both directions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from ..agents.fields import Spec, unknown_fields  # noqa: F401 - the wire's models and what they ignored
from ..core.api import json_integer

TEXT = 1_000_000  # characters of one text, any item (the gateway caps the whole body in bytes)
ITEMS = 2048  # items in one request's input (a coding agent's long session replays them all)
PARTS = 64  # content parts in one message


Text = Annotated[str, Field(max_length=TEXT)]
Id = Annotated[str, Field(min_length=1, max_length=200)]
Status = Literal["in_progress", "completed", "incomplete"]
Loose = Annotated[dict[str, Any], Field(max_length=64)]  # a nested object this server keeps only as context


class InputText(Spec):
    type: Literal["input_text"]
    text: Text


class OutputText(Spec):
    type: Literal["output_text"]
    text: Text
    annotations: list[Loose] = Field(default_factory=list, max_length=64)
    logprobs: list[Loose] | None = Field(None, max_length=64)


class Refusal(Spec):
    type: Literal["refusal"]
    refusal: Text


class InputImage(Spec):
    type: Literal["input_image"]
    image_url: Annotated[str, Field(max_length=TEXT)] | None = None
    file_id: Id | None = None
    detail: Literal["low", "high", "auto"] | None = None


class InputFile(Spec):
    type: Literal["input_file"]
    file_id: Id | None = None
    file_data: Annotated[str, Field(max_length=TEXT)] | None = None
    file_url: Annotated[str, Field(max_length=4096)] | None = None
    filename: Annotated[str, Field(max_length=256)] | None = None


Part = Annotated[InputText | OutputText | Refusal | InputImage | InputFile, Field(discriminator="type")]
Content = Text | Annotated[list[Part], Field(max_length=PARTS)]


class MessageItem(Spec):
    """A message: ``user``'s is input; ``system`` and ``developer`` join the instructions; ``assistant``'s
    is history (context, replayed by the client)."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: Content
    id: Id | None = None
    status: Status | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(Spec):
    """A past function call, replayed: context, never run."""

    type: Literal["function_call"]
    call_id: Id
    name: Annotated[str, Field(min_length=1, max_length=128)]
    arguments: Text
    id: Id | None = None
    status: Status | None = None
    namespace: Annotated[str, Field(max_length=128)] | None = None


class FunctionCallOutputItem(Spec):
    """The client's result of a function call: input when it answers this server's pending call."""

    type: Literal["function_call_output"]
    call_id: Id
    output: Content
    id: Id | None = None
    status: Status | None = None


class McpCallItem(Spec):
    """A past MCP call, replayed: context, never run again."""

    type: Literal["mcp_call"]
    id: Id
    server_label: Annotated[str, Field(max_length=128)]
    name: Annotated[str, Field(max_length=128)]
    arguments: Text
    output: Text | None = None
    error: Text | None = None
    status: Literal["in_progress", "completed", "incomplete", "calling", "failed"] | None = None
    approval_request_id: Id | None = None


class McpListToolsItem(Spec):
    type: Literal["mcp_list_tools"]
    id: Id
    server_label: Annotated[str, Field(max_length=128)]
    tools: list[Loose] = Field(max_length=512)
    error: Text | None = None


class McpApprovalRequestItem(Spec):
    type: Literal["mcp_approval_request"]
    id: Id
    server_label: Annotated[str, Field(max_length=128)]
    name: Annotated[str, Field(max_length=128)]
    arguments: Text


class McpApprovalResponseItem(Spec):
    """The client's answer to an approval request: input."""

    type: Literal["mcp_approval_response"]
    approval_request_id: Id
    approve: bool
    reason: Annotated[str, Field(max_length=2000)] | None = None
    id: Id | None = None


class ReasoningItem(Spec):
    type: Literal["reasoning"]
    id: Id | None = None
    summary: list[Loose] = Field(default_factory=list, max_length=64)
    content: list[Loose] | None = Field(None, max_length=64)
    encrypted_content: Text | None = None
    status: Status | None = None


class ItemReference(Spec):
    """An item of the tenant's own, by id: resolved against its conversations (404 for any other)."""

    type: Literal["item_reference"]
    id: Id


def _kind(v: Any) -> str:
    return (v.get("type") if isinstance(v, dict) else getattr(v, "type", None)) or "message"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")] | Annotated[McpCallItem, Tag("mcp_call")]
    | Annotated[McpListToolsItem, Tag("mcp_list_tools")]
    | Annotated[McpApprovalRequestItem, Tag("mcp_approval_request")]
    | Annotated[McpApprovalResponseItem, Tag("mcp_approval_response")]
    | Annotated[ReasoningItem, Tag("reasoning")] | Annotated[ItemReference, Tag("item_reference")],
    Discriminator(_kind)]
INPUTS = (MessageItem, FunctionCallOutputItem, McpApprovalResponseItem)  # kinds that are new input, not history


class ConversationRef(Spec):
    """A response's ``conversation`` as an object."""

    id: Annotated[str, Field(max_length=64)]


Metadata = Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
                     Field(max_length=16)]


class ConversationCreate(Spec):
    """``POST /v1/conversations``: its first items (at most 20) and metadata."""

    items: list[InputItem] | None = Field(None, max_length=20)
    metadata: Metadata | None = None


class ConversationUpdate(Spec):
    """``POST /v1/conversations/{id}``: its new metadata."""

    metadata: Metadata


class ConversationItems(Spec):
    """``POST /v1/conversations/{id}/items``: items to add (at most 20)."""

    items: list[InputItem] = Field(min_length=1, max_length=20)


class Reasoning(Spec):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class TextFormat(Spec):
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str, Field(max_length=64)] | None = None
    schema_: Loose | None = Field(None, alias="schema")
    description: Annotated[str, Field(max_length=2000)] | None = None
    strict: bool | None = None


class TextParam(Spec):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class StreamOptions(Spec):
    include_obfuscation: bool | None = None


class FunctionChoice(Spec):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=128)]


class McpChoice(Spec):
    type: Literal["mcp"]
    server_label: Annotated[str, Field(max_length=128)]
    name: Annotated[str, Field(max_length=128)] | None = None


class AllowedTool(Spec):
    type: Literal["function", "mcp"]
    name: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    server_label: Annotated[str, Field(max_length=128)] | None = None


class AllowedToolsChoice(Spec):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[AllowedTool] = Field(max_length=128)


ToolChoice = Annotated[FunctionChoice | McpChoice | AllowedToolsChoice, Field(discriminator="type")]


class ResponseCreate(Spec):
    """``POST /v1/responses``: every field of the specifications' create body, each bounded."""

    model: Annotated[str, Field(min_length=1, max_length=128)]
    input: Annotated[str, Field(max_length=TEXT)] | Annotated[list[InputItem], Field(max_length=ITEMS)]
    instructions: Annotated[str, Field(max_length=TEXT)] | None = None
    tools: list[Loose] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: Annotated[int, Field(ge=1, le=1000)] | None = None
    previous_response_id: Annotated[str, Field(max_length=64)] | None = None
    conversation: Annotated[str, Field(max_length=64)] | ConversationRef | None = None
    include: list[Annotated[str, Field(max_length=64)]] | None = Field(None, max_length=16)
    reasoning: Reasoning | None = None
    text: TextParam | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    max_output_tokens: Annotated[int, Field(ge=16, le=1_000_000)] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: Metadata | None = None
    store: bool | None = None
    background: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    prompt_cache_key: Annotated[str, Field(max_length=256)] | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: Annotated[str, Field(max_length=256)] | None = None
    user: Annotated[str, Field(max_length=256)] | None = None
    prompt: Loose | None = None

    _integers = field_validator("max_tool_calls", "top_logprobs", "max_output_tokens", mode="before")(json_integer)


class InputTokensBody(Spec):
    """``POST /v1/responses/input_tokens``: what a create body gives the models, to count."""

    model: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    input: Annotated[str, Field(max_length=TEXT)] | Annotated[list[InputItem], Field(max_length=ITEMS)] | None = None
    instructions: Annotated[str, Field(max_length=TEXT)] | None = None
    tools: list[Loose] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: Annotated[str, Field(max_length=64)] | None = None
    conversation: Annotated[str, Field(max_length=64)] | ConversationRef | None = None
    reasoning: Reasoning | None = None
    text: TextParam | None = None
    truncation: Literal["auto", "disabled"] | None = None


def json_schema() -> dict[str, Any]:
    """The create body's JSON Schema with its definitions inlined under ``$defs``."""
    return ResponseCreate.model_json_schema(by_alias=True)
