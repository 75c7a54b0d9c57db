"""A Chat Completions request, translated at the edge into the agent service's terms. Pure functions.

Chat Completions is stateless: every request carries the whole conversation, and nothing in it names a
session. ``read`` splits the messages: the system and developer texts are the instructions (wherever they
stand, joined); everything up to and including the last assistant message is history; what follows is new
input (user messages, and tool messages answering the agent's calls). The history, as canon items
(``agents/canon.py``), is what the session binder matches against the tenant's sessions; a history that
matches none becomes a new session's context, a transcript the models read: nothing in it ever runs.

Every field of the specification is taken (``models.py``): honoured, or taken and ignored where nothing
here could apply it (docs/serving.md has the table). Refused (400, the field in ``param``): ``n`` other than
1, a tool type this server does not host where its operator refuses them, a strict profile's unknown field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


from ..agents import fields
from ..agents.canon import Canon, assistant, call, result, system, user
from ..agents.fields import validated
from ..agents.terms import Terms
from ..core.api import (
    ClientTool,
    CreateSession,
    OutputFormat,
    Sampling,
    ToolResult,
    UserMessage,
)
from ..core.errors import BadRequest
from ..log.records import TurnMeta
from .models import (
    AllowedChoice,
    AssistantMessage,
    ChatCreate,
    CustomToolCall,
    FunctionMessage,
    NamedChoice,
    SchemaFormat,
    SystemMessage,
    ToolMessage,
)
from .models import ChatUserMessage as UserMsg

CONTINUE = "Continue."  # a new session's opening where the request brings no new user text
HOSTED = ("function",)  # tool types this wire hosts: function tools (the client runs them)
FUNCTION_FIELDS = {"type", "function"}, {"name", "description", "parameters", "strict"}
Input = UserMessage | ToolResult


@dataclass(frozen=True)
class Reading:
    """A request's messages, read apart (see the module doc). ``history`` holds canon items,
    ``("system", instructions)`` first where there are instructions; ``new`` the input after the history,
    as messages."""

    instructions: str | None
    history: tuple[Canon, ...]
    new: tuple[Any, ...]

    def bindable(self) -> bool:
        """Whether the history holds anything the agent said: only then can it be a session's."""
        return any(item[0] in ("assistant", "call") for item in self.history)


@dataclass(frozen=True)
class ChatTurn:
    """What a request asks of the agent service: the session it would start (``request``), the inputs it
    posts to a session it continues (``inputs``, with ``said``: them as canon items) and the history."""

    reading: Reading
    request: CreateSession
    inputs: tuple[Input, ...]
    said: tuple[Canon, ...]




# -- what the server cannot do, and what it does not know ---------------------------------------------------

def refused(body: ChatCreate, terms: Terms) -> None:
    """400 for what no server of this kind does: more than one choice; a tool type it does not host where
    its operator refuses them."""
    if body.n not in (None, 1):
        raise BadRequest(f"n: {body.n} choices asked; an agent's turn has one answer (n: 1)", "n", "invalid_value")
    other = dropped(body)
    if other and terms.unhosted == "refuse":
        raise BadRequest(f"tool type {', '.join(other)} not hosted here (function tools are); an operator can "
                         "drop such tools with gateway.unhosted_tools: drop", "tools", "unsupported_tool_type")


def ignored(body: ChatCreate, strict: bool) -> list[str]:
    """The request's fields this server does not know, as dotted paths (``top_k``, ``messages.cache_control``,
    ``tools.function.x``); ``strict``: the first is refused (400 unknown_parameter)."""
    extra: set[str] = set()
    for tool in body.tools or []:
        if tool.get("type") in HOSTED:
            extra |= {f"tools.{k}" for k in tool if k not in FUNCTION_FIELDS[0]}
            inner = tool.get("function")
            extra |= {f"tools.function.{k}" for k in (inner if isinstance(inner, dict) else {})
                      if k not in FUNCTION_FIELDS[1]}
    return fields.ignored(body, strict, sorted(extra))


def dropped(body: ChatCreate) -> list[str]:
    """The types of the request's tools that this server does not host (``custom``, ...), each once."""
    return list(dict.fromkeys(str(t.get("type")) for t in body.tools or [] if t.get("type") not in HOSTED))


# -- the messages ---------------------------------------------------------------------------------------

