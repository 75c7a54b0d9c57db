"""Anthropic Messages requests, translated at the edge into the agent service's terms. Pure functions.

A request carries the whole conversation. It is read apart (``read``): the instructions (``system``, and any
``system``-role message, in order), the history (every message up to and including the last assistant
message) and the new input after it (user text, ``tool_result`` blocks). The history is compared, as the
client-visible conversation (``agents/canon.py``), with the tenant's sessions (``AgentService.bind``): a
match continues its session with the new input as a turn (``turn_post``); anything else starts a new
session (``create_request``) whose opening message is the new user text and whose context is the history
rendered as a transcript. Nothing in a history is ever executed: a replayed ``tool_use`` is context.

Every field is honoured, or taken and ignored (docs/serving.md's table); a field this server does not
know is ignored and named (``ignored``), or refused where the profile is strict. Refused (400), strict or
not: an ``mcp_servers`` entry whose URL is not one this server's operator configured, or that carries
credentials (a client never makes this server reach a server of its choosing, or use its secrets); a
model this server does not serve.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


from ..agents import canon, fields
from ..agents.canon import Canon
from ..agents.fields import validated
from ..agents.port import TurnPost
from ..agents.terms import Terms, normal_url
from ..core.api import (
    ClientTool,
    CreateSession,
    OutputFormat,
    Sampling,
    SourceUse,
    ToolResult,
    UserMessage,
)
from ..core.errors import BadRequest
from ..log.records import TurnMeta
from .models import (
    CustomTool,
    McpServer,
    Message,
    MessagesBody,
    MessagesCreate,
    Named,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

CONTINUE = "Continue."  # a new session's opening where the new input holds no user text
CONTEXT = ("The conversation so far, as the client replayed it (context only: every call in it already ran or "
           "never will; do not repeat one because it is listed here):\n")
MIN_OUTPUT = 16  # the fewest tokens an engine is asked to write (``Sampling.max_output_tokens``)
SAME = ("method", "instructions", "tool_source", "client_tools", "allowed_tools", "more_sources",
        "parallel_calls", "output_format")  # what a continued session must share with the request

Piece = list[dict[str, Any]] | ToolUseBlock | ToolResultBlock  # a run of text parts, a call, or a result


@dataclass(frozen=True)
class Reading:
    """A request, read apart: ``history`` (canon, the instructions first) up to the last assistant
    message, and the ``new`` input after it, as canon (what the client will replay) and as a turn's
    ``inputs``; a new session's ``opening`` message and ``context`` (the history and any new tool
    results as a transcript); the kinds of non-text blocks it names (``media``)."""

    instructions: str | None
    history: tuple[Canon, ...]
    new: tuple[Canon, ...]
    inputs: tuple[UserMessage | ToolResult, ...]
    opening: str
    context: str | None
    media: tuple[str, ...]

    @property
    def replayed(self) -> bool:
        """Whether the history holds anything the agent said (only then can it be a session's)."""
        return any(item[0] in ("assistant", "call") for item in self.history)


def read(body: MessagesBody) -> Reading:
    """``body``'s messages apart (``Reading``)."""
    instructions = instructions_of(body)
    talk = [m for m in body.messages if m.role != "system"]
    last = max((i for i, m in enumerate(talk) if m.role == "assistant"), default=-1)
    before = [(m.role, p) for m in talk[:last + 1] for p in pieces(m)]
    after = [(m.role, p) for m in talk[last + 1:] for p in pieces(m)]
    history = ([canon.system(instructions)] if instructions else []) + [_canon(r, p) for r, p in before]
    users = [_text(p) for r, p in after if isinstance(p, list) and r == "user"]
    inputs = [_input(p) for r, p in after if r == "user" and isinstance(p, list | ToolResultBlock)]
    earlier = [*before, *((r, p) for r, p in after if not isinstance(p, list))]
    lines = [line for r, p in earlier if (line := _line(r, p))]
    kinds = sorted({str(part["type"]) for m in body.messages for p in pieces(m) if isinstance(p, list)
                    for part in p if part["type"] in ("image", "document")})
    return Reading(instructions, tuple(history), tuple(_canon(r, p) for r, p in after),
                   tuple(i for i in inputs if i is not None), "\n\n".join(u for u in users if u) or CONTINUE,
                   CONTEXT + "\n".join(lines) if lines else None, tuple(kinds))


def instructions_of(body: MessagesBody) -> str | None:
    """``system`` (a string, or its text blocks), then every ``system``-role message's text, in order."""
    given = [body.system] if isinstance(body.system, str) else [b.text for b in body.system or []]
    given += [_text(p) for m in body.messages if m.role == "system" for p in pieces(m) if isinstance(p, list)]
    return "\n\n".join(g for g in given if g) or None


def pieces(message: Message) -> list[Piece]:
    """A message's content in order: each run of text-like blocks (text; other blocks named by type) as
    one list of parts, each ``tool_use`` (in an assistant message) and ``tool_result`` (in a user one)."""
    if isinstance(message.content, str):
        return [[{"type": "text", "text": message.content}]]
    out: list[Piece] = []
    for block in message.content:
        own = isinstance(block, ToolUseBlock) if message.role == "assistant" else isinstance(block, ToolResultBlock)
        if own:
            out.append(block)  # type: ignore[arg-type]
            continue
        part = {"type": "text", "text": block.text} if isinstance(block, TextBlock) else {"type": block.type}
        if out and isinstance(out[-1], list):
            out[-1].append(part)
        else:
            out.append([part])
    return out


def _text(parts: Iterable[dict[str, Any]] | str | None) -> str:
    """Text parts joined; any other part named (``[image]``), never read: the engines read text."""
    if parts is None or isinstance(parts, str):
        return parts or ""
    return "\n\n".join(p["text"] if p["type"] == "text" else f"[{p['type']}]" for p in parts)


def _result_text(block: ToolResultBlock) -> str:
    content = block.content
    if content is None or isinstance(content, str):
        return content or ""
    return _text({"type": "text", "text": c.text} if isinstance(c, TextBlock) else {"type": c.type} for c in content)


def _canon(role: str, piece: Piece) -> Canon:
    if isinstance(piece, ToolUseBlock):
        return canon.call(piece.id, piece.name, piece.input)
    if isinstance(piece, ToolResultBlock):
        return canon.result(piece.tool_use_id, _result_text(piece))
    return canon.assistant(piece) if role == "assistant" else canon.user(piece)


def _input(piece: Piece) -> UserMessage | ToolResult | None:
    if isinstance(piece, ToolResultBlock):
        return ToolResult(call_id=piece.tool_use_id, content=_result_text(piece)[:1_000_000],
                          error=bool(piece.is_error))
    text = _text(piece)  # type: ignore[arg-type]
    return UserMessage(text=text) if text.strip() else None


def _line(role: str, piece: Piece) -> str | None:
    if isinstance(piece, ToolUseBlock):
        return f"agent called {piece.name}({json.dumps(piece.input)}) [call {piece.id}]"
    if isinstance(piece, ToolResultBlock):
        error = " (an error)" if piece.is_error else ""
        return f"result of call {piece.tool_use_id}{error}: {_result_text(piece)}"
    text = _text(piece)  # type: ignore[arg-type]
    return f"{role}: {text}" if text else None


def content_canon(content: Sequence[dict[str, Any]]) -> list[Canon]:
    """An answer's content blocks (``answer.message``) as canon, as the client will replay them."""
    return [_canon("assistant", p) for p in pieces(Message.model_validate({"role": "assistant", "content": content}))]


# -- what the request asks of the session -----------------------------------------------------------------

def ignored(body: MessagesBody, strict: bool) -> list[str]:
    """The request's fields this server does not know (dotted paths); ``strict``: the first is refused."""
    return fields.ignored(body, strict)


def dropped(body: MessagesBody) -> list[str]:
    """The types of the request's server tools (web_search, bash, text_editor, ...): hosted nowhere here."""
    return list(dict.fromkeys(t.type for t in body.tools or [] if isinstance(t, Named)))


def tools_of(body: MessagesBody, terms: Terms) -> dict[str, Any]:
    """The session's tool fields: the client's custom tools (none for ``tool_choice: none``) on the
    profile's client source, and the operator's MCP servers that ``mcp_servers`` names by URL."""
    if dropped(body) and terms.unhosted == "refuse":
        raise BadRequest(f"tools: server tools ({', '.join(dropped(body))}) are not hosted here; an operator can "
                         "drop them with gateway.unhosted_tools: drop", "tools", "unsupported_tool_type")
    servers = [s for m in body.mcp_servers or [] if (s := _mcp(m, terms)) is not None]
    none = body.tool_choice is not None and body.tool_choice.type == "none"
    customs = [] if none else [t for t in body.tools or [] if isinstance(t, CustomTool)]
    if servers and not customs and terms.function_source is None:
        return {"tool_source": servers[0].tool_source, "client_tools": [], "allowed_tools": servers[0].allowed_tools,
                "more_sources": servers[1:]}
    if terms.function_source is None:
        raise BadRequest("this server has no client tool source: custom tools (and no tools) need one", "tools")
    tools = [validated(ClientTool, name=t.name, description=t.description or "",
                        **({"parameters": t.input_schema} if t.input_schema else {})) for t in customs]
    return {"tool_source": terms.function_source, "client_tools": tools, "allowed_tools": None,
            "more_sources": servers}


def _mcp(server: McpServer, terms: Terms) -> SourceUse | None:
    """An ``mcp_servers`` entry: one of the operator's servers, named by exactly its configured URL (compared,
    never fetched); 400 for any other URL, and for credentials, which never come from a client."""
    if server.authorization_token is not None:
        raise BadRequest("mcp_servers: authorization_token cannot come from a client; this server reaches only "
                         "the MCP servers its operator configured, with their own credentials",
                         "mcp_servers.authorization_token", "client_chosen_server")
    label = terms.mcp_urls.get(normal_url(server.url) or "")
    if label is None:
        raise BadRequest("mcp_servers: url is none of the MCP server URLs this server's operator configured; "
                         "this server never reaches a server of the client's choosing", "mcp_servers.url",
                         "client_chosen_server")
    config = server.tool_configuration or {}
    if config.get("enabled") is False:
        return None
    allowed = config.get("allowed_tools")
    return validated(SourceUse, tool_source=label, allowed_tools=allowed if isinstance(allowed, list) else None)


def parallel_of(body: MessagesBody, terms: Terms) -> bool:
    """Several tool calls in one answer where the profile allows them and ``disable_parallel_tool_use`` is not set."""
    return terms.parallel and not (body.tool_choice is not None and body.tool_choice.disable_parallel_tool_use)


def sampling_of(body: MessagesCreate) -> Sampling:
    """``max_tokens`` (at least ``MIN_OUTPUT``), ``temperature`` and ``top_p`` (0: greedy); ``top_k`` is not passed."""
    asked: dict[str, Any] = {"temperature": body.temperature, "top_p": body.top_p,
                             "max_output_tokens": max(body.max_tokens, MIN_OUTPUT)}
    if body.top_p == 0:
        asked.update(temperature=0.0, top_p=None)
    return validated(Sampling, **{k: v for k, v in asked.items() if v is not None})


def format_of(body: MessagesBody) -> OutputFormat | None:
    """The final message's JSON schema: ``output_config.format`` (or the beta's ``output_format``)."""
    fmt = body.output_config.format if body.output_config is not None else None
    fmt = fmt or body.output_format
    return None if fmt is None else validated(OutputFormat, type="json_schema", schema=fmt.schema_)


def create_request(body: MessagesCreate, reading: Reading, terms: Terms) -> CreateSession:
    """The session a request starts: its new user text opens it; the history so far (and any new tool
    results) is its context, never run."""
    if reading.media and terms.text_only_model is not None:
        raise BadRequest(f"messages: {', '.join(reading.media)} blocks: model {terms.text_only_model!r} takes text "
                         "only", "messages", "unsupported_content")
    return validated(CreateSession, message=reading.opening, user="client", method=terms.method(body.model),
                      instructions=reading.instructions, context=reading.context,
                      parallel_calls=parallel_of(body, terms), sampling=sampling_of(body),
                      output_format=format_of(body), **tools_of(body, terms))


def continues(session: CreateSession, wanted: CreateSession) -> bool:
    """Whether a request that asks ``wanted`` can be a turn of a session created with ``session``: the same
    model, instructions, tools and format (else a handoff: a new session)."""
    return all(getattr(session, f) == getattr(wanted, f) for f in SAME)


def turn_post(reading: Reading, previous: int, meta: TurnMeta) -> TurnPost | None:
    """The turn after ``previous`` with the request's new input; None where it brings none (a prefill)."""
    if not reading.inputs:
        return None
    return validated(TurnPost, previous=previous, inputs=list(reading.inputs), meta=meta)


def meta(body: MessagesCreate, created_at: int) -> TurnMeta:
    """The turn's ``TurnMeta``: the model named, ``metadata.user_id``, the custom tools the agent had."""
    user = body.metadata.user_id if body.metadata is not None else None
    tools = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
             for t in body.tools or [] if isinstance(t, CustomTool)]
    return TurnMeta(model=body.model, metadata={"user_id": user} if user else {}, created_at=created_at, tools=tools)


def rendered(body: MessagesBody) -> str:
    """What ``count_tokens`` counts: instructions, every message's text, the custom tools' schemas."""
    reading = read(body)
    lines = [reading.instructions or ""]
    lines += [line for m in body.messages if m.role != "system" for p in pieces(m) if (line := _line(m.role, p))]
    lines += [json.dumps(t.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)
              for t in body.tools or [] if isinstance(t, CustomTool)]
    return "\n".join(line for line in lines if line)




__all__ = ["Reading", "continues", "create_request", "meta", "read", "turn_post"]
