"""A session's records read back as the agent wires' neutral items and response snapshots. Pure
functions of the session log's published records.

The neutral vocabulary is the Responses API's: items are its item dicts (``message``, ``function_call``,
``function_call_output``, ``mcp_call``, ``mcp_list_tools``, ``mcp_approval_request``, ...), a turn's
snapshot is its response object (``response``: id, status, output, usage, incomplete_details, error, ...).
The Responses wire answers them as they are; the other wires translate from them.

``output`` holds only what is committed, or certain to be:
- an MCP tool step appears (``mcp_call``) once it is committed, or once the agent's message that ends
  its block is sent (a block without a staged write commits whole when the user replies); a parallel
  action appears as one item per call, in call order, each with its own result;
- a draft step that the verifier rejected never appears; a write denied by the client never ran and
  does not appear either (the agent is told);
- a function call appears when it goes out to the client (``function_call``): a drafted read while the
  draft is written (reads are reversible), a write only after the verifier accepted it; the client reads
  of one parallel action go out together, in the response that ends the turn;
- an approval request (``mcp_approval_request``) and the agent's message (``message``) end the turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.errors import NotFound
from ..sessions.turns import ENDS_TURN

Records = Sequence[dict[str, Any]]
RESPONSE_ID = re.compile(r"^resp_(\d{1,3}-[0-9a-f]{16})_(\d{1,6})$")
# what a response echoes of sampling where its engines do not sample as asked (``translate.applied``)
SAMPLING = {"temperature": 0.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0}
Labels = Mapping[str, str]  # an MCP tool's name -> its server's label (``ToolLabels``: and which tools read)
ENDS = (*ENDS_TURN, "final")  # what ends the agent's turn, or the session
BOUNDARIES = ("accepted", "rejected", "redraft", "commit")  # after these, no drafted read is pending
FINAL_STATUS = {"done": "completed", "failed": "failed", "cancelled": "cancelled", "timed_out": "incomplete"}


def response_id(sid: str, turn: int) -> str:
    return f"resp_{sid}_{turn}"


def parse_response_id(rid: str) -> tuple[str, int]:
    """The session and turn a response id names; a malformed id is one that does not exist (404)."""
    m = RESPONSE_ID.match(rid)
    if m is None:
        raise NotFound(f"no response {rid!r}")
    return m.group(1), int(m.group(2))


def turn_start(records: Records, n: int) -> int:
    """Where turn ``n`` starts in a session's records: at ``created`` (turn 0) or at its ``turn`` record."""
    starts = [0] + [i for i, r in enumerate(records) if r["t"] == "turn"]
    if n >= len(starts):
        raise NotFound(f"no response {n} in this conversation")
    return starts[n]


def turn_records(records: Records, n: int) -> Records:
    """The records of turn ``n``, up to the next turn's start."""
    return _until_next(records[turn_start(records, n):])[0]


def _until_next(onward: Records) -> tuple[Records, bool]:
    """The records of the turn that starts ``onward``, and whether it is the latest."""
    following = next((i for i, r in enumerate(onward) if i and r["t"] == "turn"), None)
    return (onward, True) if following is None else (onward[:following], False)


def status_of(turn: Records, latest: bool) -> str:
    """completed once the agent's turn ended (its message, a function call, an approval request); a
    session that ended first gives its own status (failed, cancelled, incomplete; a session that ran out of
    ``max_steps`` before the agent ended its turn is incomplete)."""
    end = next((r for r in turn if r["t"] in ENDS), None)  # the first end decides: a later cancel changes nothing
    if end is not None and end["t"] == "final" and end.get("termination") == "max_steps" and end["status"] == "done":
        return "incomplete"  # the agent ran out of steps before it ended its turn: not a completed answer
    if end is not None:
        return FINAL_STATUS[end["status"]] if end["t"] == "final" else "completed"
    return "in_progress" if latest else "completed"