def read(messages: Sequence[Any]) -> Reading:
    """The messages apart (``Reading``). A legacy ``function`` message answers the legacy ``function_call``
    before it; both take a synthetic call id (``function_call:<k>``), the same on every replay."""
    texts = [said_text(m.content) for m in messages if isinstance(m, SystemMessage)]
    instructions = "\n\n".join(t for t in texts if t) or None
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    last = max((i for i, m in enumerate(rest) if isinstance(m, AssistantMessage)), default=-1)
    history: list[Canon] = [system(instructions)] if instructions else []
    legacy = 0
    for m in rest[:last + 1]:
        items, legacy = canon_of(m, legacy)
        history += items
    return Reading(instructions, tuple(history), tuple(rest[last + 1:]))


def canon_of(m: Any, legacy: int = 0) -> tuple[list[Canon], int]:
    """One history message as canon items, and the count of legacy function calls so far."""
    if isinstance(m, UserMsg):
        return [user(parts(m.content))], legacy
    if isinstance(m, ToolMessage):
        return [result(m.tool_call_id, parts(m.content))], legacy
    if isinstance(m, FunctionMessage):
        return [result(f"function_call:{max(legacy - 1, 0)}", m.content or "")], legacy
    out = [assistant(parts(m.content) if m.content is not None else m.refusal)]
    for c in m.tool_calls or []:
        if isinstance(c, CustomToolCall):
            out.append(call(c.id, c.custom.name, json.dumps(c.custom.input)))
        else:
            out.append(call(c.id, c.function.name, c.function.arguments))
    if m.function_call is not None:
        out.append(call(f"function_call:{legacy}", m.function_call.name, m.function_call.arguments))
        legacy += 1
    return [i for i in out if i != ("assistant", "")], legacy


def parts(content: Any) -> Any:
    """A message's content as canon takes it: a string, or its parts as JSON objects."""
    return content if content is None or isinstance(content, str) else [p.model_dump(mode="json") for p in content]


def said_text(content: Any) -> str:
    """A content's text, as said (text parts joined; other parts named, not read)."""
    if isinstance(content, str):
        return content
    return "".join(getattr(p, "text", None) or getattr(p, "refusal", None) or f"[{p.type}]" for p in content)


def inputs_of(new: Sequence[Any]) -> tuple[list[Input], list[Canon]]:
    """The new messages as a turn's inputs (user messages; tool results, by the call id the server minted
    and sent as the tool call's ``id``), and as canon items. An empty user text is no input."""
    inputs: list[Input] = []
    said: list[Canon] = []
    for m in new:
        if isinstance(m, UserMsg):
            text = said_text(m.content)
            inputs += [validated(UserMessage, text=text)] if text else []
            said.append(user(parts(m.content)))
        elif isinstance(m, ToolMessage):
            inputs.append(validated(ToolResult, call_id=m.tool_call_id, content=said_text(m.content)))
            said.append(result(m.tool_call_id, parts(m.content)))
        elif isinstance(m, FunctionMessage):  # no call id: it cannot answer a pending call (a new session)
            said.append(result("function_call:0", m.content or ""))
    return inputs, said


def context_of(items: Sequence[Canon]) -> str | None:
    """A history as a transcript for a new session's models, or None when there is none. It says that
    none of it is to be done again."""
    lines = [_line(i) for i in items if i[0] != "system"]
    if not lines:
        return None
    return ("The conversation so far, as the client replayed it (context only: every call in it already "
            "ran or never will; do not repeat one because it is listed here):\n" + "\n".join(lines))


def _line(item: Canon) -> str:
    kind = item[0]
    if kind == "call":
        return f"agent called {item[2]}({item[3]}) [call {item[1]}]"
    if kind == "result":
        return f"result of call {item[1]}: {item[2]}"
    return f"{kind}: {item[1]}"


# -- tools, sampling, format ----------------------------------------------------------------------------

def tools_of(body: ChatCreate) -> list[ClientTool]:
    """The agent's client tools: the function tools (or the deprecated ``functions``), narrowed by
    ``tool_choice``: ``none`` takes them all away, a named function or ``allowed_tools`` keeps those named
    (a call is not forced: ``required`` keeps every tool)."""
    defs = [t.get("function") for t in body.tools or [] if t.get("type") == "function"]
    if body.tools is None and body.functions:
        defs = [f.model_dump(mode="json", exclude_none=True) for f in body.functions]
    tools = []
    for i, d in enumerate(defs):
        if not isinstance(d, dict):
            raise BadRequest("tools: a function tool needs its function object", f"tools.{i}.function")
        given = {k: d[k] for k in ("name", "description", "parameters") if d.get(k) is not None}
        tools.append(validated(ClientTool, **given))
    keep = kept(body)
    return [t for t in tools if keep is None or t.name in keep]


