"""``specagent-ray loadtest --api responses``: the same conversations through both front doors, in one
run, and what the Responses API costs over the sessions API.

Conversations alternate between the two APIs (even ones on the sessions API, odd ones on the Responses
API), so both see the same load at the same time. Each has ``turns`` turns whose user message is a plan
(``say turn N``) that plan-following engines answer in one step, so a turn's latency is the serving
path's own: the gateway, the coordinator, the session log, and the API's translation. A turn's latency:
- sessions API: from sending its message (``POST /v1/sessions`` or ``.../messages``) until its
  ``agent_message`` event arrives on the session's event stream;
- Responses API: the ``POST /v1/responses`` round trip (it answers once the agent's turn ended).
The overhead is the Responses API's percentile minus the sessions API's, from the same run (MEASURED).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ..launch.client import GatewayClient, GatewayError


@dataclass(frozen=True)
class ApiLoad:
    url: str
    api_key: str
    conversations: int = 100
    concurrency: int = 100
    turns: int = 3
    source: str = "app"  # a client tool source with no tools
    model: str = "specagent"
    timeout_s: float = 60.0


@dataclass
class ApiResult:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"sessions": [], "responses": []})
    first: dict[str, list[float]] = field(default_factory=lambda: {"sessions": [], "responses": []})
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0


async def compare_apis(cfg: ApiLoad, on_turn: Any = lambda done: None) -> ApiResult:
    """Run ``cfg.conversations`` conversations, ``cfg.concurrency`` at a time, alternating the APIs."""
    result, gate, done = ApiResult(), asyncio.Semaphore(cfg.concurrency), 0
    begun = time.perf_counter()
    async with GatewayClient(cfg.url, cfg.api_key, cfg.timeout_s) as client:
        async def one(i: int) -> None:
            nonlocal done
            api = "responses" if i % 2 else "sessions"
            async with gate:
                try:
                    times = await (_responses(client, cfg) if i % 2 else _sessions(client, cfg))
                except (GatewayError, httpx.HTTPError, OSError, ValueError, KeyError) as exc:
                    result.errors.append(f"{api} conversation {i}: {type(exc).__name__}: {exc}"[:300])
                    return
            result.latencies[api] += times
            result.first[api].append(times[0])
            done += len(times)
            on_turn(done)

        await asyncio.gather(*(one(i) for i in range(cfg.conversations)))
    result.wall_s = time.perf_counter() - begun
    return result


async def _sessions(client: GatewayClient, cfg: ApiLoad) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()
    created = await client.create(tool_source=cfg.source, message="say turn 0", user="client", method=cfg.model)
    events = client.events(created["session_id"])
    try:
        for turn in range(cfg.turns):
            if turn:
                start = time.perf_counter()
                await client.post_message(created["session_id"], f"say turn {turn}")
            await _next_message(events, f"turn {turn}")
            times.append(time.perf_counter() - start)
    finally:
        await events.aclose()
        await client.cancel(created["session_id"])
    return times


async def _next_message(events: AsyncIterator[dict[str, Any]], text: str) -> None:
    async for event in events:
        if event["t"] == "agent_message":
            if event["text"] != text:
                raise ValueError(f"expected the agent to say {text!r}, it said {event['text']!r}")
            return
        if event["t"] == "final":
            raise ValueError(f"the session ended: {event.get('error') or event.get('status')}")
    raise ValueError("the event stream ended")


async def _responses(client: GatewayClient, cfg: ApiLoad) -> list[float]:
    times: list[float] = []
    previous: str | None = None
    try:
        for turn in range(cfg.turns):
            body = {"model": cfg.model, "input": f"say turn {turn}",
                    **({"previous_response_id": previous} if previous else {})}
            start = time.perf_counter()
            r = await client.http.post("/v1/responses", json=body)
            times.append(time.perf_counter() - start)
            if r.status_code != 200:
                raise GatewayError(r.status_code, r.text[:200])
            out = r.json()
            text = "".join(c["text"] for item in out["output"] if item["type"] == "message" for c in item["content"])
            if out["status"] != "completed" or text != f"turn {turn}":
                raise ValueError(f"turn {turn}: {out['status']}, {text!r}")
            previous = out["id"]
    finally:
        if previous:
            await client.http.delete(f"/v1/responses/{previous}")
    return times


def summary(cfg: ApiLoad, result: ApiResult) -> dict[str, Any]:
    """Percentiles per API and the Responses API's overhead over the sessions API (milliseconds)."""
    def stats(xs: list[float]) -> dict[str, Any]:
        if not xs:
            return {"turns": 0}
        q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else [xs[0]] * 99
        return {"turns": len(xs), "p50_ms": 1000 * q[49], "p95_ms": 1000 * q[94],
                "mean_ms": 1000 * statistics.fmean(xs)}

    apis = {api: stats(xs) for api, xs in result.latencies.items()}
    first = {api: stats(xs) for api, xs in result.first.items()}
    both = all(a["turns"] for a in apis.values())
    over = ({f"{p}_ms": apis["responses"][f"{p}_ms"] - apis["sessions"][f"{p}_ms"] for p in ("p50", "p95")}
            if both else {})
    return {"label": "MEASURED on this machine; engines SCRIPTED (plan-following, no model)",
            "conversations": cfg.conversations, "concurrency": cfg.concurrency, "turns_each": cfg.turns,
            "wall_s": result.wall_s, "apis": apis, "first_turn": first, "responses_overhead": over,
            "goal": "p50 overhead within +2 ms", "errors": result.errors}


def write(s: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "responses-overhead.json"
    path.write_text(json.dumps(s, indent=2))
    return path
