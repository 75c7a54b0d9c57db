"""``specagent-ray loadtest --api chat`` and ``--api messages``: a stateless agent loop on a wire against the
same loop on the sessions API, in one run, at the same time.

A loop is what a coding agent does: its user message is a plan (``models/scripted_plan.py``) of ``steps - 1`` tool
calls, reads and writes in turn (``read_file`` is a read the profile trusts, ``write_file`` a write, staged
and verified before it goes out), then ``say done``. A step is one turn of the agent: it ends with a tool
call or the final message.
- chat / messages: each step is one ``POST /v1/chat/completions`` or ``POST /v1/messages`` round trip that
  carries the WHOLE history, as real clients do (they never name a session); the client runs each tool
  call and appends its result. The server binds every request after the first to the loop's session
  (``agents/binder.py``), so a loop must be ONE session: the report counts the sessions each loop saw
  (the ``specagent`` extension of each answer names it), and a loop that saw more is an error.
- sessions: create (its message is the plan), then each tool result's POST; a step runs from that POST
  (or the create) until the ``tool_call_pending`` or ``agent_message`` event that ends the agent's turn
  arrives on the session's event stream.

``concurrency`` workers run loops back to back, odd workers on the wire and even ones on the sessions API,
until ``duration_s`` has passed (no loop starts after it) or their API's share of ``conversations`` is
taken. Steps per second per API count the steps that ended in the window where every worker was still
busy (from the start until the first worker found no more work), so both APIs are measured under the
same load.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ..launch.client import GatewayClient, GatewayError

WIRES = ("chat", "messages")
SYSTEM = "You edit files in a repository. Read before you write."
PARAMS = {"read_file": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
          "write_file": {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                         "required": ["path", "text"]}}
# the profile trusts read_file as a read (command.py deploys it so); write_file is a write
READ_TOOLS = ("read_file",)


def plan_calls(steps: int, i: int) -> list[tuple[str, dict[str, str]]]:
    """The tool calls of loop ``i``: ``steps - 1`` of them, a read then a write of the same file, in turn."""
    calls = []
    for k in range(steps - 1):
        path = f"src/m{i}_{k // 2}.py"
        calls.append(("read_file", {"path": path}) if k % 2 == 0 else
                     ("write_file", {"path": path, "text": f"x = {k}"}))
    return calls


def plan_text(steps: int, i: int) -> str:
    return "; ".join([f"call {n} {json.dumps(a)}" for n, a in plan_calls(steps, i)] + ["say done"])


@dataclass(frozen=True)
class WireLoad:
    url: str
    api_key: str
    wire: str  # chat | messages
    conversations: int = 100  # most loops, both APIs together
    concurrency: int = 10  # workers, half on each API
    steps: int = 3  # per loop: steps - 1 tool calls, then the final message
    duration_s: float = 60.0  # no loop starts after this
    source: str = "app"  # the profile's client tool source
    model: str = "specagent"
    timeout_s: float = 60.0
    result_chars: int = 200  # each tool result the client sends back

    def __post_init__(self) -> None:
        if self.wire not in WIRES:
            raise ValueError(f"wire must be one of {', '.join(WIRES)}, got {self.wire!r}")
        if self.concurrency < 2 or self.steps < 1 or self.conversations < 2 or not self.duration_s > 0:
            raise ValueError("a wire comparison needs --concurrency >= 2 (a worker per API at least), "
                             "--turns >= 1, --sessions >= 2 and --duration-s > 0")


@dataclass
class WireResult:
    steps: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # api -> (end since start s, latency)
    first: dict[str, list[float]] = field(default_factory=dict)  # api -> each loop's first step
    loops: dict[str, int] = field(default_factory=dict)  # api -> loops finished
    sessions_per_loop: list[int] = field(default_factory=list)  # the wire's loops: distinct sessions each saw
    errors: list[str] = field(default_factory=list)
    window_s: float = 0.0  # every worker busy from 0 until this
    wall_s: float = 0.0


def result_text(name: str, args: dict[str, str], chars: int) -> str:
    """What the client's tool returns: a file's lines for a read, an acknowledgement for a write."""
    if name == "write_file":
        return json.dumps({"ok": True, "path": args["path"]})
    line = f"# {args['path']}\ndef f(x):\n    return x + 1\n"
    return (line * (chars // len(line) + 1))[:chars]


async def compare_wire(cfg: WireLoad, on_step: Any = lambda done: None) -> WireResult:
    """Run the workers to their end; never raises for a failed loop (it is an error of the result)."""
    res = WireResult(steps={"sessions": [], cfg.wire: []}, first={"sessions": [], cfg.wire: []},
                     loops={"sessions": 0, cfg.wire: 0})
    claimed, idle = {"sessions": 0, cfg.wire: 0}, []
    share = {"sessions": (cfg.conversations + 1) // 2, cfg.wire: cfg.conversations // 2}
    begun = time.perf_counter()

    async with GatewayClient(cfg.url, cfg.api_key, cfg.timeout_s) as client:
        async def worker(w: int) -> None:
            api = cfg.wire if w % 2 else "sessions"
            while time.perf_counter() - begun < cfg.duration_s and claimed[api] < share[api]:
                i = 2 * claimed[api] + (1 if w % 2 else 0)
                claimed[api] += 1
                sids: set[str] = set()  # the sessions the loop saw, even where it failed
                try:
                    times = await (_wire(client, cfg, i, sids) if w % 2 else _sessions(client, cfg, i))
                except (GatewayError, httpx.HTTPError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
                    res.errors.append(f"{api} loop {i}: {type(exc).__name__}: {exc}"[:300])
                    times = []
                if api != "sessions" and sids:
                    res.sessions_per_loop.append(len(sids))
                    if len(sids) != 1:
                        res.errors.append(f"{api} loop {i} saw {len(sids)} sessions, not one: {sorted(sids)}"[:300])
                if not times:
                    await asyncio.sleep(0.25)  # a failing server is not hammered in a tight loop
                    continue
                _record(res, api, times, time.perf_counter() - begun)
                on_step(sum(len(s) for s in res.steps.values()))
            idle.append(time.perf_counter() - begun)

        await asyncio.gather(*(worker(w) for w in range(cfg.concurrency)))
    res.wall_s = time.perf_counter() - begun
    res.window_s = min(idle) if idle else res.wall_s
    return res


def _record(res: WireResult, api: str, times: list[float], now: float) -> None:
    """A finished loop's steps, each with its end time since the start (worked back from ``now``)."""
    ends, t = [], now
    for latency in reversed(times):
        ends.append(t)
        t -= latency
    res.steps[api] += list(zip(reversed(ends), times))
    res.first[api].append(times[0])
    res.loops[api] += 1


