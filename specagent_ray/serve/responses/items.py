"""The Responses API's own shaping of a turn: its stream of events, and OpenAI's list pages. What is
wire-neutral (records read back as items and response snapshots) is ``agents/readback.py``, re-exported
here for the modules that import it from this one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..agents.readback import (  # noqa: F401 - re-exported
    ECHO,
    ENDS,
    FINAL_STATUS,
    Labels,
    Records,
    ToolLabels,
    all_items,
    hidden,
    history_until,
    input_items,
    labels_of,
    message,
    output_ids,
    output_items,
    response,
    status_of,
    turn_meta,
    turn_records,
    turn_start,
    usage,
)


def item_events(item: dict[str, Any], index: int) -> Iterator[dict[str, Any]]:
    """The stream events of one output item (without sequence numbers): added, its content or arguments
    (one delta each: an item is sent once it is committed, whole), done."""
    kind, item_id = item["type"], item["id"]
    at = {"output_index": index, "item_id": item_id}
    if kind == "message":
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        yield {"type": "response.output_item.added", "output_index": index,
               "item": {**item, "status": "in_progress", "content": []}}
        yield {"type": "response.content_part.added", **at, "content_index": 0, "part": part}
        yield {"type": "response.output_text.delta", **at, "content_index": 0, "delta": text, "logprobs": []}
        yield {"type": "response.output_text.done", **at, "content_index": 0, "text": text, "logprobs": []}
        yield {"type": "response.content_part.done", **at, "content_index": 0, "part": {**part, "text": text}}
    elif kind == "function_call":
        yield {"type": "response.output_item.added", "output_index": index,
               "item": {**item, "status": "in_progress", "arguments": ""}}
        yield {"type": "response.function_call_arguments.delta", **at, "delta": item["arguments"]}
        yield {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]}
    elif kind == "mcp_call":
        yield {"type": "response.output_item.added", "output_index": index,
               "item": {**item, "status": "in_progress", "arguments": "", "output": None, "error": None}}
        yield {"type": "response.mcp_call_arguments.delta", **at, "delta": item["arguments"]}
        yield {"type": "response.mcp_call_arguments.done", **at, "arguments": item["arguments"]}
        yield {"type": "response.mcp_call.in_progress", **at}
        yield {"type": f"response.mcp_call.{'failed' if item['error'] else 'completed'}", **at}
    elif kind == "mcp_list_tools":
        yield {"type": "response.output_item.added", "output_index": index, "item": {**item, "tools": []}}
        yield {"type": "response.mcp_list_tools.in_progress", **at}
        yield {"type": "response.mcp_list_tools.completed", **at}
    else:
        yield {"type": "response.output_item.added", "output_index": index, "item": item}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, default=str)}\n\n"


def lifecycle(kind: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    """``response.created`` / ``.in_progress`` / ``.completed`` / ``.failed`` / ``.incomplete``."""
    return {"type": f"response.{kind}", "response": snapshot}


def ended(status: str) -> str | None:
    """The lifecycle event that ends a stream in ``status``, or None while the response runs."""
    return {"completed": "completed", "failed": "failed", "incomplete": "incomplete",
            "cancelled": "failed"}.get(status)


def page(items: list[dict[str, Any]], limit: int, order: str, after: str | None) -> dict[str, Any]:
    """One page of a list of items (oldest first), OpenAI's list shape: newest first unless ``order``
    is ``asc``, from the item after ``after`` (the start where no item has that id)."""
    items = items[::-1] if order == "desc" else items
    ids = [i["id"] for i in items]
    start = ids.index(after) + 1 if after in ids else 0
    out = items[start:start + limit]
    return {"object": "list", "data": out, "first_id": out[0]["id"] if out else None,
            "last_id": out[-1]["id"] if out else None, "has_more": start + limit < len(items)}
