"""A Responses API request's ``tools`` and ``tool_choice``, translated into a session's tool fields.

This server runs MCP servers its operator configured and function tools (the client runs those); a
``namespace`` of function tools is expanded into them, each named ``namespace.name``. Any other tool type
(web_search, file_search, ...) is hosted nowhere here: dropped (``dropped`` names them) or, where the
operator says so, refused. An MCP tool names its server by ``server_label``, or by ``server_url`` where
that is exactly a URL the operator configured for it (``normal_url``): the URL is compared, never
fetched. Credentials and connectors never come from a client (``NEVER_FROM_CLIENTS``, refused).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from ..agents.fields import validated
from ..agents.terms import normal_url
from ..core.api import Approval, ClientTool, SourceUse
from ..core.errors import BadRequest
from .models import AllowedToolsChoice, ResponseCreate


class Terms(Protocol):
    """What the tools read of the server's terms (``translate.Terms``)."""

    @property
    def mcp(self) -> tuple[str, ...]: ...  # its MCP servers' labels
    @property
    def mcp_urls(self) -> Mapping[str, str]: ...  # each configured url and alias (``normal_url``) -> its server
    @property
    def function_source(self) -> str | None: ...
    @property
    def unhosted(self) -> str: ...  # refuse or drop

NEVER_FROM_CLIENTS = ("headers", "authorization", "connector_id")  # the server's own credentials and connectors
HOSTED = ("mcp", "function")  # tool types this server runs (and ``namespace``s of function tools, expanded)
FIELDS = {"function": ("type", "name", "description", "parameters", "strict", "read_only"),
          "mcp": ("type", "server_label", "server_url", "allowed_tools", "require_approval", "server_description",
                  *NEVER_FROM_CLIENTS),
          "namespace": ("type", "name", "description", "tools")}  # each hosted tool type's fields known here
NAMESPACE = re.compile(r"^[A-Za-z0-9_-]{1,63}$")  # a namespace's and its functions' names: no dot, which joins them
def tool_fields(tools: list[dict[str, Any]] | None) -> set[str]:
    """The fields of the hosted ``tools`` that this server does not know, as dotted paths
    (``tools.defer_loading``; ``tools.tools.x`` in a namespace's functions). A dropped tool is not read."""
    paths: set[str] = set()
    for tool in tools or []:
        known = FIELDS.get(tool.get("type")) if hosted(tool) else None
        paths |= {f"tools.{k}" for k in tool if known is not None and k not in known}
        if tool.get("type") == "namespace" and known is not None:
            paths |= {f"tools.tools.{k}" for f in tool["tools"] for k in f if k not in FIELDS["function"]}
    return paths