def output_items(turn: Records, sid: str, labels: Labels) -> list[dict[str, Any]]:
    """The turn's output items (see the module doc); ``labels``: the MCP server of each MCP tool (a tool
    not in it is a function tool)."""
    out: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], dict[str, Any]]] = []  # drafted reads of the block: (call, observation)
    results: list[tuple[str, dict[str, Any]]] = []  # (tool, observation) of the calls run since the last draft
    for r in turn:
        t = r["t"]
        if t == "created" and r.get("tools") is not None:
            out += _listings(r, sid, labels)
        elif t == "tool_result":
            results.append((r["name"], r["observation"]))
        elif t == "drafted" and r.get("action", {}).get("kind") == "tool" and results:
            pending += _drafted(r["action"], results)
            results = []
        elif t == "commit" and not any(s["action"]["kind"] == "message" for s in r["steps"]):
            out += _committed(r, sid, labels)
        elif t == "agent_message":
            out += [_mcp_call(a, o, sid, r["seq"], i, labels) for i, (a, o) in enumerate(pending)
                    if a["name"] in labels]
            out.append(message(r["text"], f"msg_{sid}_{r['seq']}"))
        elif t == "tool_call_pending":
            out.append({"type": "function_call", "id": f"fc_{sid}_{r['seq']}", "call_id": r["call_id"],
                        **_named(r["name"]), "arguments": json.dumps(r["arguments"]), "status": "completed"})
        elif t == "approval_request":
            out.append({"type": "mcp_approval_request", "id": r["id"], "server_label": labels.get(r["name"], ""),
                        "name": r["name"], "arguments": json.dumps(r["arguments"])})
        if t in BOUNDARIES or t == "agent_message":
            pending, results = [], []
    return out


class ToolLabels(dict[str, str]):
    """An MCP tool's name -> its server's label, and ``reads``: the session's read-only tools. A parallel
    write step's calls without a write key are its reads (shown) or writes the client denied (never shown)."""

    def __init__(self, labels: Mapping[str, str], reads: frozenset[str] = frozenset()):
        super().__init__(labels)
        self.reads = reads


def _named(name: str) -> dict[str, str]:
    """A function call's ``name`` and ``namespace``: a tool of a ``namespace`` runs as ``ns.fn`` here
    (``responses/tools.py``); OpenAI's function names hold no dot, so only a namespace makes one."""
    namespace, dot, fn = name.partition(".")
    return {"name": fn, "namespace": namespace} if dot else {"name": name}


def _calls(action: dict[str, Any]) -> list[dict[str, Any]]:
    """A tool action's calls, in order: its first, then a parallel action's ``more``."""
    return [{"name": action["name"], "arguments": action.get("arguments", {})}, *(action.get("more") or [])]


def _drafted(action: dict[str, Any], results: list[tuple[str, dict[str, Any]]]) -> list[tuple[dict, dict]]:
    """A drafted read action's (call, observation) pairs. A one-call action's result is the latest; a parallel
    action's calls ran together, so each takes the first unclaimed result of its tool, in the order they came."""
    calls = _calls(action)
    if len(calls) == 1:
        return [(calls[0], results[-1][1])]
    free, out = list(results), []
    for c in calls:
        found = next((i for i, (name, _) in enumerate(free) if name == c["name"]), None)
        if found is not None:
            out.append((c, free.pop(found)[1]))
    return out


def _committed(commit: dict[str, Any], sid: str, labels: Labels) -> list[dict[str, Any]]:
    """A commit's MCP calls: each call of each tool step that ran (a read, or a write with its key). A
    step's calls are numbered from the step's own index on, so a one-call step keeps its id."""
    out: list[dict[str, Any]] = []
    index, reads = 0, getattr(labels, "reads", frozenset())
    for s, key in zip(commit["steps"], commit["keys"], strict=True):
        calls = _calls(s["action"]) if s["action"]["kind"] == "tool" and s["observation"] else []
        several = len(calls) > 1
        keys = key if isinstance(key, list) else [key] * len(calls)
        parts = (s["observation"].get("parts") or []) if several else [s["observation"]] * len(calls)
        for c, (call, k, part) in enumerate(zip(calls, keys, parts)):
            ran = s["effect"] == "read" or k is not None or (several and call["name"] in reads)
            if call["name"] in labels and ran:
                out.append(_mcp_call(call, part, sid, commit["seq"], index + c, labels))
        index += max(len(calls), 1)
    return out


