"""Running profiles on a local Ray cluster and driving sessions through their gateways over HTTP.

Used by ``specagent-ray serve`` (the README's main job), ``bench batching``, ``bench scale``, the load test
and the end-to-end tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from ..ports import free_port
from .client import GatewayClient
from .deployment_profiles import deploy, load_profile, run_profile
from .startup import local_serve_env, ray_init, start_serve
from .watch import AppWatch

LOCAL_MODELS = {"tiny-weak": 0, "tiny-strong": 1}  # folder name -> seed of the random weights
# What the infrastructure says when it fails (the session log, its lease, the tool host, the store, Ray):
# a tool's observation that carries one of these is the product failing, never the tool's answer.
INFRA_ERRORS = ("ServiceUnavailable", "Unavailable", "not acknowledged", "session log", "fenced", "tool host",
                "StoreError", "chaos:", "ConnectionError", "CancelledError", "ActorDiedError", "RayActorError",
                "Traceback", "write outcome unknown", "write not run")
CHATTY = ("httpx", "LiteLLM", "openai")  # client libraries that log every request at INFO


def ensure_local_models(root: Path = Path(".specagent/models")) -> None:
    """Build the local-cpu profile's two tiny random-weight models if they are missing (a few s each)."""
    from ..models.tiny import build_tiny_model

    for name, seed in LOCAL_MODELS.items():
        build_tiny_model(root / name, seed=seed)


@contextmanager
def output_to(log_path: Path) -> Iterator[IO[str]]:
    """Send everything this process writes to its stdout and stderr file descriptors to ``log_path``
    (truncated first) until the block ends, and yield a line-buffered stream on the original stdout for
    the caller's own output.

    Works below Python: Ray's and Serve's loggers, vLLM's and transformers' progress bars, Ray's C++
    core worker and the error lines Ray relays to the driver (``(raylet) ...``) all land in the file; so
    does the stdout/stderr of any child process started meanwhile. Both descriptors are restored on exit,
    an exception's included, before the exception goes on."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    screen = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        yield screen
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)
        screen.close()


@contextmanager
def local_ray(num_cpus: int = 8, address: str | None = None) -> Iterator[None]:
    """A fresh local Ray instance (``num_cpus`` logical CPUs; Serve's proxy checks made patient for a busy
    machine, and no load-balancer drain at shutdown: ``startup.local_serve_env``), or with ``address`` a
    connection to that running cluster, as it is. Worker output stays in Ray's own log files
    (``log_to_driver=False``). ``StartupFailed``, one line, if Ray cannot start. On exit Serve's applications
    stop, and so does a Ray instance started here."""
    import ray
    from ray import serve

    if address is None:
        with local_serve_env():  # the raylet and every Ray process it starts inherit it
            ray_init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray_init(address=address, log_to_driver=False, logging_level="WARNING")
    for chatty in CHATTY:
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


@dataclass(frozen=True)
class App:
    """One application of a validated profile, deployed under ``name`` at ``route_prefix``."""

    name: str
    route_prefix: str
    spec: Any  # the profile's application schema (import_path, args)


def apps_of(schema: Any, rename: str | None = None) -> list[App]:
    """A profile's applications; with ``rename``, SpecAgent's application is deployed under that name at
    ``/<rename>`` (so that two profiles can share one Serve instance)."""
    out = []
    for a in schema.applications:
        ours = a.import_path.endswith(":build_app")
        name, route = (rename, f"/{rename}") if rename and ours else (a.name, a.route_prefix)
        out.append(App(name, route, a))
    return out


def start_apps(apps: Sequence[App], port: int, host: str = "127.0.0.1",
               say: Callable[[str], None] = lambda line: None) -> str:
    """Start Serve's HTTP proxy on ``port`` (waiting while it comes up: ``startup.start_serve``, each wait
    one line through ``say``) and deploy ``apps`` without waiting for them (model engines load for a
    minute or two); returns the proxy's base URL. :func:`wait_ready` says when an app answers."""
    start_serve({"host": host, "port": port}, say)
    say(f"deploying {', '.join(a.name for a in apps)}...")
    deploy((a.name, a.route_prefix, a.spec) for a in apps)
    return f"http://{host}:{port}"


def wait_ready(base: str, apps: Sequence[App], timeout_s: float = 900.0, watch: AppWatch | None = None,
               say: Callable[[str], None] = lambda line: None) -> None:
    """Return once every SpecAgent gateway among ``apps`` answers ``/healthz`` and every model engine
    answers a one-token chat (each wait one line through ``say``); TimeoutError naming the URL otherwise,
    and ``AppFailed`` as soon as a deployment of theirs cannot start (``watch``, by default one over ``apps``)."""
    from .engines import wait_until_serving

    watch = watch or AppWatch([a.name for a in apps])
    for a in apps:
        prefix = a.route_prefix.rstrip("/")
        if a.spec.import_path.endswith(":build_app"):
            say(f"waiting for {a.name}'s gateway and coordinators at {base}{prefix}...")
            wait_for_http(f"{base}{prefix}/healthz", timeout_s, watch.check)
            AppWatch([a.name], watch.status).wait_running(timeout_s)  # its coordinators run, not only the gateway
        models = [c["model_loading_config"]["model_id"] for c in (a.spec.args or {}).get("llm_configs", [])]
        if models:
            wait_until_serving(f"{base}{prefix}/v1", models, timeout_s, watch.check)


