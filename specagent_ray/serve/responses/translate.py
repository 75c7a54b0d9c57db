"""The OpenAI Responses API's requests, translated at the edge into the one state machine's calls.

A conversation is a session, a response is one turn of it (``turns.py``), a staged write that the
verifier accepted can also wait for the client's approval. ``POST /v1/responses`` without
``previous_response_id`` becomes a ``CreateSession`` (or, for a replay of a session of this server's,
a turn of it: ``responses/inputs.py``); with it, a ``TurnPost`` to that session. Nothing here keeps
state: the session log does (``responses/items.py`` reads it back).

Every field the specification allows is taken (``responses/models.py``); each is honoured or echoed as
applied in the response object (``applied``; docs/serving.md has the table). Refusals (400, with the
field in ``param``): a field no specification has; a tool that would make the server reach a URL of the
client's choosing; a tool type this server does not host (unless its operator drops them); an unknown
model (a method the profile does not serve is the coordinator's 403); a continuation that changes the
conversation's model, instructions or tools (409: the conversation has them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ...protocol.baselines import METHODS
from ..core.api import Approval, ClientTool, CreateSession, SourceUse, ToolResult, UserMessage
from ..core.config import AppConfig, ClientSource, McpSource, OpenAIEngines, SimEngines
from ..core.errors import BadRequest, Conflict, NotFound
from ..log.records import TurnMeta
from ..sessions.turns import ApprovalPost, TurnPost
from .input_tokens import TokenCounter
from .inputs import CONTINUE, Reading, context, media, read, text
from .models import (
    AllowedToolsChoice,
    FunctionCallOutputItem,
    McpApprovalResponseItem,
    MessageItem,
    ResponseCreate,
)

RESPONSE_ID = re.compile(r"^resp_(\d{1,3}-[0-9a-f]{16})_(\d{1,6})$")
NEVER_FROM_CLIENTS = ("server_url", "headers", "authorization", "connector_id")  # the server picks what it reaches
HOSTED = ("mcp", "function")  # tool types this server runs; any other is refused or dropped (``Terms.unhosted``)
SAMPLING = {"temperature": 0.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0}

__all__ = ["ResponseCreate", "Terms", "create_request", "turn_post", "applied", "meta", "parallel_of"]


@dataclass(frozen=True)
class Terms:
    """What the Responses API of this server offers: its models, its tool sources, what it does with a
    tool type it does not host, and whether its engines read only text (then an image is refused)."""

    methods: tuple[str, ...]
    aliases: Mapping[str, str]
    mcp: tuple[str, ...]
    function_source: str | None
    unhosted: Literal["refuse", "drop"] = "refuse"
    text_only_model: str | None = None  # the model an image or a file is refused for, if the engines read text only
    counter: TokenCounter = field(default_factory=TokenCounter)  # POST /v1/responses/input_tokens
    parallel: bool = False  # the profile's defaults.parallel_calls: the most parallel_tool_calls can turn on

    @classmethod
    def of(cls, cfg: AppConfig) -> Terms | None:
        """The terms of a server with config ``cfg``; None where no response could run (no MCP or client
        tool source, or simulated engines, which only replay benchmarks): it serves no Responses routes."""
        clients = [n for n, s in cfg.tool_sources.items() if isinstance(s, ClientSource)]
        mcp = tuple(n for n, s in cfg.tool_sources.items() if isinstance(s, McpSource))
        if isinstance(cfg.engines, SimEngines) or not (mcp or clients):
            return None
        verifier = cfg.engines.verifier if isinstance(cfg.engines, OpenAIEngines) else None
        return cls(tuple(cfg.methods), dict(cfg.gateway.model_aliases), mcp, clients[0] if clients else None,
                   cfg.gateway.unhosted_tools, verifier.model if verifier else None, TokenCounter(verifier),
                   cfg.defaults.parallel_calls)

    def method(self, model: str) -> str:
        """The method ``model`` names (400 for a name that is neither a method nor an alias)."""
        method = self.aliases.get(model, model)
        if method not in METHODS:
            known = ", ".join([*self.methods, *self.aliases])
            raise BadRequest(f"unknown model {model!r}; this server serves: {known}", "model", "model_not_found")
        return method


def response_id(sid: str, turn: int) -> str:
    return f"resp_{sid}_{turn}"


def parse_response_id(rid: str) -> tuple[str, int]:
    """The session and turn a response id names; a malformed id is one that does not exist (404)."""
    m = RESPONSE_ID.match(rid)
    if m is None:
        raise NotFound(f"no response {rid!r}")
    return m.group(1), int(m.group(2))


def refused(body: ResponseCreate) -> None:
    """400 for what no server of this kind does: stored prompts."""
    if body.prompt is not None:
        raise BadRequest("prompt: this server keeps no stored prompt templates; send instructions and input",
                         "prompt", "unsupported_parameter")


def parallel_of(body: ResponseCreate, terms: Terms) -> bool:
    """Whether a new session runs with parallel calls: the specification's default is true, so what the
    profile allows (``defaults.parallel_calls``), unless the client asks ``parallel_tool_calls: false``
    (then an action holds one tool call)."""
    return terms.parallel and body.parallel_tool_calls is not False


def applied(body: ResponseCreate, tools: list[dict[str, Any]], parallel: bool = False) -> dict[str, Any]:
    """The response object's fields that say what was applied of ``body``. Sampling: the engines decode
    greedily (temperature 0) whatever was asked; an action holds several tool calls only where the
    session runs with ``parallel`` calls; nothing is truncated; the final message is text; reasoning
    settings are not passed on."""
    choice = body.tool_choice if body.tool_choice == "none" or _allowed_choice(body.tool_choice) else "auto"
    choice = choice.model_dump(mode="json", exclude_none=True) if isinstance(choice, AllowedToolsChoice) else choice
    return {**SAMPLING, "tool_choice": choice, "parallel_tool_calls": parallel, "truncation": "disabled",
            "text": {"format": {"type": "text"}}, "reasoning": None, "max_output_tokens": None,
            "max_tool_calls": None, "service_tier": "default", "safety_identifier": body.safety_identifier,
            "prompt_cache_key": body.prompt_cache_key, "user": body.user, "tools": tools,
            "conversation": {"id": conversation} if (conversation := _conversation_id(body)) else None}


def _conversation_id(body: ResponseCreate) -> str | None:
    value = body.conversation
    return value if value is None or isinstance(value, str) else value.id


def meta(body: ResponseCreate, created_at: int, tools: list[dict[str, Any]], parallel: bool = False) -> TurnMeta:
    """The turn's ``TurnMeta``; ``parallel``: whether its session runs with parallel calls (echoed)."""
    return TurnMeta(model=body.model, metadata=body.metadata or {}, background=bool(body.background),
                    created_at=created_at, tools=tools, store=body.store is not False,
                    echo=applied(body, tools, parallel))


