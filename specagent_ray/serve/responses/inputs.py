"""A Responses API request's input items, read apart: new input, history, and instructions.

Most agent clients replay the whole conversation on every request. Their input is history (past
messages, function calls and their outputs, MCP calls, reasoning) followed by new input (user messages,
function call outputs, approval answers). The history is context for the models and never a list of
actions: nothing in it is executed, and a replayed ``mcp_call`` never runs again. Where the history's
own items are this server's (their ids name a session), the request continues that session; otherwise
a new session starts with the history rendered as context (``context``).

Pure functions: the route fetches what they need (a session's item ids) and passes it in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .models import (
    INPUTS,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputFile,
    InputImage,
    InputItem,
    InputText,
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpListToolsItem,
    MessageItem,
    OutputText,
    ReasoningItem,
    Refusal,
)

SID = r"\d{1,3}-[0-9a-f]{16}"
ITEM_ID = re.compile(rf"^(mcpl|mcp|msg|fc|apr|in)_({SID})_\d{{1,9}}(?:_\d{{1,4}})?$")  # this server's item ids
OUTPUT_PREFIXES = ("mcp", "msg", "fc", "apr")  # the ids of the agent's output items: the committed history
# (``in_``: input items; ``mcpl_``: a server's tool listing, which a client may or may not replay)
CONTINUE = "Continue."  # the opening of a new session whose input holds history but no new user message


def session_of(item_id: str | None) -> str | None:
    """The session a server item id names, or None for an id that is not one of this server's."""
    m = ITEM_ID.match(item_id or "")
    return m.group(2) if m else None


def is_output_id(item_id: str | None) -> bool:
    m = ITEM_ID.match(item_id or "")
    return bool(m) and m.group(1) in OUTPUT_PREFIXES


@dataclass(frozen=True)
class Reading:
    """An input, read: ``instructions`` (system and developer messages, in order), ``history`` (items
    up to the last one the agent's side wrote) and ``new`` (the input after it)."""

    instructions: tuple[str, ...]
    history: tuple[Any, ...]
    new: tuple[Any, ...]

    def own_ids(self) -> list[str]:
        """The ids of this server's output items in the history, in order."""
        return [i.id for i in self.history if is_output_id(getattr(i, "id", None))]

    def sessions(self) -> set[str]:
        return {session_of(i) for i in self.own_ids()} - {None}  # type: ignore[arg-type]


def read(items: Sequence[InputItem]) -> Reading:
    """``items`` apart (see ``Reading``). A user message or a function call output before the agent's
    last item is history; system and developer messages are instructions wherever they stand."""
    instructions = tuple(text(i.content) for i in items if isinstance(i, MessageItem)
                         and i.role in ("system", "developer"))
    rest = [i for i in items if not (isinstance(i, MessageItem) and i.role in ("system", "developer"))]
    last = max((n for n, i in enumerate(rest) if not _is_input(i)), default=-1)
    return Reading(instructions, tuple(rest[:last + 1]), tuple(rest[last + 1:]))


def _is_input(item: Any) -> bool:
    return isinstance(item, INPUTS) and not (isinstance(item, MessageItem) and item.role == "assistant")


def replay_tail(reading: Reading) -> tuple[str, list[str]] | None:
    """The session that the replay's last own item names, and its items at the replay's end; the items
    before them (of a session before a handoff or a fork) are that session's context already. None
    where the replay has no own items, or the last session's items are not together at its end."""
    own = reading.own_ids()
    if not own:
        return None
    sid = session_of(own[-1])
    tail = own[next(i for i, x in enumerate(own) if session_of(x) == sid):]
    return (sid, tail) if sid is not None and all(session_of(x) == sid for x in tail) else None  # type: ignore[return-value]


def continues(reading: Reading, session_ids: Sequence[str]) -> bool:
    """Whether a replay continues the session of its tail (``replay_tail``) whose output item ids so far
    are ``session_ids``: the tail is exactly the agent's items of those, in order (a replay of an earlier
    point forks instead; tool listings may be left out), and the replay brings something new."""
    tail = replay_tail(reading)
    return bool(reading.new) and tail is not None and tail[1] == [i for i in session_ids if is_output_id(i)]


def text(content: Any) -> str:
    """A message's or an output's text: its text parts joined; an image or file part is named, not read
    (the engines that take this path read text only)."""
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        if isinstance(part, InputText | OutputText):
            out.append(part.text)
        elif isinstance(part, Refusal):
            out.append(part.refusal)
        elif isinstance(part, InputImage):
            out.append("[an image]")
        elif isinstance(part, InputFile):
            out.append(f"[a file{': ' + part.filename if part.filename else ''}]")
    return "".join(out)


def media(items: Sequence[Any]) -> list[str]:
    """The kinds of non-text parts in ``items`` (``input_image``, ``input_file``)."""
    parts = [i.content if isinstance(i, MessageItem) else i.output for i in items
             if isinstance(i, MessageItem | FunctionCallOutputItem)]
    kinds = {p.type for content in parts if not isinstance(content, str) for p in content
             if isinstance(p, InputImage | InputFile)}
    return sorted(kinds)


def context(history: Sequence[Any]) -> str | None:
    """The history as a transcript for the models' system prompt, or None when there is none. It says
    that none of it is to be done again."""
    lines = [line for item in history if (line := _line(item))]
    if not lines:
        return None
    return ("The conversation so far, as the client replayed it (context only: every call in it already "
            "ran or never will; do not repeat one because it is listed here):\n" + "\n".join(lines))


def _line(item: Any) -> str | None:
    if isinstance(item, MessageItem):
        return f"{item.role}: {text(item.content)}"
    if isinstance(item, FunctionCallItem):
        name = f"{item.namespace}.{item.name}" if item.namespace else item.name  # as the agent knows a namespace's
        return f"agent called {name}({item.arguments}) [call {item.call_id}]"
    if isinstance(item, FunctionCallOutputItem):
        return f"result of call {item.call_id}: {text(item.output)}"
    if isinstance(item, McpCallItem):
        return (f"agent called {item.server_label}.{item.name}({item.arguments}): "
                f"{item.error if item.error else item.output}")
    if isinstance(item, McpListToolsItem):
        return f"tools of {item.server_label}: {', '.join(str(t.get('name')) for t in item.tools)}"
    if isinstance(item, McpApprovalRequestItem):
        return f"agent asked approval for {item.server_label}.{item.name}({item.arguments}) [{item.id}]"
    if isinstance(item, McpApprovalResponseItem):
        return f"client {'approved' if item.approve else 'denied'} {item.approval_request_id}"
    if isinstance(item, ReasoningItem):
        summary = " ".join(str(s.get("text", "")) for s in item.summary).strip()
        return f"agent reasoned: {summary}" if summary else None
    return json.dumps(item.model_dump(mode="json", exclude_none=True))
