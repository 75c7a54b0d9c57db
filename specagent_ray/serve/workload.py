"""Running a profile on a local Ray cluster and driving sessions through its gateway over HTTP.

Used by ``specagent-ray serve`` (the README's main job), ``bench batching`` and the end-to-end tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .client import GatewayClient
from .profiles import load_profile, run_profile

LOCAL_MODELS = {"tiny-weak": 0, "tiny-strong": 1}  # folder name -> seed of the random weights


def ensure_local_models(root: Path = Path(".specagent/models")) -> None:
    """Build the local-cpu profile's two tiny random-weight models if they are missing (~20 s each)."""
    from ..models.tiny import build_tiny_model

    for name, seed in LOCAL_MODELS.items():
        build_tiny_model(root / name, seed=seed)


@contextmanager
def local_cluster(profile: str, port: int, args: dict[str, Any] | None = None, num_cpus: int = 8,
                  timeout_s: float = 900.0, address: str | None = None) -> Iterator[str]:
    """Deploy a profile on a fresh local Ray instance, or with ``address`` on that running cluster
    (several nodes on one host, as ``cluster/local_multinode.py`` starts: one HTTP proxy, on the head);
    yields the gateway's base URL once it answers and, for model engines, once every engine answers a
    one-token chat. The applications stop on exit, and so does a Ray instance started here."""
    import logging

    import ray
    from ray import serve

    schema = load_profile(profile, args, port=port)
    if address is None:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    for chatty in ("httpx", "LiteLLM", "openai"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        url = run_profile(schema, port=port, proxy_location=None if address is None else "HeadOnly")
        wait_for_http(f"{url}/healthz", timeout_s)
        for app in schema.applications:
            for cfg in (app.args or {}).get("llm_configs", []):
                from .engines import wait_until_serving

                wait_until_serving(f"{url}{app.route_prefix}/v1", [cfg["model_loading_config"]["model_id"]], timeout_s)
        yield url
    finally:
        serve.shutdown()
        ray.shutdown()


def wait_for_http(url: str, timeout_s: float) -> None:
    """Return once ``url`` answers 200; TimeoutError naming it otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f}s")


@dataclass(frozen=True)
class SessionResult:
    method: str
    task_id: str
    status: str
    termination: str | None
    error: str | None
    reward: float | None
    steps: int
    events: int
    strong_calls: int
    strong_decode: int
    strong_prompt: int
    weak_decode: int
    wall_s: float
    engine_s: float = 0.0  # the session's time in engine calls (batch waits included), from its ledger


async def run_sessions(url: str, api_key: str, bodies: list[dict[str, Any]], concurrency: int,
                       on_done: Callable[[SessionResult], None] = lambda r: None,
                       grade: bool = True) -> list[SessionResult]:
    """Run every session body through the gateway, at most ``concurrency`` at a time; each one's events
    are followed over SSE to ``final``, then its graded trajectory is fetched."""
    gate = asyncio.Semaphore(concurrency)
    async with GatewayClient(url, api_key, timeout_s=900, max_connections=concurrency * 2 + 10) as client:
        async def one(body: dict[str, Any]) -> SessionResult:
            async with gate:
                start = time.perf_counter()
                deadline = time.monotonic() + 600  # patience with 429s
                sid = (await client.create_when_admitted(body, lambda: time.monotonic() < deadline))["session_id"]
                events = [e async for e in client.events(sid)]
                traj = await client.trajectory(sid, grade=grade)
                strong, weak = traj["usage"]["strong"], traj["usage"]["weak"]
                result = SessionResult(traj["method"], traj["task_id"], traj["status"], traj["termination"],
                                       traj["error"], traj["reward"], traj["committed_steps"], len(events),
                                       strong["calls"], strong["decode_tokens"], strong["prompt_tokens"],
                                       weak["decode_tokens"], time.perf_counter() - start,
                                       strong["wall_s"] + weak["wall_s"])
                on_done(result)
                return result

        return list(await asyncio.gather(*(one(b) for b in bodies)))


def summarize(results: list[SessionResult]) -> dict[str, dict[str, float]]:
    by: dict[str, list[SessionResult]] = {}
    for r in results:
        by.setdefault(r.method, []).append(r)
    out = {}
    for method, rs in by.items():
        n = len(rs)
        graded = [r.reward for r in rs if r.reward is not None]
        out[method] = {"sessions": n, "done": sum(r.status == "done" for r in rs),
                       "pass_at_1": 100 * sum(graded) / len(graded) if graded else float("nan"),
                       "steps": sum(r.steps for r in rs) / n, "strong_calls": sum(r.strong_calls for r in rs) / n,
                       "strong_decode": sum(r.strong_decode for r in rs) / n,
                       "strong_prompt": sum(r.strong_prompt for r in rs) / n,
                       "weak_decode": sum(r.weak_decode for r in rs) / n, "wall_s": sum(r.wall_s for r in rs) / n}
    return out