# -- a new conversation ----------------------------------------------------------------------------------

def create_request(body: ResponseCreate, terms: Terms, reading: Reading | None = None) -> CreateSession:
    """The session a first response starts (400 naming whatever this server cannot do). Its input's
    history (everything up to the agent's last item) and any function call outputs or approval answers
    are context; the user messages after the history open the session."""
    refused(body)
    reading = reading if reading is not None else read_input(body)
    _media(reading, terms)
    users = [i for i in reading.new if isinstance(i, MessageItem)]
    opening = "\n\n".join(t for i in users if (t := text(i.content)))
    earlier = [*reading.history, *(i for i in reading.new if not isinstance(i, MessageItem))]
    return _validated(CreateSession, message=opening or CONTINUE, user="client", method=terms.method(body.model),
                      instructions=instructions_of(body, reading), context=context(earlier),
                      parallel_calls=parallel_of(body, terms), **tools_of(body, terms))


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


def echoed_tools(body: ResponseCreate) -> list[dict[str, Any]]:
    """The tools the agent really has: the request's, less any unhosted type the operator drops, each
    function tool with every field the specification's ``FunctionTool`` has."""
    return [{"type": "function", "name": t.get("name"), "description": t.get("description"),
             "parameters": t.get("parameters"), "strict": t.get("strict")} if t.get("type") == "function" else t
            for t in body.tools or [] if t.get("type") in HOSTED]