@contextmanager
def local_cluster(profile: str, port: int | None = None, args: dict[str, Any] | None = None, num_cpus: int = 8,
                  timeout_s: float = 900.0, address: str | None = None,
                  say: Callable[[str], None] = lambda line: None) -> Iterator[str]:
    """Deploy a profile on a fresh local Ray instance, or with ``address`` on that running cluster
    (several nodes on one host, as ``cluster/local_multinode.py`` starts: one HTTP proxy, on the head);
    yields the gateway's base URL once it answers and, for model engines, once every engine answers a
    one-token chat. The applications stop on exit, and so does a Ray instance started here. Without a
    ``port``, a free one is taken once Ray's own processes have bound theirs: one chosen before Ray starts
    can be taken by them, and Serve's proxy then fails to bind it."""
    load_profile(profile, args)  # a bad profile or args fail here, before Ray starts
    with local_ray(num_cpus, address):
        port = port or free_port()
        schema = load_profile(profile, args, port=port)
        url = run_profile(schema, port=port, proxy_location=None if address is None else "HeadOnly", say=say)
        wait_ready(url, apps_of(schema), timeout_s, say=say)
        yield url


def wait_for_http(url: str, timeout_s: float, check: Callable[[], None] = lambda: None) -> None:
    """Return once ``url`` answers 200; TimeoutError naming it otherwise. ``check()`` runs before each
    try, and what it raises ends the wait."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        check()
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f}s")


@dataclass(frozen=True)
class SessionResult:
    """One session as the gateway reported it: tokens and calls are the engines' (or, for simulated
    engines, the token model's); ``hbm_bytes`` is the resource report's ESTIMATE for both models on the
    profile's ``hardware``; ``wall_s`` is measured by the client, creation to graded trajectory."""

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
    hbm_bytes: float = 0.0  # estimated HBM reads of both models (the resource report's hbm_bytes)
    strong_hbm_bytes: float | None = None  # the strong model's share, where the report splits HBM by role
    grade_error: str | None = None  # why a done session has no reward (tau2's evaluator refused its record)
    error_observations: int = 0  # observations that carry an infrastructure error (INFRA_ERRORS)


def observation_texts(record: dict[str, Any]) -> Iterator[str]:
    """Every text a step, a commit or a tool result record gives the agent as an observation: the
    observation's content, its parallel parts' and the user's tool calls'."""
    found = [s.get("observation") for s in record.get("steps") or []] + [record.get("observation")]
    while found:
        obs = found.pop()
        if isinstance(obs, dict):
            yield str(obs.get("content", ""))
            found += obs.get("parts") or []
            yield from (str(u.get("content", "")) for u in obs.get("user_calls") or [])


def infrastructure_errors(records: Sequence[dict[str, Any]]) -> list[str]:
    """The observations in ``records`` (steps, commits or tool results) that carry an infrastructure error."""
    return [t for r in records for t in observation_texts(r) if any(word in t for word in INFRA_ERRORS)]


STALL_S = 300.0  # a session with no new event for this long has stopped making progress


async def run_sessions(url: str, api_key: str, bodies: list[dict[str, Any]], concurrency: int,
                       on_done: Callable[[SessionResult], None] = lambda r: None,
                       grade: bool = True, guard: Callable[[], Awaitable[None]] | None = None,
                       stall_s: float = STALL_S) -> list[SessionResult]:
    """Run every session body through the gateway, at most ``concurrency`` at a time; each one's events
    are followed over SSE to ``final``, then its graded trajectory is fetched. A session whose stream does
    not run from ``created`` to ``final``, or whose streamed commits differ from its trajectory's steps,
    is reported with status ``stream-mismatch`` (and the difference in ``error``); one with no new event
    for ``stall_s`` seconds, with status ``stalled`` and the last event it saw. What ``guard()`` raises
    (``AppWatch.guard``: a deployment failed) stops every session and goes on to the caller."""
    gate = asyncio.Semaphore(concurrency)
    async with GatewayClient(url, api_key, timeout_s=900, max_connections=concurrency * 2 + 10) as client:
        async def one(body: dict[str, Any]) -> SessionResult:
            async with gate:
                start = time.perf_counter()
                deadline = time.monotonic() + 600  # patience with 429s
                sid = (await client.create_when_admitted(body, lambda: time.monotonic() < deadline))["session_id"]
                events: list[dict[str, Any]] = []
                try:
                    await _follow(client.events(sid), events, stall_s)
                except asyncio.TimeoutError:
                    return _stalled(body, events, stall_s, on_done)
                traj = await client.trajectory(sid, grade=grade)
                strong, weak = traj["usage"]["strong"], traj["usage"]["weak"]
                mismatch = _stream_mismatch(events, traj)
                status = "stream-mismatch" if mismatch else traj["status"]
                result = SessionResult(traj["method"], traj["task_id"], status, traj["termination"],
                                       mismatch or traj["error"], traj["reward"],
                                       traj["committed_steps"], len(events),
                                       strong["calls"] - strong.get("prefill_calls", 0),  # decoding calls
                                       strong["decode_tokens"], strong["prompt_tokens"],
                                       weak["decode_tokens"], time.perf_counter() - start,
                                       strong["wall_s"] + weak["wall_s"],
                                       *_hbm(traj.get("resources") or {}), traj.get("grade_error"),
                                       len(infrastructure_errors([{"steps": traj["steps"]}])))
                on_done(result)
                return result

        return await _guarded(asyncio.gather(*(one(b) for b in bodies)), guard)


