"""The OpenAI Responses API's requests, translated at the edge into the one state machine's calls.

A conversation is a session, a response is one turn of it (``turns.py``), a staged write that the
verifier accepted can also wait for the client's approval. ``POST /v1/responses`` without
``previous_response_id`` becomes a ``CreateSession``; with it, a ``TurnPost`` to that session. Nothing
here keeps state: the session log does (``response_items.py`` reads it back).

Refusals, each naming what it refuses: a parameter this server does not support (400: nothing is
silently ignored), a tool that would make the server reach a URL of the client's choosing (400), an
unknown model (400; a method the profile does not serve is the coordinator's 403), a continuation
that changes the conversation's model, instructions or tools (409: the conversation has them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from ..protocol.baselines import METHODS
from .api import TOOL_NAME, Approval, ClientTool, CreateSession, ToolResult, UserMessage
from .config import AppConfig, ClientSource, McpSource, SimEngines
from .errors import BadRequest, Conflict, NotFound
from .records import TurnMeta
from .turns import ApprovalPost, TurnPost

RESPONSE_ID = re.compile(r"^resp_(\d{1,3}-[0-9a-f]{16})_(\d{1,6})$")
NEVER_FROM_CLIENTS = ("server_url", "headers", "authorization", "connector_id")  # the server picks what it reaches


class ResponseCreate(BaseModel):
    """``POST /v1/responses``. Unknown parameters are kept (``extra``) only to be refused by name."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1, max_length=128, description="a served method (specagent, strong) or an "
                       "alias the profile maps to one")
    input: str | list[dict[str, Any]] = Field(description="a user message, or a list of input items: messages, "
                                              "function_call_output, mcp_approval_response")
    instructions: str | None = Field(None, max_length=20000, description="the agent's role and policy")
    tools: list[dict[str, Any]] | None = Field(None, max_length=128, description="one MCP server "
                                               "(server_label) or function tools")
    previous_response_id: str | None = Field(None, max_length=64, description="continue that conversation")
    stream: StrictBool = False
    background: StrictBool = False
    store: StrictBool | None = None
    metadata: dict[str, str] | None = Field(None, max_length=16)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None

    def refused(self) -> str | None:
        """Why this server cannot honour the request as asked, or None."""
        extra = sorted(self.model_extra or {})
        if extra:
            return f"unsupported parameter{'s' if len(extra) > 1 else ''}: {', '.join(extra)}"
        if self.store is False:
            return "store: false is not supported: a conversation's state is its session log"
        if self.tool_choice not in (None, "auto"):
            return "tool_choice: only 'auto' is supported (the agent, checked by the verifier, picks its tools)"
        if any(len(k) > 64 or len(v) > 512 for k, v in (self.metadata or {}).items()):
            return "metadata: keys up to 64 characters, values up to 512"
        return None


@dataclass(frozen=True)
class Terms:
    """What the Responses API of this server offers: its models and its tool sources."""

    methods: tuple[str, ...]
    aliases: Mapping[str, str]
    mcp: tuple[str, ...]
    function_source: str | None

    @classmethod
    def of(cls, cfg: AppConfig) -> Terms | None:
        """The terms of a server with config ``cfg``; None where no response could run (no MCP or client
        tool source, or simulated engines, which only replay benchmarks): it serves no Responses routes."""
        clients = [n for n, s in cfg.tool_sources.items() if isinstance(s, ClientSource)]
        mcp = tuple(n for n, s in cfg.tool_sources.items() if isinstance(s, McpSource))
        if isinstance(cfg.engines, SimEngines) or not (mcp or clients):
            return None
        return cls(tuple(cfg.methods), dict(cfg.gateway.model_aliases), mcp, clients[0] if clients else None)

    def method(self, model: str) -> str:
        """The method ``model`` names (400 for a name that is neither a method nor an alias)."""
        method = self.aliases.get(model, model)
        if method not in METHODS:
            known = ", ".join([*self.methods, *self.aliases])
            raise BadRequest(f"unknown model {model!r}; this server serves: {known}")
        return method


def response_id(sid: str, turn: int) -> str:
    return f"resp_{sid}_{turn}"


