"""A turn's snapshot (``agents/readback.response``: Responses-shaped output items and usage) as Anthropic's
``Message``, and as Anthropic's stream of events. Pure functions.

- content: the agent's message as a ``text`` block, each client tool call as a ``tool_use`` block whose
  ``id`` is the server's call id (the client sends it back as ``tool_use_id``); a write goes out only once
  the verifier accepted it, so a ``tool_use`` block is never a rejected draft;
- ``stop_reason``: ``tool_use`` where the turn ends with tool calls, ``end_turn`` after a message,
  ``max_tokens`` where the session ran out of steps before the agent ended its turn; a failed or cancelled
  turn is an error (500 ``api_error``; in a stream, an ``error`` event);
- ``usage``: the engines' real token counts: ``input_tokens`` not read from a prefix cache,
  ``cache_read_input_tokens`` read from one, ``output_tokens``;
- ``specagent`` (an extension field): the session and turn, the server-side tool steps (MCP calls) that
  ran inside the turn, and the speculation figures (blocks, drafted and accepted steps, strong calls).

The stream: ``message_start``, ``ping``, per block ``content_block_start`` / one ``content_block_delta``
(``text_delta`` or ``input_json_delta``) / ``content_block_stop`` (a block is sent once it is committed,
whole), then ``message_delta`` (``stop_reason``, the whole usage, the extension) and ``message_stop``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..core.errors import ANTHROPIC_TYPES, ApiError

STOP = {"completed": "end_turn", "incomplete": "max_tokens"}


class TurnFailed(ApiError):
    """The agent's turn failed or was cancelled: Anthropic's ``api_error``."""

    status = 500


def message_id(sid: str, n: int) -> str:
    """The message of turn ``n`` of session ``sid`` (one session answers a whole tool loop)."""
    return f"msg_{sid}_{n}"


def blocks(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client-visible output items as content blocks, in order (MCP steps are the extension's)."""
    out: list[dict[str, Any]] = []
    for item in output:
        if item["type"] == "message":
            text = "".join(p.get("text", "") for p in item["content"])
            out.append({"type": "text", "text": text, "citations": None})
        elif item["type"] == "function_call":
            name = f"{item['namespace']}.{item['name']}" if item.get("namespace") else item["name"]
            out.append({"type": "tool_use", "id": item["call_id"], "name": name, "input": _input(item["arguments"])})
    return out


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def usage_of(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's usage from the turn's: uncached input, cache reads, output (all real engine counts)."""
    usage = snapshot.get("usage") or {}
    prompt = usage.get("input_tokens", 0)
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": prompt - cached, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached,
            "output_tokens": usage.get("output_tokens", 0), "service_tier": "standard"}


def extension(snapshot: dict[str, Any], sid: str, n: int) -> dict[str, Any]:
    """The ``specagent`` field: the session and turn, the server-side steps, the speculation figures."""
    steps = [{k: item.get(k) for k in ("name", "server_label", "arguments", "output", "error")}
             for item in snapshot.get("output", []) if item["type"] == "mcp_call"]
    return {"session_id": sid, "turn": n, "status": snapshot.get("status"), "server_tool_calls": steps,
            "speculation": (snapshot.get("usage") or {}).get("speculation")}


def stop_reason(snapshot: dict[str, Any], content: list[dict[str, Any]]) -> str | None:
    if snapshot["status"] == "completed" and content and content[-1]["type"] == "tool_use":
        return "tool_use"
    return STOP.get(snapshot["status"])


def failure(snapshot: dict[str, Any]) -> TurnFailed | None:
    """The error a failed or cancelled turn is answered with, or None."""
    if snapshot["status"] not in ("failed", "cancelled"):
        return None
    why = (snapshot.get("error") or {}).get("message") or snapshot["status"]
    return TurnFailed(f"the agent's turn {snapshot['status']}: {why}")


def message(snapshot: dict[str, Any], sid: str, n: int, model: str) -> dict[str, Any]:
    """Turn ``n``'s answer, as Anthropic's ``Message`` (once the turn ended)."""
    content = blocks(snapshot["output"])
    return {"id": message_id(sid, n), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason(snapshot, content), "stop_sequence": None, "usage": usage_of(snapshot),
            "specagent": extension(snapshot, sid, n)}


# -- the stream -------------------------------------------------------------------------------------------

def sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


def started(sid: str, n: int, model: str) -> list[dict[str, Any]]:
    """``message_start`` (an empty message; the usage and the extension come whole in ``message_delta``),
    then a ``ping``."""
    begun = message({"status": "in_progress", "output": []}, sid, n, model)
    begun["usage"] = {**begun["usage"], "input_tokens": 0}
    return [{"type": "message_start", "message": begun}, {"type": "ping"}]


def block_events(block: dict[str, Any], index: int) -> Iterator[dict[str, Any]]:
    """One content block's events: start (empty), one delta (the whole text or input), stop."""
    if block["type"] == "text":
        yield {"type": "content_block_start", "index": index, "content_block": {**block, "text": ""}}
        delta = {"type": "text_delta", "text": block["text"]}
    else:
        yield {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    yield {"type": "content_block_delta", "index": index, "delta": delta}
    yield {"type": "content_block_stop", "index": index}


def ended(final: dict[str, Any]) -> list[dict[str, Any]]:
    """``message_delta`` (the stop reason, the whole usage, the extension) and ``message_stop``."""
    delta = {"stop_reason": final["stop_reason"], "stop_sequence": None}
    return [{"type": "message_delta", "delta": delta, "usage": final["usage"], "specagent": final["specagent"]},
            {"type": "message_stop"}]


def error_event(status: int, text: str) -> dict[str, Any]:
    """A stream's ``error`` event, Anthropic's shape (its SDK raises it as an API error)."""
    return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": text}}
