"""A session's client-visible conversation (``canon.py``'s items), read from its records and from the
neutral items the wires translate to and from.

What a client sees of a session, on every wire: the instructions, its own user messages and tool
results, and the agent's messages and function calls. Server-side steps (MCP calls, tool listings,
approvals) run inside a turn and no wire's client replays them as its own, so they are left out on both
sides of a comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .canon import Canon, assistant, call, canonical, result, system, user
from .readback import Labels, input_items, output_items, turn_records

CONTINUE = "Continue."  # the opening of a new session whose input held history but no new user message


def canon_of(items: Sequence[dict[str, Any]]) -> list[Canon]:
    """Neutral items (``readback``'s, the Responses API's item dicts) as the client-visible conversation.
    A function call's name is the one the agent knows (``namespace.name`` for a namespace's tool)."""
    out: list[Canon] = []
    for i in items:
        kind = i.get("type", "message")
        if kind == "message" and i.get("role") in ("system", "developer"):
            continue  # instructions: a wire puts them first, joined (``canon.system``)
        if kind == "message" and i.get("role") == "assistant":
            out.append(assistant(i.get("content") or ""))
        elif kind == "message":
            out.append(user(i.get("content") or ""))
        elif kind == "function_call":
            name = f"{i['namespace']}.{i['name']}" if i.get("namespace") else i["name"]
            out.append(call(i["call_id"], name, i.get("arguments") or "{}"))
        elif kind == "function_call_output":
            out.append(result(i["call_id"], i.get("output") or ""))
    return list(canonical(out))


def transcripts(records: Sequence[dict[str, Any]], sid: str, labels: Labels) -> list[list[Canon]]:
    """The session's client-visible conversation at the end of each of its turns (index: the turn)."""
    request = records[0]["request"]
    out: list[list[Canon]] = []
    so_far = [system(request["instructions"])] if request.get("instructions") else []
    turns = sum(r["t"] == "turn" for r in records) + 1
    for n in range(turns):
        given = input_items(records, sid, n)
        if n == 0 and request.get("context") and request.get("message") == CONTINUE:
            given = given[1:]  # the opening no client said: its input was history only
        so_far = so_far + canon_of(given) + canon_of(output_items(turn_records(records, n), sid, labels))
        out.append(so_far)
    return out