def parse_response_id(rid: str) -> tuple[str, int]:
    """The session and turn a response id names; a malformed id is one that does not exist (404)."""
    m = RESPONSE_ID.match(rid)
    if m is None:
        raise NotFound(f"no response {rid!r}")
    return m.group(1), int(m.group(2))


def meta(body: ResponseCreate, created_at: int) -> TurnMeta:
    return TurnMeta(model=body.model, metadata=body.metadata or {}, background=body.background,
                    created_at=created_at, tools=body.tools or [])


# -- a new conversation ----------------------------------------------------------------------------------

def create_request(body: ResponseCreate, terms: Terms) -> CreateSession:
    """The session a first response starts (400 naming whatever this server cannot do)."""
    why = body.refused()
    if why is not None:
        raise BadRequest(why)
    source, client_tools, allowed, approval = tools_of(body.tools or [], terms)
    messages = [i for i in inputs(body.input) if isinstance(i, UserMessage)]
    if len(messages) != len(inputs(body.input)) or not messages:
        raise BadRequest("a new conversation's input is user messages only (function_call_output and "
                         "mcp_approval_response continue one: send previous_response_id)")
    return _validated(CreateSession, tool_source=source, message="\n\n".join(m.text for m in messages),
                      user="client", method=terms.method(body.model), client_tools=client_tools,
                      instructions=body.instructions, allowed_tools=allowed, approval=approval)


def tools_of(tools: list[dict[str, Any]], terms: Terms) -> tuple[str, list[ClientTool], list[str] | None,
                                                                   Approval | None]:
    """(tool source, function tools, allowed tools, approval rule) of a request's ``tools``."""
    mcp = [t for t in tools if t.get("type") == "mcp"]
    functions = [t for t in tools if t.get("type") == "function"]
    other = sorted({str(t.get("type")) for t in tools} - {"mcp", "function"})
    if other:
        raise BadRequest(f"unsupported tool type{'s' if len(other) > 1 else ''}: {', '.join(other)} "
                         "(this server runs MCP servers its operator configured, and function tools)")
    if mcp and functions or len(mcp) > 1:
        raise BadRequest("a conversation uses one tool source: one MCP server, or function tools")
    if mcp:
        return _mcp(mcp[0], terms)
    if terms.function_source is None:
        raise BadRequest("this server has no client tool source: function tools (and no tools) need one")
    return terms.function_source, [_function(t) for t in functions], None, None


