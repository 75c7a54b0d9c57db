"""``POST /v1/responses``'s body as this server publishes it: every body the schema allows is one it can
run (or answers 403, 404, 409, 413 or 429 for reasons no schema can see), and every body it takes fits the
schema. It is the specification's body (``response_models.ResponseCreate``) narrowed to this server: its
models, its MCP servers, and two alternatives, a new conversation (any input items: a replayed history is
context) and a continuation (new input only). Function tools (whose ``parameters`` are a client's JSON
Schema, checked as ``ClientTool`` does) and ``allowed_tools`` (which names only the server's catalog
knows) are taken but not published; a server without a client source needs one MCP tool."""

from __future__ import annotations

import copy
from typing import Any

from ..core.api import TOOL_NAME
from .models import ResponseCreate
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
    first = {**base, "title": "a new conversation", "additionalProperties": False,
             "required": ["model", "input", *([] if terms.function_source else ["tools"])],
             "properties": {**props, "previous_response_id": {"type": "null"}}}
    more = {**base, "title": "a continuation", "additionalProperties": False,
            "required": ["model", "input", "previous_response_id"],
            "properties": {**props, "previous_response_id": {"type": "string", "pattern": RESPONSE_ID.pattern},
                           "input": _new_input(props["input"])}}
    defs[f"{PREFIX}UserInput"] = _user_input(defs[f"{PREFIX}MessageItem"])
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
    names = {"type": "array", "maxItems": 128,
             "items": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": TOOL_NAME}}
    rule = {"anyOf": [{"enum": ["always", "never", None]}, {"type": "object", "additionalProperties": False, "properties": {
        side: {"type": "object", "additionalProperties": False, "properties": {"tool_names": names}}
        for side in ("always", "never")}}]}
    mcp = {"type": "object", "required": ["type", "server_label"], "additionalProperties": False, "properties": {
        "type": {"const": "mcp"}, "server_label": {"enum": list(terms.mcp)}, "require_approval": rule,
        "server_description": {"type": ["string", "null"], "maxLength": 2000}}}
    return {"type": "array", "minItems": 0 if terms.function_source else 1, "maxItems": max(len(terms.mcp), 1),
            "items": mcp}