def labels_of(created: dict[str, Any], mcp: Sequence[str]) -> ToolLabels:
    """The MCP server of each MCP tool of a session, from its ``created`` record: a tool of its
    ``more_sources`` names its own; the others are its ``tool_source``'s, where that is one of ``mcp``."""
    main = created["request"]["tool_source"]
    tools = created.get("tools") or []
    return ToolLabels({t["name"]: t.get("source", main) for t in tools if t.get("source", main) in mcp},
                      frozenset(t["name"] for t in tools if (t.get("annotations") or {}).get("read_only")))


def _listings(created: dict[str, Any], sid: str, labels: Labels) -> list[dict[str, Any]]:
    """One ``mcp_list_tools`` item per MCP server, in the order its first tool comes."""
    servers = list(dict.fromkeys(labels[t["name"]] for t in created["tools"] if t["name"] in labels))
    return [{"type": "mcp_list_tools", "id": f"mcpl_{sid}_{created['seq']}" + (f"_{i}" if i else ""),
             "server_label": label, "tools": [{k: v for k, v in t.items() if k != "source"} for t in created["tools"]
                                             if labels.get(t["name"]) == label]} for i, label in enumerate(servers)]


def _mcp_call(action: dict[str, Any], obs: dict[str, Any], sid: str, seq: int, i: int, labels: Labels) -> dict[str, Any]:
    error = obs["content"] if obs.get("error") else None
    return {"type": "mcp_call", "id": f"mcp_{sid}_{seq}_{i}", "server_label": labels[action["name"]],
            "name": action["name"], "arguments": json.dumps(action.get("arguments", {})), "output": obs["content"],
            "error": error, "status": "failed" if error else "completed"}


def message(text: str, item_id: str) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def usage(turn: Records) -> dict[str, Any]:
    """Tokens of both models' calls logged in the turn, with the speculation figures (an extra field)."""
    calls = [c for r in turn if r["t"] in ("commit", "calls") for c in r["calls"]]
    prompt, cached, decode = (sum(c["usage"][i] for c in calls) for i in range(3))
    verdicts = [r["detail"] for r in turn if r["t"] == "accepted" and "/" in r.get("detail", "")]
    accepted, drafted = (sum(int(v.split("/")[i]) for v in verdicts) for i in range(2))
    by_model = {role: {"input_tokens": sum(c["usage"][0] for c in calls if c["role"] == role),
                       "output_tokens": sum(c["usage"][2] for c in calls if c["role"] == role)}
                for role in ("weak", "mid", "strong") if role != "mid" or any(c["role"] == "mid" for c in calls)}
    # the mid verifier (the three-tier chain) is named only in a turn where it had calls
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": prompt - cached}, "output_tokens": decode,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + decode,
            "speculation": {"blocks": len(verdicts), "drafted_steps": drafted, "accepted_steps": accepted,
                            "strong_calls": sum(c["role"] == "strong" and c["purpose"] != "prefill" for c in calls),
                            "prefill_calls": sum(c["purpose"] == "prefill" for c in calls),
                            "verdict_tokens": sum(c["usage"][2] for c in calls if c["purpose"] == "verify"),
                            "by_model": by_model}}


# the echo of a turn whose meta says nothing of it: a turn's own ``echo`` (translate.applied) overrides it
ECHO = {**SAMPLING, "tool_choice": "auto", "parallel_tool_calls": False, "truncation": "disabled",
        "text": {"format": {"type": "text"}}, "reasoning": None, "max_output_tokens": None, "max_tool_calls": None,
        "service_tier": "default", "safety_identifier": None, "prompt_cache_key": None, "user": None,
        "conversation": None}


def turn_meta(created: dict[str, Any], turn: Records, n: int) -> dict[str, Any]:
    """What the request of response ``n`` said about it (``TurnMeta``), given its turn's records."""
    return (created.get("turn") if n == 0 else turn[0].get("meta")) or {}