def echoed_tools(body: ResponseCreate, terms: Terms) -> list[dict[str, Any]]:
    """The tools the agent really has: the request's, less the unhosted ones (dropped), each with the
    fields of the specification's that are applied: a function tool (in a namespace too) with every field
    of ``FunctionTool``, an MCP tool with the configured server it reaches as its ``server_label``."""
    def function(t: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", **{k: t.get(k) for k in ("name", "description", "parameters", "strict")}}

    out: list[dict[str, Any]] = []
    for t in body.tools or []:
        if not hosted(t):
            continue
        if t["type"] == "mcp":
            label = terms.mcp_urls.get(normal_url(t.get("server_url")) or "", t.get("server_label"))
            out.append({**{k: v for k, v in t.items() if k in FIELDS["mcp"]}, "server_label": label})
        else:
            out.append(function(t) if t["type"] == "function" else {
                "type": "namespace", "name": t.get("name"), "description": t.get("description"),
                "tools": [function(f) for f in t["tools"]]})
    return out


def dropped(body: BaseModel) -> list[str]:
    """The types of the request's tools that this server does not host, each once (web_search,
    file_search, ...; a namespace that groups anything but function tools is one)."""
    return list(dict.fromkeys(str(t.get("type")) for t in getattr(body, "tools", None) or [] if not hosted(t)))


def hosted(tool: dict[str, Any]) -> bool:
    """Whether this server runs ``tool``: an MCP server or a function tool, or a namespace of function tools."""
    if tool.get("type") == "namespace":
        inner = tool.get("tools")
        return isinstance(inner, list) and all(isinstance(f, dict) and f.get("type") == "function" for f in inner)
    return tool.get("type") in HOSTED


def tools_of(body: ResponseCreate, terms: Terms) -> dict[str, Any]:
    """The session's tool fields (``CreateSession``'s ``tool_source``, ``client_tools``, ``allowed_tools``,
    ``approval``, ``more_sources``) of a request's ``tools`` and ``tool_choice`` (``none`` takes every tool
    away; ``allowed_tools`` narrows them). Function tools and any number of MCP servers mix: the function
    tools' client source comes first where there are function tools, else the first MCP server. A
    namespace's function tools are the agent's as ``namespace.name``."""
    tools = body.tools or []
    if not all(isinstance(t.get("type"), str) for t in tools):
        raise BadRequest("tools: each tool names its type", "tools.type", "invalid_value")
    other = dropped(body)
    if other and terms.unhosted == "refuse":
        raise BadRequest(f"tool type{'s' if len(other) > 1 else ''} {', '.join(other)} not hosted here (this server "
                         "runs the MCP servers its operator configured, and function tools); an operator can "
                         "drop such tools with gateway.unhosted_tools: drop", "tools", "unsupported_tool_type")
    keep = _kept(body.tool_choice)
    servers = [_mcp(t, terms, keep) for t in tools if t.get("type") == "mcp"]
    if len({u.tool_source for u in servers}) < len(servers):
        raise BadRequest("tools: an MCP server is listed twice", "tools", "duplicate_tool")
    functions = [_function(t, None) for t in tools if t.get("type") == "function"]
    functions += [_function(f, t.get("name")) for t in tools if t.get("type") == "namespace" and hosted(t)
                  for f in t["tools"]]
    if servers and not functions:
        first = servers[0]
        return {"tool_source": first.tool_source, "client_tools": [], "allowed_tools": first.allowed_tools,
                "approval": first.approval, "more_sources": servers[1:]}
    if terms.function_source is None:
        raise BadRequest("this server has no client tool source: function tools (and no tools) need one", "tools")
    return {"tool_source": terms.function_source, "allowed_tools": None, "approval": None, "more_sources": servers,
            "client_tools": [c for c in functions if keep is None or {c.name, c.name.split(".")[-1]} & keep]}


def allowed_choice(choice: Any) -> bool:
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
    described = tool.get("server_description")
    if described is not None and (not isinstance(described, str) or len(described) > 2000):
        raise BadRequest("mcp tool: server_description is a string of up to 2000 characters",
                         "tools.server_description")
    label = _server(tool, terms)
    allowed = _allowed(tool.get("allowed_tools"))
    if keep is not None:
        allowed = [n for n in allowed if n in keep] if allowed is not None else sorted(keep)
    rule = tool.get("require_approval")
    return validated(SourceUse, tool_source=label, allowed_tools=allowed,
                     approval=approval_of("never" if rule is None else rule))


def _server(tool: dict[str, Any], terms: Terms) -> str:
    """The configured MCP server an MCP tool names: by ``server_url``, where it is exactly a configured
    ``url`` or ``url_aliases`` entry (``normal_url``; never fetched, so no redirect is followed), with any
    ``server_label`` that names no other configured server; else by ``server_label``."""
    label, url = tool.get("server_label"), tool.get("server_url")
    if url is None:
        if label not in terms.mcp:
            raise BadRequest(f"mcp tool: no MCP server labelled {label!r} here; this server offers: "
                             f"{', '.join(terms.mcp) or 'none'}", "tools.server_label", "mcp_server_not_found")
        return str(label)
    source = terms.mcp_urls.get(normal_url(url) or "")
    if source is None:
        raise BadRequest("mcp tool: server_url is none of the URLs this server's operator configured; this "
                         "server never reaches a server of the client's choosing (name one of its servers by "
                         f"server_label: {', '.join(terms.mcp) or 'none here'})", "tools.server_url",
                         "client_chosen_server")
    if label in terms.mcp and label != source:
        raise BadRequest(f"mcp tool: server_url names server {source!r}, server_label names {label!r}",
                         "tools.server_label", "mcp_server_mismatch")
    return source


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
    return validated(Approval, tools=always if "always" in rule else None,
                     exempt=sides["never"].get("tool_names") or [])


def _function(tool: dict[str, Any], namespace: Any) -> ClientTool:
    """A function tool (``namespace``: the namespace it is in, its name then ``namespace.name``): WRITE
    unless it says ``read_only: true`` and the server trusts its client source."""
    fields = {k: tool[k] for k in ("name", "description", "read_only") if tool.get(k) is not None}
    if namespace is not None:
        if not all(isinstance(n, str) and NAMESPACE.match(n) for n in (namespace, tool.get("name"))):
            raise BadRequest("namespace tool: its name and its functions' names are 1 to 63 letters, digits, _ "
                             "or -", "tools.name", "invalid_value")
        fields["name"] = f"{namespace}.{tool['name']}"
    return validated(ClientTool, **fields, **({"parameters": tool["parameters"]} if tool.get("parameters") else {}))