def tools_of(body: ResponseCreate, terms: Terms) -> dict[str, Any]:
    """The session's tool fields (``CreateSession``'s ``tool_source``, ``client_tools``, ``allowed_tools``,
    ``approval``, ``more_sources``) of a request's ``tools`` and ``tool_choice`` (``none`` takes every tool
    away; ``allowed_tools`` narrows them). Function tools and any number of MCP servers mix: the function
    tools' client source comes first where there are function tools, else the first MCP server."""
    tools = body.tools or []
    other = sorted({str(t.get("type")) for t in tools} - set(HOSTED))
    if other and terms.unhosted == "refuse":
        raise BadRequest(f"tool type{'s' if len(other) > 1 else ''} {', '.join(other)} not hosted here (this server "
                         "runs the MCP servers its operator configured, and function tools); an operator can "
                         "drop such tools with gateway.unhosted_tools: drop", "tools", "unsupported_tool_type")
    keep = _kept(body.tool_choice)
    servers = [_mcp(t, terms, keep) for t in tools if t.get("type") == "mcp"]
    if len({u.tool_source for u in servers}) < len(servers):
        raise BadRequest("tools: an MCP server is listed twice", "tools", "duplicate_tool")
    functions = [_function(t) for t in tools if t.get("type") == "function"]
    if servers and not functions:
        first = servers[0]
        return {"tool_source": first.tool_source, "client_tools": [], "allowed_tools": first.allowed_tools,
                "approval": first.approval, "more_sources": servers[1:]}
    if terms.function_source is None:
        raise BadRequest("this server has no client tool source: function tools (and no tools) need one", "tools")
    return {"tool_source": terms.function_source, "allowed_tools": None, "approval": None, "more_sources": servers,
            "client_tools": [c for c in functions if keep is None or c.name in keep]}


def _allowed_choice(choice: Any) -> bool:
    return isinstance(choice, AllowedToolsChoice)


def _kept(choice: Any) -> set[str] | None:
    """The tool names ``tool_choice`` keeps: none for ``none``, those ``allowed_tools`` lists, or all (None)."""
    if choice == "none":
        return set()
    if isinstance(choice, AllowedToolsChoice):
        return {t.name for t in choice.tools if t.name}
    return None


def _mcp(tool: dict[str, Any], terms: Terms, keep: set[str] | None) -> SourceUse:
    named = [k for k in NEVER_FROM_CLIENTS if tool.get(k) is not None]
    if named:
        raise BadRequest(f"mcp tool: {', '.join(named)} cannot come from a client; name a server this server's "
                         f"operator configured by server_label ({', '.join(terms.mcp) or 'none here'})",
                         f"tools.{named[0]}", "client_chosen_server")
    unknown = sorted(set(tool) - {"type", "server_label", "allowed_tools", "require_approval", "server_description",
                                  *NEVER_FROM_CLIENTS})
    if unknown:
        raise BadRequest(f"mcp tool: unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
                         f"tools.{unknown[0]}", "unknown_parameter")
    described = tool.get("server_description")
    if described is not None and (not isinstance(described, str) or len(described) > 2000):
        raise BadRequest("mcp tool: server_description is a string of up to 2000 characters",
                         "tools.server_description")
    label = tool.get("server_label")
    if label not in terms.mcp:
        raise BadRequest(f"mcp tool: no MCP server labelled {label!r} here; this server offers: "
                         f"{', '.join(terms.mcp) or 'none'}", "tools.server_label", "mcp_server_not_found")
    allowed = _allowed(tool.get("allowed_tools"))
    if keep is not None:
        allowed = [n for n in allowed if n in keep] if allowed is not None else sorted(keep)
    rule = tool.get("require_approval")
    return _validated(SourceUse, tool_source=label, allowed_tools=allowed,
                      approval=approval_of("never" if rule is None else rule))


