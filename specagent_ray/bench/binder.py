"""What the session binder costs one stateless request: normalise its history (``canon``), fingerprint it, look it
up (``SessionBinder.lookup``), against a request that names its session, which costs a scan of its call ids
(``canon.sessions_named``) at most.

The history is a coding agent's (``realistic_history``): instructions, a task, then rounds of a short agent
message, a tool call and its result (file reads, searches, an edit), most of the bytes in the results, as code
with its newlines and indentation. ``binder_cost`` is a micro benchmark for the ``bench`` command, not a test.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from specagent_ray.serve.agents import canon
from specagent_ray.serve.agents.binder import Binding, SessionBinder

SID = "0-0123456789abcdef"
WORDS = ("def", "return", "self.value", "if", "not", "None:", "for", "item", "in", "items:", "=", "(a,", "b)",
         "# why", "raise", "ValueError(", "await", "client.get(", "path)", "len(x)", "+", "1", "import", "os")
# Shares of the history's characters, by item: a coding agent's bytes are mostly what its tools read.
SYSTEM_SHARE, TASK_SHARE, MESSAGE_SHARE, EDIT_SHARE = 0.04, 0.01, 0.002, 0.02


def _code(rng: random.Random, chars: int) -> str:
    lines, size = [], 0
    while size < chars:
        line = "    " * rng.randint(0, 3) + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 10)))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:chars]


def _call_id(k: int) -> str:
    return f"{SID}:w{k}" if k % 4 == 3 else f"{SID}:r{k}.1-{k:08x}"


def realistic_history(n_items: int = 40, total_chars: int = 200_000, seed: int = 0) -> list[dict[str, Any]]:
    """A coding agent's history of ``n_items`` wire-like items, ``total_chars`` characters of text in all (to a
    line): a system text, a task (as text parts), then rounds of agent message (every other one empty: it only
    calls a tool), call (file reads; every fourth an edit carrying code) and result, the results taking what is
    left. Each dict is one canon item's constructor input (``kind`` and its fields)."""
    if n_items < 2:
        raise ValueError("a history has at least instructions and a task")
    rng = random.Random(seed)
    items: list[dict[str, Any]] = [
        {"kind": "system", "text": _code(rng, int(total_chars * SYSTEM_SHARE))},
        {"kind": "user", "content": [{"type": "text", "text": _code(rng, int(total_chars * TASK_SHARE))}]},
    ]
    for k in range(n_items - 2):
        step, part = divmod(k, 3)
        if part == 0:
            text = "" if step % 2 else _code(rng, int(total_chars * MESSAGE_SHARE))
            items.append({"kind": "assistant", "content": text})
        elif part == 1:
            edit = step % 4 == 3
            args = {"path": f"src/module_{step}.py", **(
                {"content": _code(rng, int(total_chars * EDIT_SHARE))} if edit else {"start": 1, "end": 400})}
            items.append({"kind": "call", "call_id": _call_id(step), "name": "edit_file" if edit else "read_file",
                          "arguments": json.dumps(args, indent=1)})
        else:
            items.append({"kind": "result", "call_id": _call_id(step), "content": ""})
    results = [item for item in items if item["kind"] == "result"]
    left = max(0, total_chars - history_chars(items))
    for item in results:
        item["content"] = _code(rng, left // len(results))
    return items


def history_chars(raw: list[dict[str, Any]]) -> int:
    """The characters of text a history carries (texts, contents, arguments; not ids or names)."""
    total = 0
    for item in raw:
        for key in ("text", "content", "arguments"):
            value = item.get(key)
            if isinstance(value, str):
                total += len(value)
            elif isinstance(value, list):
                total += sum(len(p.get("text", "")) for p in value)
    return total


def to_canon(raw: list[dict[str, Any]]) -> list[canon.Canon]:
    """The canon items of a ``realistic_history``, through the constructors a wire calls."""
    out = []
    for item in raw:
        kind = item["kind"]
        if kind == "system":
            out.append(canon.system(item["text"]))
        elif kind in ("user", "assistant"):
            out.append(getattr(canon, kind)(item["content"]))
        elif kind == "call":
            out.append(canon.call(item["call_id"], item["name"], item["arguments"]))
        else:
            out.append(canon.result(item["call_id"], item["content"]))
    return out


def binder_cost(n_items: int = 40, repeats: int = 50, total_chars: int = 200_000) -> dict[str, Any]:
    """Seconds of the binder's work on one history of ``n_items`` items, ``total_chars`` characters (a coding
    agent's 40 items, 200 KB by default), medians of ``repeats`` runs over a binder holding it among 10,000 of
    the tenant's entries: ``canon_s`` (normalise the history), ``fingerprint_s`` (hash it), ``lookup_s``
    (``SessionBinder.lookup``: hash and index), ``per_lookup_s`` (normalise and look up: what a request that
    does not name its session pays to find it), ``remember_s`` (``remember`` after the turn, of the history
    already normalised), ``per_request_s`` (the three), ``named_s`` (the call-id scan that a request naming
    its session pays at most), and ``hit`` (every lookup found its binding)."""
    raw = realistic_history(n_items, total_chars)
    binder = SessionBinder()
    owner = "tenant-0"
    for i in range(binder.per_tenant - 1):
        binder.remember(owner, [canon.user(f"other history {i}")], Binding(SID, i))
    binder.remember(owner, to_canon(raw), Binding(SID, 7))
    keys = ("canon_s", "fingerprint_s", "lookup_s", "remember_s", "named_s")
    runs: dict[str, list[float]] = {k: [] for k in keys}
    hit = True
    for _ in range(max(1, repeats)):
        marks = [time.perf_counter()]
        history = to_canon(raw)
        marks.append(time.perf_counter())
        canon.fingerprint(owner, history)
        marks.append(time.perf_counter())
        found = binder.lookup(owner, history)
        marks.append(time.perf_counter())
        binder.remember(owner, history, Binding(SID, 7))
        marks.append(time.perf_counter())
        canon.sessions_named(history)
        marks.append(time.perf_counter())
        hit = hit and found == Binding(SID, 7)
        for key, start, end in zip(keys, marks, marks[1:]):
            runs[key].append(end - start)
    out: dict[str, Any] = {k: _median(v) for k, v in runs.items()}
    out["per_lookup_s"] = out["canon_s"] + out["lookup_s"]
    out["per_request_s"] = out["per_lookup_s"] + out["remember_s"]
    out.update(n_items=n_items, chars=history_chars(raw), repeats=max(1, repeats), hit=hit)
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