def kept(body: ChatCreate) -> set[str] | None:
    """The tool names ``tool_choice`` (or the deprecated ``function_call``) keeps; None: all."""
    choice = body.tool_choice if body.tool_choice is not None else body.function_call
    if choice == "none":
        return set()
    if isinstance(choice, NamedChoice):
        return {choice.function.name}
    if isinstance(choice, AllowedChoice):
        return {str(f.get("name")) for t in choice.allowed_tools.tools if isinstance(f := t.get("function"), dict)}
    if choice is not None and hasattr(choice, "name"):  # function_call: {"name": ...}
        return {choice.name}
    return None


MIN_OUTPUT_TOKENS = 16  # the least an agent's output may be bounded to (``Sampling``): a smaller limit is raised


def sampling_of(body: ChatCreate) -> Sampling | None:
    """The sampling asked (None: none): temperature, top_p (0 keeps only the likeliest token: greedy) and
    the token limit of each of the agent's outputs (``max_completion_tokens``, else ``max_tokens``)."""
    limit = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    limit = max(limit, MIN_OUTPUT_TOKENS) if limit is not None else None  # OpenAI allows 1; an action needs 16
    asked = {"temperature": body.temperature, "top_p": body.top_p, "max_output_tokens": limit}
    if body.top_p == 0:
        asked.update(temperature=0.0, top_p=None)
    given = {k: v for k, v in asked.items() if v is not None}
    return validated(Sampling, **given) if given else None


def format_of(body: ChatCreate) -> OutputFormat | None:
    """The final message's form: a JSON object (one its schema accepts), or None for text."""
    fmt = body.response_format
    if fmt is None or fmt.type == "text":
        return None
    if not isinstance(fmt, SchemaFormat):
        return validated(OutputFormat, type="json_object")
    s = fmt.json_schema
    return validated(OutputFormat, type="json_schema", name=s.name, schema=s.schema_ or {"type": "object"},
                     strict=s.strict)


def parallel_of(body: ChatCreate, terms: Terms) -> bool:
    """Parallel calls where the profile allows them, unless the client asks ``parallel_tool_calls: false``."""
    return terms.parallel and body.parallel_tool_calls is not False


# -- the service's bodies ---------------------------------------------------------------------------------

def translate(body: ChatCreate, terms: Terms) -> ChatTurn:
    """The request as the agent service takes it (400 naming whatever this server cannot do): the session
    it starts where its history binds to none (the history and any tool results its context, its new user
    text the opening), and the inputs it posts to the session it continues otherwise."""
    refused(body, terms)
    if terms.function_source is None:
        raise BadRequest("this server has no client tool source: chat completions need one", "tools")
    reading = read(body.messages)
    inputs, said = inputs_of(reading.new)
    users = [i.text for i in inputs if isinstance(i, UserMessage)]
    earlier = [*reading.history, *(s for s in said if s[0] == "result")]
    request = validated(CreateSession, tool_source=terms.function_source, user="client",
                        method=terms.method(body.model), message="\n\n".join(users) or CONTINUE,
                        instructions=reading.instructions, context=context_of(earlier),
                        client_tools=tools_of(body), parallel_calls=parallel_of(body, terms),
                        sampling=sampling_of(body), output_format=format_of(body))
    return ChatTurn(reading, request, tuple(inputs), tuple(said))


def continues(turn: ChatTurn, session: CreateSession) -> bool:
    """Whether a bound session can take this request's turn: the same model, instructions, tools, sampling
    and format (otherwise a handoff: a new session, the history its context), and input to take."""
    keys = ("method", "instructions", "client_tools", "output_format", "sampling")
    mine = turn.request
    same = all(getattr(mine, k) == getattr(session, k) for k in keys)
    return same and bool(turn.inputs) and bool(mine.parallel_calls) == bool(session.parallel_calls)


def meta_of(body: ChatCreate, created_at: int, tools: Sequence[ClientTool]) -> TurnMeta:
    """The turn's ``TurnMeta``: the model name asked, the metadata, the tools the agent had."""
    echoed = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
              for t in tools]
    return TurnMeta(model=body.model, metadata=body.metadata or {}, created_at=created_at, tools=echoed)


def applied(request: CreateSession, sampled: bool) -> dict[str, Any]:
    """What the session applies of a request, echoed in the extension field: the tools the agent has,
    whether an action may hold several calls, the final message's form, and the sampling (where the engines
    sample as asked; scripted and simulated engines decide every word, so none is applied there)."""
    s = request.sampling if sampled else None
    fmt = request.output_format
    return {"tools": [t.name for t in request.client_tools], "parallel_tool_calls": bool(request.parallel_calls),
            "response_format": fmt.type if fmt is not None else "text",
            "sampling": s.model_dump(exclude_none=True) if s is not None else None}
