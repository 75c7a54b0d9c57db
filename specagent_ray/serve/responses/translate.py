"""The OpenAI Responses API's requests, translated at the edge into the one state machine's calls.

A conversation is a session, a response is one turn of it (``turns.py``), a staged write that the
verifier accepted can also wait for the client's approval. ``POST /v1/responses`` without
``previous_response_id`` becomes a ``CreateSession`` (or, for a replay of a session of this server's,
a turn of it: ``responses/inputs.py``); with it, a ``TurnPost`` to that session. Nothing here keeps
state: the session log does (``responses/items.py`` reads it back).

Every field the specification allows is taken (``responses/models.py``); each is honoured or echoed as
applied in the response object (``applied``; docs/serving.md has the table). A field this server does not
know is ignored and named (``ignored``), or refused where the profile is strict. A tool type it does not
host is dropped (``dropped``) unless its operator refuses them. Refusals (400, with the field in
``param``), strict or not: a tool that would make the server reach a URL or use credentials of the
client's choosing (an MCP ``server_url`` is taken only where it is exactly one its operator configured);
a stored prompt; an unknown model (a method the profile does not serve is the coordinator's 403); a
continuation that changes the conversation's model, instructions or tools (409: the conversation has them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ..agents.port import ApprovalPost, TurnPost
from ..agents.readback import RESPONSE_ID, SAMPLING, parse_response_id, response_id
from ..agents.terms import Terms, normal_url
from ..core.api import CreateSession, OutputFormat, Sampling, ToolResult, UserMessage
from ..core.errors import BadRequest, Conflict
from ..log.records import TurnMeta
from .inputs import CONTINUE, Reading, context, media, read, text
from .models import (
    AllowedToolsChoice,
    FunctionCallOutputItem,
    McpApprovalResponseItem,
    MessageItem,
    ResponseCreate,
    unknown_fields,
)
from .tools import (
    allowed_choice,
    echoed_tools,
    tool_fields,
    tools_of,
    validated,
)

__all__ = ["RESPONSE_ID", "ResponseCreate", "Terms", "applied", "create_request", "meta", "normal_url",
           "parallel_of", "parse_response_id", "response_id", "turn_post"]


def refused(body: ResponseCreate, terms: Terms) -> None:
    """400 for what no server of this kind does: stored prompts; and, where the profile is strict, for a
    field it does not know."""
    if body.prompt is not None:
        raise BadRequest("prompt: this server keeps no stored prompt templates; send instructions and input",
                         "prompt", "unsupported_parameter")
    ignored(body, terms.strict)


def ignored(body: BaseModel, strict: bool) -> list[str]:
    """The fields of a request body that this server does not know, as dotted paths (``client_metadata``,
    ``tools.defer_loading``, ``input.content.x``): those of its models (``models.unknown_fields``) and of
    its hosted tools. Nothing reads them; ``strict``: the first is refused instead (400 unknown_parameter)."""
    found = sorted(unknown_fields(body) | tool_fields(getattr(body, "tools", None)))
    if found and strict:
        raise BadRequest(f"unknown parameter: {found[0]}", found[0], "unknown_parameter")
    return found


def parallel_of(body: ResponseCreate, terms: Terms) -> bool:
    """Whether a new session runs with parallel calls: the specification's default is true, so what the
    profile allows (``defaults.parallel_calls``), unless the client asks ``parallel_tool_calls: false``
    (then an action holds one tool call)."""
    return terms.parallel and body.parallel_tool_calls is not False


def sampling_of(body: ResponseCreate) -> Sampling | None:
    """The sampling a request asks (None: none); ``top_p: 0`` keeps only the likeliest token: greedy."""
    asked = {"temperature": body.temperature, "top_p": body.top_p, "max_output_tokens": body.max_output_tokens}
    if body.top_p == 0:
        asked.update(temperature=0.0, top_p=None)
    given = {k: v for k, v in asked.items() if v is not None}
    return validated(Sampling, **given) if given else None


def format_of(body: ResponseCreate) -> OutputFormat | None:
    """The final message's form that ``text.format`` asks: a JSON object (one its schema accepts), or
    None for text."""
    fmt = body.text.format if body.text is not None else None
    if fmt is not None and fmt.type != "json_schema" and fmt.schema_ is not None:
        raise BadRequest(f"text.format: a {fmt.type} format takes no schema (json_schema does)",
                         "text.format.schema", "invalid_value")
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return validated(OutputFormat, type="json_object")
    return validated(OutputFormat, type="json_schema", name=fmt.name, schema=fmt.schema_, strict=fmt.strict)


def applied(body: ResponseCreate, tools: list[dict[str, Any]], parallel: bool = False,
            session: CreateSession | None = None, sampled: bool = False) -> dict[str, Any]:
    """The response object's fields that say what was applied of ``body``, in a session created with
    ``session`` (whose sampling and format were fixed then; ``body``'s own where None). Sampling: what was
    asked where the engines sample (``sampled``), else what they do (greedy, no token limit); the final
    message's format, which every engine applies; an action holds several tool calls only where the
    session runs with ``parallel`` calls; nothing is truncated; reasoning settings are not passed on."""
    choice = body.tool_choice if body.tool_choice == "none" or allowed_choice(body.tool_choice) else "auto"
    choice = choice.model_dump(mode="json", exclude_none=True) if isinstance(choice, AllowedToolsChoice) else choice
    sampling = (session.sampling if session is not None else sampling_of(body)) if sampled else None
    fmt = session.output_format if session is not None else format_of(body)
    return {**SAMPLING, **_sampling_echo(sampling), "tool_choice": choice, "parallel_tool_calls": parallel,
            "truncation": "disabled", "text": {"format": _format_echo(fmt)}, "reasoning": None,
            "max_tool_calls": None, "service_tier": "default", "safety_identifier": body.safety_identifier,
            "prompt_cache_key": body.prompt_cache_key, "user": body.user, "tools": tools,
            "conversation": {"id": conversation} if (conversation := _conversation_id(body)) else None,
            # a handoff or a fork starts a new session, yet continues the response the client named
            **({"previous_response_id": body.previous_response_id} if body.previous_response_id else {})}


def _sampling_echo(sampling: Sampling | None) -> dict[str, Any]:
    s = sampling or Sampling()
    return {"temperature": SAMPLING["temperature"] if s.temperature is None else s.temperature,
            "top_p": SAMPLING["top_p"] if s.top_p is None else s.top_p, "max_output_tokens": s.max_output_tokens}


def _format_echo(fmt: OutputFormat | None) -> dict[str, Any]:
    if fmt is None or fmt.type == "json_object":
        return {"type": "text" if fmt is None else "json_object"}
    return {"type": "json_schema", "name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}


def _conversation_id(body: ResponseCreate) -> str | None:
    value = body.conversation
    return value if value is None or isinstance(value, str) else value.id


def meta(body: ResponseCreate, created_at: int, tools: list[dict[str, Any]], parallel: bool = False,
         session: CreateSession | None = None, sampled: bool = False) -> TurnMeta:
    """The turn's ``TurnMeta``; ``parallel``: whether its session runs with parallel calls (echoed);
    ``session`` and ``sampled``: as ``applied`` takes them."""
    return TurnMeta(model=body.model, metadata=body.metadata or {}, background=bool(body.background),
                    created_at=created_at, tools=tools, store=body.store is not False,
                    echo=applied(body, tools, parallel, session, sampled))


# -- a new conversation ----------------------------------------------------------------------------------

def create_request(body: ResponseCreate, terms: Terms, reading: Reading | None = None) -> CreateSession:
    """The session a first response starts (400 naming whatever this server cannot do). Its input's
    history (everything up to the agent's last item) and any function call outputs or approval answers
    are context; the user messages after the history open the session. Its sampling and the final
    message's format are the request's, for the whole session."""
    refused(body, terms)
    reading = reading if reading is not None else read_input(body)
    _media(reading, terms)
    users = [i for i in reading.new if isinstance(i, MessageItem)]
    opening = "\n\n".join(t for i in users if (t := text(i.content)))
    earlier = [*reading.history, *(i for i in reading.new if not isinstance(i, MessageItem))]
    return validated(CreateSession, message=opening or CONTINUE, user="client", method=terms.method(body.model),
                     instructions=instructions_of(body, reading), context=context(earlier),
                     parallel_calls=parallel_of(body, terms), sampling=sampling_of(body),
                     output_format=format_of(body), **tools_of(body, terms))

def read_input(body: ResponseCreate) -> Reading:
    return read([MessageItem(role="user", content=body.input)] if isinstance(body.input, str) else body.input)


def instructions_of(body: ResponseCreate, reading: Reading) -> str | None:
    """``instructions``, then the system and developer messages of the input, in order."""
    parts = [p for p in (body.instructions, *reading.instructions) if p]
    return "\n\n".join(parts) or None


def _media(reading: Reading, terms: Terms) -> None:
    kinds = media([*reading.history, *reading.new])
    if kinds and terms.text_only_model is not None:
        raise BadRequest(f"input: {', '.join(kinds)} parts: model {terms.text_only_model!r} takes text only",
                         "input", "unsupported_content")


# -- a continuation ---------------------------------------------------------------------------------------

def turn_post(body: ResponseCreate, previous: int, request: CreateSession, terms: Terms, created_at: int,
              new: Sequence[Any] | None = None) -> TurnPost:
    """The next turn of a conversation whose session was created with ``request``; ``new``: its new
    input items (all of ``input`` unless a replay's history was read off)."""
    refused(body, terms)
    reading = read_input(body)
    if new is None:
        if reading.history:
            raise BadRequest("input: past output items with previous_response_id: send only the new items "
                             "(the conversation has its history), or replay the whole history without it", "input")
        new = reading.new
    _media(reading, terms)
    # a handoff: the route starts a new session from here, whose context is the conversation so far
    if terms.method(body.model) != request.method:
        raise Conflict(f"a handoff to another model: this conversation runs {request.method!r}", "model", "handoff")
    said = instructions_of(body, reading)
    if said is not None and said != request.instructions:
        raise Conflict("a handoff: other instructions", "instructions", "handoff")
    if body.tools is not None:
        asked = tools_of(body, terms)
        if asked != {k: getattr(request, k) for k in asked}:
            raise Conflict("a handoff: other tools", "tools", "handoff")
    parallel = terms.parallel if request.parallel_calls is None else request.parallel_calls
    if body.parallel_tool_calls is not None and parallel_of(body, terms) != parallel:
        raise Conflict("a handoff: other parallel_tool_calls", "parallel_tool_calls", "handoff")
    inputs = [x for x in (_input(i) for i in new) if x is not None]
    if not inputs:
        raise BadRequest("input: nothing new to continue with (a user message, function_call_output or "
                         "mcp_approval_response)", "input")
    return validated(TurnPost, previous=previous, inputs=inputs,
                     meta=meta(body, created_at, echoed_tools(body, terms), parallel, request, terms.sampled))


def _input(item: Any) -> UserMessage | ToolResult | ApprovalPost | None:
    if isinstance(item, MessageItem):
        said = text(item.content)
        return validated(UserMessage, text=said) if said else None
    if isinstance(item, FunctionCallOutputItem):
        return validated(ToolResult, call_id=item.call_id, content=text(item.output))
    if isinstance(item, McpApprovalResponseItem):
        return validated(ApprovalPost, approval_request_id=item.approval_request_id, approve=item.approve,
                         reason=item.reason)
    return None
