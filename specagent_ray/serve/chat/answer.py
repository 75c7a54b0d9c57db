"""A turn's snapshot (``agents/readback.response``: the Responses-shaped response dict) as Chat Completions
answers it: one ``chat.completion`` object, or its stream of ``chat.completion.chunk`` objects. Pure.

What the client sees of a turn: the agent's message (``message.content``) and the calls it makes on the
client's tools (``message.tool_calls``, each ``id`` the call id this server minted: the client answers it
as ``tool_call_id``). Server-side steps (MCP calls run inside the turn) are no chat output: they are
reported in the extension field ``specagent``, with the session, the turn and the speculation figures.
``usage`` is the turn's real token count, both models' calls together (``readback.usage``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..core.errors import ApiError, Conflict

DONE = "data: [DONE]\n\n"


class TurnFailed(ApiError):
    """The agent's session failed during the turn (the engines or a tool source): nothing to answer."""

    status = 500


def calls_of(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turn's client tool calls as Chat Completions writes them."""
    return [{"id": i["call_id"], "type": "function",
             "function": {"name": f"{i['namespace']}.{i['name']}" if i.get("namespace") else i["name"],
                          "arguments": i["arguments"]}} for i in output if i["type"] == "function_call"]


def content_of(output: list[dict[str, Any]]) -> str | None:
    """The agent's messages of the turn, their text joined; None where it said nothing."""
    texts = [p["text"] for i in output if i["type"] == "message" for p in i["content"] if p.get("type") == "output_text"]
    return "\n\n".join(texts) if texts else None


def finish_reason(snap: dict[str, Any]) -> str:
    """``tool_calls`` where the turn ends with calls for the client, ``length`` where it ran out of steps or
    tokens (incomplete), ``stop`` otherwise."""
    if snap["status"] == "incomplete":
        return "length"
    return "tool_calls" if calls_of(snap["output"]) else "stop"


def failure(snap: dict[str, Any]) -> ApiError | None:
    """The error a failed or cancelled turn answers (OpenAI's chat has no failed completion)."""
    if snap["status"] == "failed":
        error = snap.get("error") or {}
        return TurnFailed(f"the agent's session failed: {error.get('message', 'failed')}",
                          code=error.get("code", "server_error"))
    if snap["status"] == "cancelled":
        return Conflict("the agent's session was cancelled during this turn", code="cancelled")
    return None


def usage_of(snap: dict[str, Any]) -> dict[str, Any]:
    """The turn's tokens in OpenAI's ``CompletionUsage`` shape (both models' calls, as the engines reported)."""
    u = snap["usage"]
    return {"prompt_tokens": u["input_tokens"], "completion_tokens": u["output_tokens"],
            "total_tokens": u["total_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["input_tokens_details"]["cached_tokens"]},
            "completion_tokens_details": {"reasoning_tokens": 0}}


@dataclass(frozen=True)
class Turn:
    """Which turn a snapshot is: the session, its number, whether the request continued the session (else it
    started it), the model name the client asked and when the request was taken."""

    sid: str
    n: int
    continued: bool
    model: str
    created: int
    applied: dict[str, Any] | None = None  # what the session applies of the request (``translate.applied``)

    @property
    def id(self) -> str:
        return f"chatcmpl-{self.sid}_{self.n}"


def extension(snap: dict[str, Any], turn: Turn) -> dict[str, Any]:
    """The ``specagent`` field: the session and turn, how the request reached it, the speculation figures,
    and the server-side steps run inside the turn."""
    steps = [{k: i.get(k) for k in ("name", "server_label", "arguments", "output", "error", "status")}
             for i in snap["output"] if i["type"] == "mcp_call"]
    return {"session_id": turn.sid, "turn": turn.n, "session": "continued" if turn.continued else "started",
            "status": snap["status"], "speculation": snap["usage"].get("speculation", {}), "server_steps": steps,
            **({"applied": turn.applied} if turn.applied is not None else {})}


def completion(snap: dict[str, Any], turn: Turn, metadata: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``chat.completion`` of an ended turn: one choice."""
    calls = calls_of(snap["output"])
    message = {"role": "assistant", "content": content_of(snap["output"]), "refusal": None, "annotations": [],
               **({"tool_calls": calls} if calls else {})}
    return {"id": turn.id, "object": "chat.completion", "created": turn.created, "model": turn.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(snap)}],
            "usage": usage_of(snap), "service_tier": "default", "system_fingerprint": None,
            **({"metadata": metadata} if metadata else {}), "specagent": extension(snap, turn)}


@dataclass
class Chunks:
    """The stream of one turn, fed its snapshots in order: the role first, then each output item once it is
    in a snapshot (a message's text as one content delta, each client call as one ``tool_calls`` delta with
    its index), then the chunk with ``finish_reason`` and, with ``include_usage``, the usage chunk (empty
    choices). Every chunk carries ``usage: null`` before that one where usage was asked, as OpenAI's do."""

    turn: Turn
    include_usage: bool = False
    sent: int = 0
    calls: int = 0
    begun: bool = False

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"id": self.turn.id, "object": "chat.completion.chunk", "created": self.turn.created,
                "model": self.turn.model, "system_fingerprint": None,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                **({"usage": None} if self.include_usage else {}), **extra}

    def feed(self, snap: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The chunks a snapshot adds; the last ones where it is the turn's end."""
        if not self.begun:
            self.begun = True
            yield self.chunk({"role": "assistant", "content": ""})
        for item in snap["output"][self.sent:]:
            if item["type"] == "message":
                yield self.chunk({"content": content_of([item]) or ""})
            elif item["type"] == "function_call":
                call = {"index": self.calls, **calls_of([item])[0]}
                self.calls += 1
                yield self.chunk({"tool_calls": [call]})
        self.sent = len(snap["output"])
        if snap["status"] == "in_progress" or failure(snap) is not None:
            return
        yield self.chunk({}, finish_reason(snap), specagent=extension(snap, self.turn))
        if self.include_usage:
            last = self.chunk({})
            yield {**last, "choices": [], "usage": usage_of(snap)}


def sse(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk, default=str)}\n\n"


def error_chunk(status: int, message: str, code: str | None = None) -> str:
    """An error after the stream began, as OpenAI streams one: the SDK raises it."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return sse({"error": {"message": message, "type": kind, "param": None, "code": code or str(status)}})