async def _sessions(client: GatewayClient, cfg: WireLoad, i: int) -> list[float]:
    tools = [{"name": n, "description": n.replace("_", " "), "parameters": PARAMS[n]} for n in PARAMS]
    calls, times = plan_calls(cfg.steps, i), []
    start = time.perf_counter()
    created = await client.create(tool_source=cfg.source, message=plan_text(cfg.steps, i), user="client",
                                  method=cfg.model, client_tools=tools, instructions=SYSTEM)
    sid = created["session_id"]
    events = client.events(sid)
    try:
        async for event in events:
            if event["t"] == "tool_call_pending":
                times.append(time.perf_counter() - start)
                name, args = _expect(calls, len(times) - 1, event["name"], event["arguments"])
                start = time.perf_counter()
                await client.post_tool_result(sid, event["call_id"], result_text(name, args, cfg.result_chars))
            elif event["t"] == "agent_message":
                times.append(time.perf_counter() - start)
                _said(event["text"], len(times), cfg.steps)
                return times
            elif event["t"] == "final":
                raise ValueError(f"the session ended: {event.get('error') or event.get('status')}")
        raise ValueError("the event stream ended")
    finally:
        await events.aclose()
        await client.cancel(sid)


def _expect(calls: list[tuple[str, dict[str, str]]], k: int, name: str, arguments: Any) -> tuple[str, dict]:
    """The plan's call ``k``, checked against what the agent called (an agent that loops is an error)."""
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    if k >= len(calls) or (name, args) != calls[k]:
        raise ValueError(f"step {k}: the agent called {name} {args}, the plan says "
                         f"{calls[k] if k < len(calls) else 'say done'}")
    return name, args


def _said(text: str, steps_done: int, steps: int) -> None:
    if text != "done" or steps_done != steps:
        raise ValueError(f"the agent said {text!r} at step {steps_done} of {steps}")


async def _wire(client: GatewayClient, cfg: WireLoad, i: int, sids: set[str]) -> list[float]:
    """One loop on the wire: every request carries the whole history. ``sids`` gets the sessions the answers
    name; they are cancelled after the loop."""
    step = _chat_step if cfg.wire == "chat" else _messages_step
    calls, times = plan_calls(cfg.steps, i), []
    history = _opening(cfg.wire, plan_text(cfg.steps, i))
    try:
        for k in range(cfg.steps):
            start = time.perf_counter()
            done = await step(client, cfg, history, calls, k, sids)
            times.append(time.perf_counter() - start)
            if done:
                _said(_last_text(cfg.wire, history[-1]), k + 1, cfg.steps)
                return times
        raise ValueError(f"the agent did not end its turn after {cfg.steps} steps")
    finally:
        for sid in sids:
            await client.http.delete(f"/v1/sessions/{sid}")


def _opening(wire: str, plan: str) -> list[dict[str, Any]]:
    if wire == "chat":
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": plan}]
    return [{"role": "user", "content": plan}]