async def _follow(stream: AsyncIterator[dict[str, Any]], into: list[dict[str, Any]], stall_s: float) -> None:
    """Append ``stream``'s events to ``into`` until it ends; TimeoutError once the next one takes over
    ``stall_s``."""
    events = aiter(stream)
    try:
        while True:
            try:
                async with asyncio.timeout(stall_s):
                    into.append(await anext(events))
            except StopAsyncIteration:
                return
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def _guarded(work: Awaitable[list[SessionResult]], guard: Callable[[], Awaitable[None]] | None
                   ) -> list[SessionResult]:
    if guard is None:
        return list(await work)
    work, watching = asyncio.ensure_future(work), asyncio.ensure_future(guard())
    try:
        await asyncio.wait({work, watching}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            watching.result()  # raises what the guard found
        return list(work.result())
    finally:
        for task in (work, watching):
            task.cancel()
        await asyncio.gather(work, watching, return_exceptions=True)  # wound down, their errors retrieved


def _stalled(body: dict[str, Any], events: list[dict[str, Any]], stall_s: float,
             on_done: Callable[[SessionResult], None]) -> SessionResult:
    last = events[-1].get("t") if events else "none"
    result = SessionResult(body.get("method") or "", str(body.get("task_id")), "stalled", None,
                           f"no progress for {stall_s:g} s (no new event; the last was {last!r}, "
                           f"{len(events)} in all): see the server log", None, 0, len(events), 0, 0, 0, 0, stall_s)
    on_done(result)
    return result


def _stream_mismatch(events: list[dict[str, Any]], traj: dict[str, Any]) -> str | None:
    """What is wrong with a session's event stream against its trajectory, or None."""
    kinds = [e.get("t") for e in events]
    if not kinds or kinds[0] != "created" or kinds[-1] != "final":
        return f"the event stream ran {kinds[:1]}...{kinds[-1:]}, not created...final"
    streamed = [step for e in events if e.get("t") == "commit" for step in e["steps"]]
    if streamed != traj["steps"]:
        return f"{len(streamed)} steps streamed in commits, {len(traj['steps'])} in the trajectory (or they differ)"
    return None


def _hbm(report: dict[str, Any]) -> tuple[float, float | None]:
    """Both models' estimated HBM bytes, and the strong model's where the report has it by role."""
    by_role = report.get("hbm_bytes_by_role") or {}
    strong = by_role.get("strong", 0.0) if by_role else None
    return float(report.get("hbm_bytes") or 0.0), None if strong is None else float(strong)


def summarize(results: list[SessionResult]) -> dict[str, dict[str, float]]:
    """Per method, in order of first appearance: sessions, sessions done, sessions graded, Pass@1 in %
    over the graded ones (NaN if none was), and per-session means of the token, call, HBM and wall
    figures (``strong_hbm_tb`` is NaN unless every session's report split HBM by role)."""
    by: dict[str, list[SessionResult]] = {}
    for r in results:
        by.setdefault(r.method, []).append(r)
    out = {}
    for method, rs in by.items():
        n = len(rs)
        graded = [r.reward for r in rs if r.reward is not None]
        strong_hbm = [r.strong_hbm_bytes for r in rs if r.strong_hbm_bytes is not None]
        out[method] = {"sessions": n, "done": sum(r.status == "done" for r in rs), "graded": len(graded),
                       "pass_at_1": 100 * sum(graded) / len(graded) if graded else float("nan"),
                       "steps": sum(r.steps for r in rs) / n, "strong_calls": sum(r.strong_calls for r in rs) / n,
                       "strong_decode": sum(r.strong_decode for r in rs) / n,
                       "strong_prompt": sum(r.strong_prompt for r in rs) / n,
                       "weak_decode": sum(r.weak_decode for r in rs) / n, "wall_s": sum(r.wall_s for r in rs) / n,
                       "hbm_tb": sum(r.hbm_bytes for r in rs) / n / 1e12,
                       "strong_hbm_tb": sum(strong_hbm) / n / 1e12 if len(strong_hbm) == n else float("nan")}
    return out