def _mcp(tool: dict[str, Any], terms: Terms) -> tuple[str, list[ClientTool], list[str] | None, Approval | None]:
    named = [k for k in NEVER_FROM_CLIENTS if k in tool]
    if named:
        raise BadRequest(f"mcp tool: {', '.join(named)} cannot come from a client; name a server this server's "
                         f"operator configured by server_label ({', '.join(terms.mcp) or 'none here'})")
    unknown = sorted(set(tool) - {"type", "server_label", "allowed_tools", "require_approval", "server_description"})
    if unknown:
        raise BadRequest(f"mcp tool: unsupported field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
    label = tool.get("server_label")
    if label not in terms.mcp:
        raise BadRequest(f"mcp tool: no MCP server labelled {label!r} here; this server offers: "
                         f"{', '.join(terms.mcp) or 'none'}")
    return label, [], _allowed(tool.get("allowed_tools")), approval_of(tool.get("require_approval", "never"))


def _allowed(allowed: Any) -> list[str] | None:
    if allowed is None or isinstance(allowed, list):
        return allowed
    if isinstance(allowed, dict) and set(allowed) <= {"tool_names"}:
        return allowed.get("tool_names")
    raise BadRequest("mcp tool: allowed_tools is a list of tool names or {tool_names: [...]} here")


def approval_of(rule: Any) -> Approval | None:
    """``require_approval`` as an approval rule: "never" (the default: the verifier approves writes),
    "always" (every verified write waits for the client), or {always: {tool_names}, never: {tool_names}}.
    Reads never wait for approval: they run while the draft is written."""
    if rule == "never":
        return None
    if rule == "always":
        return Approval()
    if not isinstance(rule, dict) or not set(rule) <= {"always", "never"}:
        raise BadRequest("mcp tool: require_approval is 'always', 'never' or {always: {tool_names}, never: {...}}")
    sides = {side: rule.get(side) or {} for side in ("always", "never")}
    for side, names in sides.items():
        if not isinstance(names, dict) or not set(names) <= {"tool_names"}:
            raise BadRequest(f"mcp tool: require_approval.{side} takes tool_names only (reads never wait here)")
    always = sides["always"].get("tool_names")
    return _validated(Approval, tools=always if "always" in rule else None,
                      exempt=sides["never"].get("tool_names") or [])


def _function(tool: dict[str, Any]) -> ClientTool:
    """A function tool: WRITE unless it says ``read_only: true`` and the server trusts its client source."""
    unknown = sorted(set(tool) - {"type", "name", "description", "parameters", "strict", "read_only"})
    if unknown:
        raise BadRequest(f"function tool: unsupported field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
    fields = {k: tool[k] for k in ("name", "description", "read_only") if tool.get(k) is not None}
    return _validated(ClientTool, **fields, **({"parameters": tool["parameters"]} if tool.get("parameters") else {}))


# -- a continuation ---------------------------------------------------------------------------------------

def turn_post(body: ResponseCreate, previous: int, request: CreateSession, terms: Terms, created_at: int) -> TurnPost:
    """The next turn of a conversation whose session was created with ``request``."""
    why = body.refused()
    if why is not None:
        raise BadRequest(why)
    if terms.method(body.model) != request.method:
        raise Conflict(f"a conversation keeps its model: this one runs {request.method!r}")
    if body.instructions is not None and body.instructions != request.instructions:
        raise Conflict("a conversation keeps its instructions: omit them, or send the same")
    if body.tools is not None:
        source, client_tools, allowed, approval = tools_of(body.tools, terms)
        if (source, client_tools, allowed, approval) != (request.tool_source, request.client_tools,
                                                         request.allowed_tools, request.approval):
            raise Conflict("a conversation keeps its tools: omit them, or send the same")
    return _validated(TurnPost, previous=previous, inputs=inputs(body.input), meta=meta(body, created_at))


def inputs(given: str | list[dict[str, Any]]) -> list[UserMessage | ToolResult | ApprovalPost]:
    """The input items as the session takes them (400 naming an item kind this server does not take)."""
    if isinstance(given, str):
        return [_validated(UserMessage, text=given)]
    return [_item(item, i) for i, item in enumerate(given)]


FIELDS = {"message": {"type", "role", "content"}, "function_call_output": {"type", "call_id", "output"},
          "mcp_approval_response": {"type", "approval_request_id", "approve", "reason"}}


def _item(item: dict[str, Any], i: int) -> UserMessage | ToolResult | ApprovalPost:
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise BadRequest(f"input[{i}]: type is a string")
    unknown = sorted(set(item) - FIELDS.get(kind, set(item)))
    if unknown:
        raise BadRequest(f"input[{i}]: unsupported field{'s' if len(unknown) > 1 else ''} of a {kind}: "
                         f"{', '.join(unknown)}")
    if kind == "message" and item.get("role") == "user":
        return _validated(UserMessage, text=_text(item.get("content"), i))
    if kind == "message":
        raise BadRequest(f"input[{i}]: only user messages are taken (put the agent's role in instructions)")
    if kind == "function_call_output":
        return _validated(ToolResult, call_id=item.get("call_id"), content=_text(item.get("output"), i))
    if kind == "mcp_approval_response":
        return _validated(ApprovalPost, approval_request_id=item.get("approval_request_id"),
                          approve=item.get("approve"), reason=item.get("reason"))
    raise BadRequest(f"input[{i}]: item type {kind!r} is not taken here (send previous_response_id rather than "
                     "past output items)")


def _text(content: Any, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and set(p) == {"type", "text"}
                                         and p["type"] == "input_text" and isinstance(p["text"], str) for p in content):
        return "".join(p["text"] for p in content)
    raise BadRequest(f"input[{i}]: content is a string or a list of input_text parts")


def _validated(model: type[BaseModel], **fields: Any) -> Any:
    """``model(**fields)``; a validation error is a 400 that names the field and the problem."""
    try:
        return model(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or model.__name__
        raise BadRequest(f"{model.__name__.lower()}: {where}: {first['msg']}") from None


# -- the published schema ---------------------------------------------------------------------------------

def create_schema(terms: Terms) -> dict[str, Any]:
    """``POST /v1/responses``'s body as this server takes it: every body the schema allows is one it can
    run (or answers 403, 404, 409, 413 or 429 for reasons no schema can see), in two alternatives, a new
    conversation and a continuation. Function tools (whose ``parameters`` are a client's JSON Schema,
    checked as ``ClientTool`` does) and ``allowed_tools`` (which names only the server's catalog knows)
    are taken but not published; a server without a client source needs one MCP tool."""
    text = {"type": "string", "minLength": 1, "maxLength": 20000}
    part = {"type": "object", "required": ["type", "text"], "additionalProperties": False,
            "properties": {"type": {"const": "input_text"}, "text": text}}
    message = {"type": "object", "required": ["role", "content"], "additionalProperties": False, "properties": {
        "type": {"const": "message"}, "role": {"const": "user"},
        "content": {"anyOf": [text, {"type": "array", "minItems": 1, "maxItems": 1, "items": part}]}}}
    output = {"type": "object", "required": ["type", "call_id", "output"], "additionalProperties": False,
              "properties": {"type": {"const": "function_call_output"},
                             "call_id": {"type": "string", "minLength": 1, "maxLength": 200},
                             "output": {"type": "string", "maxLength": 100_000}}}
    answer = {"type": "object", "required": ["type", "approval_request_id", "approve"], "additionalProperties": False,
              "properties": {"type": {"const": "mcp_approval_response"},
                             "approval_request_id": {"type": "string", "minLength": 1, "maxLength": 200},
                             "approve": {"type": "boolean"}, "reason": {"type": ["string", "null"], "maxLength": 2000}}}
    names = {"type": "array", "maxItems": 128,
             "items": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": TOOL_NAME}}
    rule = {"anyOf": [{"enum": ["always", "never"]}, {"type": "object", "additionalProperties": False, "properties": {
        side: {"type": "object", "additionalProperties": False, "properties": {"tool_names": names}}
        for side in ("always", "never")}}]}
    mcp = {"type": "object", "required": ["type", "server_label"], "additionalProperties": False, "properties": {
        "type": {"const": "mcp"}, "server_label": {"enum": list(terms.mcp)}, "require_approval": rule,
        "server_description": {"type": "string", "maxLength": 2000}}}
    tools = {"type": "array", "minItems": 0 if terms.function_source else 1, "maxItems": 1, "items": mcp}
    common = {
        "model": {"enum": [*terms.methods, *terms.aliases]},
        "instructions": {"type": ["string", "null"], "maxLength": 20000},
        "stream": {"type": "boolean"}, "background": {"type": "boolean"}, "store": {"enum": [True, None]},
        "metadata": {"type": ["object", "null"], "maxProperties": 16, "propertyNames": {"maxLength": 64},
                     "additionalProperties": {"type": "string", "maxLength": 512}},
        "tool_choice": {"enum": ["auto", None]}, "parallel_tool_calls": {"type": ["boolean", "null"]},
        "tools": tools}
    first = {"type": "object", "title": "a new conversation", "additionalProperties": False,
             "required": ["model", "input", *([] if terms.function_source else ["tools"])],
             "properties": {**common, "previous_response_id": {"type": "null"},
                            "input": {"anyOf": [text, {"type": "array", "minItems": 1, "maxItems": 1, "items": message}]}}}
    pattern = RESPONSE_ID.pattern
    more = {"type": "object", "title": "a continuation", "additionalProperties": False,
            "required": ["model", "input", "previous_response_id"],
            "properties": {**common, "previous_response_id": {"type": "string", "pattern": pattern},
                           "input": {"anyOf": [text, {"type": "array", "minItems": 1, "maxItems": 16,
                                                      "items": {"anyOf": [message, output, answer]}}]}}}
    return {"title": "ResponseCreate", "anyOf": [first, more]}


def sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, default=str)}\n\n"
