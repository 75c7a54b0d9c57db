"""``POST /v1/responses``'s body as this server publishes it: every body the schema allows is one it can
run (or answers 403, 404, 409, 413 or 429 for reasons no schema can see), and every body it takes fits the
schema. It is the specification's body (``response_models.ResponseCreate``) narrowed to this server: its
models, its MCP servers (by label, or by a URL its operator configured), and two alternatives, a new
conversation (any input items: a replayed history is context) and a continuation (new input only).
Function tools and namespaces of them (whose ``parameters`` are a client's JSON Schema, checked as
``ClientTool`` does), ``allowed_tools`` (which names only the server's catalog knows) and a ``json_schema``
text format (whose schema only the engines' grammar can judge) are taken but not published; a tool of any
other type is taken and dropped; a server without a client source needs one MCP tool. Objects take
fields they do not list (ignored), unless the profile is strict (``Terms.strict``)."""

from __future__ import annotations

import copy
from typing import Any

from ..core.api import TOOL_NAME
from .models import ResponseCreate
from .tools import FIELDS, NEVER_FROM_CLIENTS
from .translate import RESPONSE_ID, Terms

PREFIX = "Responses"  # the components that hold the body's definitions are named Responses<Model>
NEW_INPUT = ("MessageItem", "FunctionCallOutputItem", "McpApprovalResponseItem")


def create_schema(terms: Terms) -> tuple[dict[str, Any], dict[str, Any]]:
    """The create body's schema and the components it refers to (``#/components/schemas/Responses*``)."""
    base = ResponseCreate.model_json_schema(by_alias=True, ref_template=f"#/components/schemas/{PREFIX}{{model}}")
    defs = {f"{PREFIX}{name}": d for name, d in base.pop("$defs").items()}
    props = base["properties"]
    props["model"] = {"enum": [*terms.methods, *terms.aliases]}
    props["tools"] = _tools(terms)
    # no stored prompts; a conversation's id is one that POST /v1/conversations answered (left out here)
    props["conversation"] = props["prompt"] = {"type": "null"}
    for name in ("stream", "background", "store"):
        props[name] = {"type": ["boolean", "null"]}
    closed = {"additionalProperties": False} if terms.strict else {}
    for d in defs.values():
        d.update(closed if "properties" in d else {})
    first = {**base, "title": "a new conversation", **closed,
             "required": ["model", "input", *([] if terms.function_source else ["tools"])],
             "properties": {**props, "previous_response_id": {"type": "null"}}}
    more = {**base, "title": "a continuation", **closed,
            "required": ["model", "input", "previous_response_id"],
            "properties": {**props, "previous_response_id": {"type": "string", "pattern": RESPONSE_ID.pattern},
                           "input": _new_input(props["input"])}}
    defs[f"{PREFIX}UserInput"] = _user_input(defs[f"{PREFIX}MessageItem"])
    # json_schema is taken where the engines' grammar compiles its schema (``OutputFormat``): not published
    fmt = defs[f"{PREFIX}TextFormat"]["properties"]
    fmt["type"], fmt["schema"] = {"enum": ["text", "json_object"]}, {"type": "null"}
    return {"title": "ResponseCreate", "anyOf": [first, more]}, defs


def _new_input(given: dict[str, Any]) -> dict[str, Any]:
    """A continuation's input: a non-empty text, or new input items (a message with some text, a
    function call output, an approval answer)."""
    items = {"anyOf": [{"$ref": f"#/components/schemas/{PREFIX}UserInput"},
                       *({"$ref": f"#/components/schemas/{PREFIX}{n}"} for n in NEW_INPUT[1:])]}
    text = copy.deepcopy(next(b for b in given["anyOf"] if b.get("type") == "string"))
    array = copy.deepcopy(next(b for b in given["anyOf"] if b.get("type") == "array"))
    return {"anyOf": [{**text, "minLength": 1, "pattern": r"\S"}, {**array, "minItems": 1, "items": items}]}


def _user_input(message: dict[str, Any]) -> dict[str, Any]:
    """A message of new input: user, system or developer, with a non-empty text."""
    out = copy.deepcopy(message)
    out["properties"]["role"] = {"enum": ["user"]}
    out["properties"]["content"] = {"type": "string", "minLength": 1, "pattern": r"\S",
                                    "maxLength": message["properties"]["content"]["anyOf"][0].get("maxLength")}
    out["title"] = "UserInput"
    return out


def _tools(terms: Terms) -> dict[str, Any]:
    """MCP tools (at most one per server; at least one without a client source), and tools of any type
    this server does not host (dropped)."""
    names = {"type": "array", "maxItems": 128,
             "items": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": TOOL_NAME}}
    rule = {"anyOf": [{"enum": ["always", "never", None]}, {"type": "object", "additionalProperties": False, "properties": {
        side: {"type": "object", "additionalProperties": False, "properties": {"tool_names": names}}
        for side in ("always", "never")}}]}
    common = {"type": {"const": "mcp"}, "require_approval": rule, "allowed_tools": {"type": "null"},
              "server_description": {"type": ["string", "null"], "maxLength": 2000},
              **{k: {"type": "null"} for k in NEVER_FROM_CLIENTS}}
    closed = {"additionalProperties": False} if terms.strict else {}
    by_label = {"type": "object", "required": ["type", "server_label"], **closed, "properties": {
        **common, "server_label": {"enum": list(terms.mcp)}, "server_url": {"type": "null"}}}
    by_url = [{"type": "object", "required": ["type", "server_url"], **closed, "properties": {
        **common, "server_url": {"enum": [u for u, s in terms.mcp_urls.items() if s == source]},
        "server_label": {"anyOf": [{"type": "null"}, {"type": "string", "not": {"enum": [
            m for m in terms.mcp if m != source]}}]}}} for source in dict.fromkeys(terms.mcp_urls.values())]
    mcp = {"anyOf": [by_label, *by_url]}
    other = {"type": "object", "required": ["type"], "properties": {"type": {"type": "string", "not": {
        "enum": list(FIELDS)}}}}
    return {"type": "array", "maxItems": 128, "items": {"anyOf": [mcp, other]},
            **({} if terms.function_source else {"contains": mcp, "maxContains": max(len(terms.mcp), 1)})}