def _allowed(allowed: Any) -> list[str] | None:
    if allowed is None or isinstance(allowed, list):
        return allowed
    if isinstance(allowed, dict) and set(allowed) <= {"tool_names", "read_only"} and not allowed.get("read_only"):
        return allowed.get("tool_names")
    raise BadRequest("mcp tool: allowed_tools is a list of tool names or {tool_names: [...]} here",
                     "tools.allowed_tools")


def approval_of(rule: Any) -> Approval | None:
    """``require_approval`` as an approval rule: "never" (the default: the verifier approves writes),
    "always" (every verified write waits for the client), or {always: {tool_names}, never: {tool_names}}.
    Reads never wait for approval: they run while the draft is written."""
    if rule == "never":
        return None
    if rule == "always":
        return Approval()
    if not isinstance(rule, dict) or not set(rule) <= {"always", "never"}:
        raise BadRequest("mcp tool: require_approval is 'always', 'never' or {always: {tool_names}, never: {...}}",
                         "tools.require_approval")
    sides = {side: rule.get(side) or {} for side in ("always", "never")}
    for side, names in sides.items():
        if not isinstance(names, dict) or not set(names) <= {"tool_names"}:
            raise BadRequest(f"mcp tool: require_approval.{side} takes tool_names only (reads never wait here)",
                             "tools.require_approval")
    always = sides["always"].get("tool_names")
    return _validated(Approval, tools=always if "always" in rule else None,
                      exempt=sides["never"].get("tool_names") or [])


def _function(tool: dict[str, Any]) -> ClientTool:
    """A function tool: WRITE unless it says ``read_only: true`` and the server trusts its client source."""
    unknown = sorted(set(tool) - {"type", "name", "description", "parameters", "strict", "read_only"})
    if unknown:
        raise BadRequest(f"function tool: unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
                         f"tools.{unknown[0]}", "unknown_parameter")
    fields = {k: tool[k] for k in ("name", "description", "read_only") if tool.get(k) is not None}
    return _validated(ClientTool, **fields, **({"parameters": tool["parameters"]} if tool.get("parameters") else {}))


# -- a continuation ---------------------------------------------------------------------------------------

def turn_post(body: ResponseCreate, previous: int, request: CreateSession, terms: Terms, created_at: int,
              new: Sequence[Any] | None = None) -> TurnPost:
    """The next turn of a conversation whose session was created with ``request``; ``new``: its new
    input items (all of ``input`` unless a replay's history was read off)."""
    refused(body)
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
    return _validated(TurnPost, previous=previous, inputs=inputs,
                      meta=meta(body, created_at, echoed_tools(body), parallel))


def _input(item: Any) -> UserMessage | ToolResult | ApprovalPost | None:
    if isinstance(item, MessageItem):
        said = text(item.content)
        return _validated(UserMessage, text=said) if said else None
    if isinstance(item, FunctionCallOutputItem):
        return _validated(ToolResult, call_id=item.call_id, content=text(item.output))
    if isinstance(item, McpApprovalResponseItem):
        return _validated(ApprovalPost, approval_request_id=item.approval_request_id, approve=item.approve,
                          reason=item.reason)
    return None


def _validated(model: type[BaseModel], **fields: Any) -> Any:
    """``model(**fields)``; a validation error is a 400 that names the field and the problem."""
    try:
        return model(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or model.__name__
        raise BadRequest(f"{model.__name__.lower()}: {where}: {first['msg']}") from None