def response(created: dict[str, Any], onward: Records, sid: str, n: int, labels: Labels) -> dict[str, Any]:
    """Response ``n`` of a session, from its ``created`` record and its records from turn ``n``'s start on:
    every field of the specification's response object, those about the request as applied (``echo``)."""
    turn, latest = _until_next(onward)
    meta = turn_meta(created, turn, n)
    status = status_of(turn, latest)
    final = next((r for r in turn if r["t"] == "final"), None)
    error = {"code": failure_code(final.get("error")), "message": final.get("error") or "failed"} \
        if status == "failed" else None
    incomplete = {"reason": _incomplete_reason(final)} if status == "incomplete" else None
    created_at = meta.get("created_at", 0)
    stamps = [r["at"] for r in turn if r.get("at")]
    done = None if status == "in_progress" else max([created_at, *stamps])
    echo = {**ECHO, **meta.get("echo", {})}
    # what the request named (a handoff or a fork starts a new session, yet names the response it continued)
    previous = echo.pop("previous_response_id", response_id(sid, n - 1) if n else None)
    return {"id": response_id(sid, n), "object": "response", "created_at": created_at, "completed_at": done,
            "status": status, "incomplete_details": incomplete, "model": meta.get("model", ""),
            "previous_response_id": previous,
            "instructions": created["request"].get("instructions"), "output": output_items(turn, sid, labels),
            "error": error, **echo, "tools": meta.get("tools", []), "usage": usage(turn),
            "store": meta.get("store", True), "background": meta.get("background", False),
            "metadata": meta.get("metadata", {})}


FAILURES = (("unavailable:", "unavailable"), ("engine unavailable:", "engine_unavailable"),
            ("engine error:", "engine_error"))  # a failed session's error, by the runner's prefix -> its code


def failure_code(error: str | None) -> str:
    """A failed session's ``error.code``: ``unavailable`` for the infrastructure past its patience (the
    session log, a tool host), ``engine_unavailable`` / ``engine_error`` for an engine, else ``server_error``."""
    return next((code for prefix, code in FAILURES if (error or "").startswith(prefix)), "server_error")


def _incomplete_reason(final: dict[str, Any] | None) -> str:
    """Why a response is incomplete: the step limit, or the session's own error (a timeout)."""
    final = final or {}
    return "max_steps" if final.get("termination") == "max_steps" else final.get("error") or "incomplete"


def hidden(records: Records, n: int) -> bool:
    """Whether response ``n`` was asked with ``store: false`` (it is not retrievable afterwards)."""
    return turn_meta(records[0], turn_records(records, n), n).get("store") is False


def output_ids(records: Records, sid: str, labels: Labels) -> list[str]:
    """The ids of every output item of the session so far, turn by turn."""
    starts = [0] + [i for i, r in enumerate(records) if r["t"] == "turn"]
    return [item["id"] for s in starts for item in output_items(_until_next(records[s:])[0], sid, labels)]


def history_until(records: Records, sid: str, n: int, labels: Labels) -> list[dict[str, Any]]:
    """The conversation's items up to the end of response ``n``: each turn's input, then its output."""
    return [i for k in range(n + 1) for i in (*input_items(records, sid, k),
                                               *output_items(turn_records(records, k), sid, labels))]


def all_items(records: Records, sid: str, labels: Labels) -> dict[str, dict[str, Any]]:
    """Every item of the session, input and output, by id."""
    turns = sum(r["t"] == "turn" for r in records) + 1
    starts = [0] + [i for i, r in enumerate(records) if r["t"] == "turn"]
    out = {i["id"]: i for s in starts for i in output_items(_until_next(records[s:])[0], sid, labels)}
    out.update({i["id"]: i for n in range(turns) for i in input_items(records, sid, n)})
    return out


def input_items(records: Records, sid: str, n: int) -> list[dict[str, Any]]:
    """What the client sent in turn ``n``, in order."""
    out: list[dict[str, Any]] = []
    for r in turn_records(records, n):
        item_id = f"in_{sid}_{r['seq']}"
        if r["t"] == "created" and r["request"].get("message"):
            out.append(_user(r["request"]["message"], item_id))
        elif r["t"] == "user_message":
            out.append(_user(r["text"], item_id))
        elif r["t"] == "tool_result_posted":
            out.append({"type": "function_call_output", "id": item_id, "call_id": r["call_id"],
                        "output": r["observation"]["content"], "status": "completed"})
        elif r["t"] == "approval_response":
            out.append({"type": "mcp_approval_response", "id": item_id, "approval_request_id": r["id"],
                        "approve": r["approve"], "reason": r.get("reason")})
    return out


def _user(text: str, item_id: str) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "role": "user", "status": "completed",
            "content": [{"type": "input_text", "text": text}]}