def _last_text(wire: str, message: dict[str, Any]) -> str:
    if wire == "chat":
        return message.get("content") or ""
    return "".join(b.get("text", "") for b in message["content"] if b["type"] == "text")


async def _post(client: GatewayClient, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    r = await client.http.post(path, json=body, headers=headers)
    if r.status_code != 200:
        raise GatewayError(r.status_code, r.text[:200])
    return r.json()


async def _chat_step(client: GatewayClient, cfg: WireLoad, history: list[dict[str, Any]],
                     calls: list[tuple[str, dict[str, str]]], k: int, sids: set[str]) -> bool:
    """One ``POST /v1/chat/completions``: its session into ``sids``, the answer and the tool results onto
    ``history``; whether the agent ended its turn with a message."""
    tools = [{"type": "function", "function": {"name": n, "parameters": PARAMS[n]}} for n in PARAMS]
    out = await _post(client, "/v1/chat/completions", {"model": cfg.model, "messages": history, "tools": tools})
    sids.add(out["specagent"]["session_id"])
    choice = out["choices"][0]
    message = {key: v for key, v in choice["message"].items() if key in ("role", "content", "tool_calls")}
    history.append(message)
    if choice["finish_reason"] == "tool_calls":
        for c in message["tool_calls"]:
            name, args = _expect(calls, k, c["function"]["name"], c["function"]["arguments"])
            history.append({"role": "tool", "tool_call_id": c["id"],
                            "content": result_text(name, args, cfg.result_chars)})
    return choice["finish_reason"] != "tool_calls"


async def _messages_step(client: GatewayClient, cfg: WireLoad, history: list[dict[str, Any]],
                         calls: list[tuple[str, dict[str, str]]], k: int, sids: set[str]) -> bool:
    """One ``POST /v1/messages``, as ``_chat_step``."""
    tools = [{"name": n, "input_schema": PARAMS[n]} for n in PARAMS]
    out = await _post(client, "/v1/messages", {"model": cfg.model, "max_tokens": 1024, "system": SYSTEM,
                                               "messages": history, "tools": tools},
                      {"anthropic-version": "2023-06-01"})
    sids.add(out["specagent"]["session_id"])
    history.append({"role": "assistant", "content": out["content"]})
    if out["stop_reason"] == "tool_use":
        results = []
        for b in out["content"]:
            if b["type"] == "tool_use":
                name, args = _expect(calls, k, b["name"], b["input"])
                results.append({"type": "tool_result", "tool_use_id": b["id"],
                                "content": result_text(name, args, cfg.result_chars)})
        history.append({"role": "user", "content": results})
    return out["stop_reason"] != "tool_use"


def summary(cfg: WireLoad, res: WireResult) -> dict[str, Any]:
    """Per API: steps per second in the window where every worker was busy, step latency percentiles (ms),
    loops; the wire against the sessions API; and the sessions each of the wire's loops saw."""
    def stats(api: str) -> dict[str, Any]:
        xs = [latency for _, latency in res.steps[api]]
        in_window = sum(end <= res.window_s for end, _ in res.steps[api])
        out: dict[str, Any] = {"steps": len(xs), "loops": res.loops[api],
                               "steps_per_s": in_window / res.window_s if res.window_s > 0 else 0.0}
        if xs:
            q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else [xs[0]] * 99
            out.update(p50_ms=1000 * q[49], p95_ms=1000 * q[94], mean_ms=1000 * statistics.fmean(xs))
        return out

    apis = {api: stats(api) for api in ("sessions", cfg.wire)}
    base, wire = apis["sessions"], apis[cfg.wire]
    against = ({"p50_ms": wire["p50_ms"] - base["p50_ms"], "p95_ms": wire["p95_ms"] - base["p95_ms"],
                "steps_per_s_ratio": wire["steps_per_s"] / base["steps_per_s"] if base["steps_per_s"] else None}
               if base["steps"] and wire["steps"] else {})
    loops = res.sessions_per_loop
    return {"label": "MEASURED on this machine; engines SCRIPTED (plan-following, no model)", "wire": cfg.wire,
            "conversations": cfg.conversations, "concurrency": cfg.concurrency, "steps_each": cfg.steps,
            "duration_s": cfg.duration_s, "window_s": res.window_s, "wall_s": res.wall_s, "apis": apis,
            "first_step_ms": {api: 1000 * statistics.median(xs) if xs else None for api, xs in res.first.items()},
            "wire_against_sessions": against,
            "sessions_per_loop": {"loops": len(loops), "one_session": sum(n == 1 for n in loops),
                                  "max": max(loops, default=0)},
            "errors": res.errors}


def write(s: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{s['wire']}-vs-sessions.json"
    path.write_text(json.dumps(s, indent=2))
    return path
