"""What the session binder costs one stateless request: normalise its history (``canon``), fingerprint it, look it
up (``SessionBinder.lookup``), against a request that names its session, which costs a scan of its call ids
(``canon.sessions_named``) at most.

End to end (``wire_cost``, MEASURED against a gateway on scripted engines: by default the scripted profile deployed
on a local Ray instance, or ``--url``): the same turn of the same loop,
once as a Chat Completions request that resends its whole 40-item, 200 KB history and is bound to its session by
the binder, once posted on the sessions API (its tool result, until the agent's next event). Run it as
``python -m specagent_ray.bench.served.binder_cost``: both, as a table of each figure next to its baseline.

The history is a coding agent's (``realistic_history``): instructions, a task, then rounds of a short agent
message, a tool call and its result (file reads, searches, an edit), most of the bytes in the results, as code
with its newlines and indentation. ``binder_cost`` is a micro benchmark for the ``bench`` command, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

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


SYSTEM_E2E = "You edit files in a repository. Read before you write."
READ = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def wire_loop(n_items: int, total_chars: int, seed: int = 0) -> tuple[str, str, list[str]]:
    """The loop ``wire_cost`` runs: instructions (a coding agent's, about 4 % of the bytes), a plan of
    ``(n_items - 2) // 2`` file reads then ``say done``, and each read's result (the rest of the bytes)."""
    rng = random.Random(seed)
    reads = (n_items - 2) // 2
    system = SYSTEM_E2E + "\n" + _code(rng, int(total_chars * SYSTEM_SHARE))
    plan = "; ".join([f'call read_file {{"path": "src/module_{k}.py"}}' for k in range(reads)] + ["say done"])
    per = max(0, total_chars - len(system) - len(plan)) // max(1, reads)
    return system, plan, [_code(rng, per) for _ in range(reads)]


async def _chat_to_last(http: Any, system: str, plan: str, results: list[str]) -> tuple[dict[str, Any], str]:
    """Run the chat loop up to its last request, unmeasured; that request's body, and the loop's session."""
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": READ}}]
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": plan}]
    sid = ""
    for k, result in enumerate(results):
        r = await http.post("/v1/chat/completions", json={"model": "specagent", "messages": messages, "tools": tools})
        r.raise_for_status()
        out = r.json()
        message = out["choices"][0]["message"]
        sid = sid or out["specagent"]["session_id"]
        if out["specagent"]["session_id"] != sid or not message.get("tool_calls"):
            raise RuntimeError(f"chat step {k}: not the loop's session or not a tool call: {out['specagent']}")
        messages += [{"role": "assistant", "content": message.get("content"), "tool_calls": message["tool_calls"]},
                     {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": result}]
    return {"model": "specagent", "messages": messages, "tools": tools}, sid


async def _sessions_to_last(client: Any, system: str, plan: str, results: list[str]) -> tuple[str, Any, str]:
    """The same loop on the sessions API up to its last tool call; the session, its open event stream, the call."""
    created = await client.create(tool_source="app", message=plan, user="client", method="specagent",
                                  instructions=system, client_tools=[{"name": "read_file", "parameters": READ}])
    sid, events = created["session_id"], client.events(created["session_id"])
    k = 0
    async for event in events:
        if event["t"] == "tool_call_pending":
            if k == len(results) - 1:
                return sid, events, event["call_id"]
            await client.post_tool_result(sid, event["call_id"], results[k])
            k += 1
        elif event["t"] in ("agent_message", "final"):
            raise RuntimeError(f"the session's loop ended early: {event}")
    raise RuntimeError("the event stream ended")


async def _responses_to_last(http: Any, system: str, plan: str, results: list[str]) -> dict[str, Any]:
    """The same loop on the Responses API (``previous_response_id``: a request that names its session) up to its
    last request, unmeasured; that request's body."""
    tools = [{"type": "function", "name": "read_file", "parameters": READ}]
    body: dict[str, Any] = {"model": "specagent", "instructions": system, "input": plan, "tools": tools}
    for k, result in enumerate(results):
        r = await http.post("/v1/responses", json=body)
        r.raise_for_status()
        out = r.json()
        if out["output"][-1]["type"] != "function_call":
            raise RuntimeError(f"responses step {k}: not a tool call: {out['output'][-1]}")
        body = {"model": "specagent", "previous_response_id": out["id"], "tools": tools, "input": [
            {"type": "function_call_output", "call_id": out["output"][-1]["call_id"], "output": result}]}
    return body


async def _one_pair(url: str, key: str, system: str, plan: str, results: list[str], chat_first: bool) -> dict:
    from ...launch.client import GatewayClient

    async with GatewayClient(url, key, timeout_s=120) as client:
        body, chat_sid = await _chat_to_last(client.http, system, plan, results)
        named = await _responses_to_last(client.http, system, plan, results)
        sid, events, call_id = await _sessions_to_last(client, system, plan, results)
        times: dict[str, float] = {}

        async def responses() -> None:
            start = time.perf_counter()
            r = await client.http.post("/v1/responses", json=named)
            times["responses_s"] = time.perf_counter() - start
            out = r.json()
            if out["status"] != "completed" or out["output"][-1]["type"] != "message":
                raise RuntimeError(f"the measured Responses request did not end the loop: {out['status']}")
            await client.http.delete(f"/v1/responses/{out['id']}")

        async def chat() -> None:
            start = time.perf_counter()
            r = await client.http.post("/v1/chat/completions", json=body)
            times["chat_s"] = time.perf_counter() - start
            out = r.json()
            if out["specagent"]["session_id"] != chat_sid or out["specagent"]["session"] != "continued":
                raise RuntimeError(f"the measured request did not bind to its session: {out['specagent']}")

        async def posted() -> None:
            start = time.perf_counter()
            await client.post_tool_result(sid, call_id, results[-1])
            async for event in events:
                if event["t"] == "agent_message":
                    times["sessions_s"] = time.perf_counter() - start
                    return

        for part in ((chat, responses, posted) if chat_first else (posted, responses, chat)):
            await part()
        await events.aclose()
        for s in (sid, chat_sid):
            await client.cancel(s)
        return {**times, "body_bytes": len(json.dumps(body)), "messages": len(body["messages"])}


def wire_cost(url: str, key: str, n_items: int = 40, total_chars: int = 200_000, repeats: int = 10) -> dict[str, Any]:
    """MEASURED against the gateway at ``url`` (scripted engines; its client source ``app`` trusts ``read_file`` as a
    read): medians over ``repeats`` loops of ``chat_s``, the last request of a Chat Completions loop (``n_items``
    messages, ``total_chars`` of text; bound to its session), and ``sessions_s``, the same turn on the sessions
    API (POST its tool result, until the agent's message arrives on the open event stream), and ``responses_s``,
    the same turn on the Responses API (one round trip naming its session by ``previous_response_id``, carrying only
    the new tool result). The chat request goes first in even loops, last in odd ones."""
    system, plan, results = wire_loop(n_items, total_chars)
    pairs = [asyncio.run(_one_pair(url, key, system, plan, results, chat_first=r % 2 == 0))
             for r in range(max(1, repeats))]
    chat, posted, named = (statistics.median(p[k] for p in pairs) for k in ("chat_s", "sessions_s", "responses_s"))
    return {"chat_s": chat, "sessions_s": posted, "responses_s": named, "extra_s": chat - posted,
            "ratio": chat / posted, "ratio_responses": chat / named, "extra_responses_s": chat - named,
            **{f"{k}_all_s": [p[f"{k}_s"] for p in pairs] for k in ("chat", "sessions", "responses")},
            "messages": pairs[0]["messages"], "body_bytes": pairs[0]["body_bytes"], "repeats": len(pairs)}


def deployed_cost(n_items: int, total_chars: int, repeats: int) -> dict[str, Any]:
    """``wire_cost`` against the scripted profile deployed on a fresh local Ray instance (loopback only)."""
    import tempfile

    from ...launch.workload import local_cluster

    with tempfile.TemporaryDirectory(prefix="specagent-binder-log-") as log:
        overrides = {"session_log": log, "tool_sources": {"app": {"read_tools": ["read_file"]}}}
        with local_cluster("scripted", args=overrides) as url:
            return {**wire_cost(url, "dev-key", n_items, total_chars, repeats), "where": "local Ray, scripted profile"}


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("binder", help="MEASURED: the session binder's cost per stateless request, next to a "
                       "request that names its session, in the binder alone and end to end",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=40, help="items (messages) in the history")
    p.add_argument("--chars", type=int, default=200_000, help="characters of text in the history")
    p.add_argument("--repeats", type=int, default=50, help="runs of the binder alone (medians)")
    p.add_argument("--wire-repeats", type=int, default=10, help="loops end to end (medians); 0: skip")
    p.add_argument("--url", default=None, help="end to end against this gateway (a scripted profile whose client "
                   "source trusts read_file; key in $SPECAGENT_API_KEY); default: deploy the scripted profile on "
                   "a local Ray instance")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    if args.items < 4 or args.chars < 1000 or args.repeats < 1 or args.wire_repeats < 0:
        raise ValueError("--items must be at least 4, --chars at least 1000, --repeats at least 1")
    micro = binder_cost(args.items, args.repeats, args.chars)
    wire = None
    if args.wire_repeats and args.url:
        wire = {**wire_cost(args.url, os.environ.get("SPECAGENT_API_KEY", "dev-key"), args.items, args.chars,
                            args.wire_repeats), "where": args.url}
    elif args.wire_repeats:
        wire = deployed_cost(args.items, args.chars, args.wire_repeats)
    console.print(table(micro, wire))
    return 0 if micro["hit"] else 1


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.3f}" if seconds < 0.01 else f"{1000 * seconds:.1f}"


def table(micro: dict[str, Any], wire: dict[str, Any] | None) -> Table:
    """Each figure next to its baseline, a request that names its session, and their ratio."""
    t = Table(title=f"The session binder per request: a {micro['n_items']}-item history of {micro['chars']:,} "
                    f"characters (MEASURED on this machine)")
    for name, justify in (("figure", "left"), ("ms", "right"), ("baseline", "left"), ("baseline ms", "right"),
                          ("ratio", "right")):
        t.add_column(name, justify=justify)
    named = "names its session (call-id scan)"
    for what, key in (("normalise (canon)", "canon_s"), ("fingerprint", "fingerprint_s"),
                      ("look up (hash + index)", "lookup_s"), ("remember after the turn", "remember_s"),
                      ("binder per request (canon + look up + remember)", "per_request_s")):
        t.add_row(what, _ms(micro[key]), named, _ms(micro["named_s"]), f"{micro[key] / micro['named_s']:.1f}x")
    if wire:
        t.add_row(f"chat request that binds ({wire['messages']} messages, {wire['body_bytes'] / 1000:.0f} KB), "
                  f"end to end", _ms(wire["chat_s"]), "the same turn posted on the sessions API",
                  _ms(wire["sessions_s"]), f"{wire['ratio']:.2f}x")
        t.add_row("", "", "the same turn on the Responses API (previous_response_id)", _ms(wire["responses_s"]),
                  f"{wire['ratio_responses']:.2f}x")
    t.caption = (f"medians: binder alone of {micro['repeats']} runs, among 10,000 entries of the tenant"
                 + (f"; end to end of {wire['repeats']} loops ({wire.get('where', 'a gateway')}, scripted engines), "
                    f"{1000 * wire['extra_s']:+.1f} / {1000 * wire['extra_responses_s']:+.1f} ms per request"
                    if wire else ""))
    return t


if __name__ == "__main__":
    own = add_parser(argparse.ArgumentParser(prog="python -m specagent_ray.bench").add_subparsers())
    raise SystemExit(run_from_args(own.parse_args(), Console(width=160)))
