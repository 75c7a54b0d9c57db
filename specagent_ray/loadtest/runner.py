"""The load generator: sessions driven through the gateway over HTTP (httpx, SSE via httpx-sse).

Two modes. **Closed loop**: ``concurrency`` workers each run one session after another, so that many
sessions are always in flight; with ``stages`` (ascending levels) the run is cut into equal stages and
each stage adds workers up to its level, which gives latency at several loads in one run. **Open loop**: sessions arrive at ``rate`` per second (Poisson, seeded),
whatever the server's pace; an arrival finding ``concurrency`` sessions already in flight is shed (counted,
not sent).

Every run is bounded. No session starts after ``duration_s`` or once ``sessions`` have started; sessions
still in flight then get ``drain_s`` to finish and are cancelled (on the server too) after that. Errors
are counted by kind; at ``max_errors`` the run stops early. A server that cannot be reached or refuses
the API key stops the run before it starts (``LoadAborted``), with a one-line reason.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import httpx

from ..serve.client import GatewayClient, GatewayError
from .records import BURST_S, SessionRecord, step_latencies
from .workload import Workload

Mode = Literal["closed", "open"]
class LoadAborted(Exception):
    """The run could not start (unreachable URL, wrong API key, not a gateway)."""


@dataclass(frozen=True)
class LoadConfig:
    url: str
    api_key: str
    workload: Workload
    mode: Mode = "closed"
    concurrency: int = 100  # closed: sessions kept in flight; open: most in flight before shedding
    rate: float = 10.0  # open: arrivals per second
    sessions: int = 1000  # most sessions started
    duration_s: float = 60.0  # no session starts after this
    drain_s: float = 60.0  # then in-flight sessions get this long before they are cancelled
    ramp_s: float = 0.0  # closed: workers start spread over this
    max_errors: int = 20  # stop early at this many errors
    baseline_sessions: int = 20  # Strong-only sessions on the same (task, trial)s, for the token savings
    baseline_method: str = "strong"
    request_timeout_s: float = 60.0
    seed: int = 0
    stages: tuple[int, ...] = ()  # closed loop: ascending concurrency levels, equal shares of duration_s
    index_offset: int = 0  # session i of this run is workload session offset + stride * i (one client
    index_stride: int = 1  # process of several takes every stride-th session, see processes.py)

    def __post_init__(self) -> None:
        if self.stages:
            if self.mode != "closed" or list(self.stages) != sorted(set(self.stages)) or self.stages[0] < 1:
                raise ValueError(f"stages must be ascending concurrency levels >= 1 of a closed-loop run, "
                                 f"got {', '.join(map(str, self.stages))}")
            object.__setattr__(self, "concurrency", self.stages[-1])
        for name in ("concurrency", "sessions", "max_errors"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("duration_s", "request_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.mode == "open" and not self.rate > 0:
            raise ValueError(f"open-loop runs need a rate > 0 sessions/s, got {self.rate}")
        if self.drain_s < 0 or self.ramp_s < 0 or self.baseline_sessions < 0:
            raise ValueError("drain_s, ramp_s and baseline_sessions must be >= 0")


@dataclass
class LoadResult:
    config: LoadConfig
    records: list[SessionRecord]
    wall_s: float  # the load phase, from the first start to the last end
    stopped_because: str
    shed: int
    timeline: list[dict[str, float]]  # one sample a second: t, in_flight, steps, done
    stats_before: dict[str, Any]
    stats_after: dict[str, Any] | None
    levels: list[tuple[float, float, int]] = field(default_factory=list)  # closed loop: (from s, to s, level)
    started_at: float = 0.0  # wall clock (time.time()) at the run's time 0
    client_cpu_s: float | None = None  # the load client's own CPU time (all its processes)
    locust: Any = None  # Locust's statistics of the load phase (locust_run.LocustStats)

    def load(self) -> list[SessionRecord]:
        return [r for r in self.records if r.phase == "load"]

    def baseline(self) -> list[SessionRecord]:
        return [r for r in self.records if r.phase == "baseline"]


class LoadRun:
    """One bounded run against one gateway. ``on_tick`` gets a progress snapshot once a second."""

    def __init__(self, cfg: LoadConfig, on_tick: Callable[[dict[str, Any]], None] = lambda snap: None,
                 clock: Callable[[], float] = time.monotonic):
        self.cfg, self.on_tick, self.clock = cfg, on_tick, clock
        self.records: list[SessionRecord] = []
        self.errors: Counter[str] = Counter()
        self.inflight: dict[int, asyncio.Task] = {}
        self.started = self.shed = self.steps = self.done = 0
        self.timeline: list[dict[str, float]] = []
        self.stopped_because = ""
        self._t0 = 0.0
        self._stop_starting = asyncio.Event()
        self._abort = asyncio.Event()

    def now(self) -> float:
        return self.clock() - self._t0

    # -- the run ------------------------------------------------------------------------------------

    async def run(self) -> LoadResult:
        cfg = self.cfg
        async with GatewayClient(cfg.url, cfg.api_key, timeout_s=cfg.request_timeout_s,
                                 max_connections=2 * cfg.concurrency + 20) as client:
            before = await self._preflight(client)
            self._t0, started_at, cpu = self.clock(), time.time(), time.process_time()
            sampler = asyncio.create_task(self._sample())
            try:
                await self._phase(client)
            finally:
                sampler.cancel()
            wall = max((r.end_s or 0.0 for r in self.records), default=self.now())
            cpu = time.process_time() - cpu  # the load phase's, not the baseline's
            after = await self._stats_or_none(client)
            if cfg.baseline_sessions and not self._abort.is_set():
                await self._baseline(client)
        levels = self.levels() if cfg.mode == "closed" else []
        return LoadResult(cfg, self.records, wall, self.stopped_because, self.shed, self.timeline, before, after,
                          levels, started_at, cpu)

    async def _preflight(self, client: GatewayClient) -> dict[str, Any]:
        url = self.cfg.url
        try:
            health = await client.http.get("/healthz", timeout=10)
        except httpx.ConnectError as exc:
            raise LoadAborted(f"cannot reach {url}: {exc or 'connection refused'}") from None
        except httpx.TimeoutException:
            raise LoadAborted(f"{url} did not answer /healthz within 10 s") from None
        except httpx.HTTPError as exc:
            raise LoadAborted(f"cannot talk to {url}: {type(exc).__name__}: {exc}") from None
        if health.status_code != 200:
            raise LoadAborted(f"{url}/healthz answered HTTP {health.status_code}; is this a specagent-ray gateway?")
        try:
            return await client.stats()
        except GatewayError as exc:
            if exc.status == 401:
                raise LoadAborted(f"the gateway at {url} refused the API key (HTTP 401): {exc.detail}") from None
            if exc.status == 403:  # a tenant's key, not an operator's: the run goes on without the server's stats
                return {}
            raise LoadAborted(f"{url}/v1/stats answered HTTP {exc.status}: {exc.detail}") from None
        except httpx.HTTPError as exc:
            raise LoadAborted(f"{url}/v1/stats failed: {type(exc).__name__}: {exc}") from None

    async def _phase(self, client: GatewayClient) -> None:
        cfg = self.cfg
        if cfg.mode == "closed":
            producers = [asyncio.create_task(self._worker(client, w)) for w in range(cfg.concurrency)]
        else:
            producers = [asyncio.create_task(self._arrivals(client))]
        everyone = asyncio.gather(*producers, return_exceptions=True)
        stop = asyncio.create_task(self._stop_starting.wait())
        await asyncio.wait([everyone, stop], timeout=cfg.duration_s, return_when=asyncio.FIRST_COMPLETED)
        if not self._stop_starting.is_set():
            self.stopped_because = self.stopped_because or (
                "all sessions started and finished" if everyone.done() else f"duration {cfg.duration_s:g} s reached")
            self._stop_starting.set()
        stop.cancel()
        pending = set(self.inflight.values())
        if pending and not self._abort.is_set():
            abort = asyncio.create_task(self._abort.wait())
            deadline = self.clock() + cfg.drain_s
            while pending and not abort.done() and self.clock() < deadline:
                await asyncio.wait(pending | {abort}, timeout=deadline - self.clock(),
                                   return_when=asyncio.FIRST_COMPLETED)
                pending = {t for t in self.inflight.values() if not t.done()}
            abort.cancel()
        await self._cancel_inflight(client)
        for p in producers:
            p.cancel()
        await asyncio.gather(everyone, return_exceptions=True)

    def levels(self) -> list[tuple[float, float, int]]:
        """The closed loop's stages: (from s, to s, concurrency); one stage without ``stages``."""
        cfg = self.cfg
        stages = cfg.stages or (cfg.concurrency,)
        share = cfg.duration_s / len(stages)
        return [(i * share, (i + 1) * share, c) for i, c in enumerate(stages)]

    def _start_delay(self, w: int) -> float:
        """When worker ``w`` joins: in the first stage whose level exceeds ``w``, spread over ``ramp_s``."""
        below = 0
        for begin, _, level in self.levels():
            if w < level:
                return begin + self.cfg.ramp_s * (w - below) / (level - below)
            below = level
        raise AssertionError("worker beyond the last stage")

    async def _worker(self, client: GatewayClient, w: int) -> None:
        await self._sleep_unless_stopped(self._start_delay(w))
        while not self._stop_starting.is_set():
            i = self._claim()
            if i is None:
                return
            task = self._spawn(client, i, "load", self.cfg.workload.method)
            try:
                rec = await task
            except asyncio.CancelledError:
                return
            if rec.outcome == "error":
                await self._sleep_unless_stopped(0.25)  # a failing server is not hammered in a tight loop

    async def _arrivals(self, client: GatewayClient) -> None:
        rng = random.Random(self.cfg.seed)
        due = 0.0
        while not self._stop_starting.is_set():
            await self._sleep_unless_stopped(due - self.now())
            if self._stop_starting.is_set():
                return
            i = self._claim()
            if i is None:
                return
            if len(self.inflight) >= self.cfg.concurrency:
                self.shed += 1
            else:
                self._spawn(client, i, "load", self.cfg.workload.method)
            due += rng.expovariate(self.cfg.rate)

    def _claim(self) -> int | None:
        if self.started >= self.cfg.sessions:
            if not self._stop_starting.is_set():
                self.stopped_because = f"{self.cfg.sessions} sessions started"
            return None
        self.started += 1
        return self.cfg.index_offset + self.cfg.index_stride * (self.started - 1)

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        if seconds > 0:
            try:
                await asyncio.wait_for(self._stop_starting.wait(), seconds)
            except TimeoutError:
                pass

    def _spawn(self, client: GatewayClient, i: int, phase: str, method: str) -> asyncio.Task:
        body = self.cfg.workload.body(i, method)
        rec = SessionRecord(i, phase, method, body["tool_source"], body["task_id"], body["trial"], self.now())
        self.records.append(rec)
        task = asyncio.create_task(self._session(client, body, rec))
        key = len(self.records)
        self.inflight[key] = task
        task.add_done_callback(lambda _: self.inflight.pop(key, None))
        return task

    # -- one session --------------------------------------------------------------------------------

    async def _session(self, client: GatewayClient, body: dict[str, Any], rec: SessionRecord) -> SessionRecord:
        try:
            # 429s are waited out as Retry-After says, while the run still starts sessions
            created = await client.create_when_admitted(body, lambda: not self._stop_starting.is_set(),
                                                        on_throttled=lambda: setattr(rec, "throttled", rec.throttled + 1))
            rec.session_id = created["session_id"]
            async for event in client.events(rec.session_id):
                if event["t"] == "commit":
                    now, n = self.now(), max(1, len(event.get("steps") or ()))
                    if rec.commits and now - rec.commits[-1][0] < BURST_S:  # the same delivery
                        rec.commits[-1] = (rec.commits[-1][0], rec.commits[-1][1] + n)
                    else:
                        rec.commits.append((now, n))
                    if rec.phase == "load":
                        self.steps += n
            traj = await client.trajectory(rec.session_id)
            strong, weak = traj["usage"]["strong"], traj["usage"]["weak"]
            rec.strong_calls, rec.strong_prompt = strong["calls"], strong["prompt_tokens"]
            rec.strong_decode, rec.weak_decode = strong["decode_tokens"], weak["decode_tokens"]
            rec.outcome = traj["status"]
            if rec.outcome != "done":
                self._failed(rec, f"session_{rec.outcome}", traj.get("error") or traj.get("termination") or "")
            elif rec.phase == "load":
                self.done += 1
        except asyncio.CancelledError:
            rec.outcome = "aborted" if self._abort.is_set() else "unfinished"
            raise
        except GatewayError as exc:
            self._failed(rec, f"http_{exc.status}", exc.detail)
        except httpx.ConnectError as exc:
            self._failed(rec, "connect", str(exc) or "connection refused")
        except httpx.TimeoutException as exc:
            self._failed(rec, "timeout", f"{type(exc).__name__} after {self.cfg.request_timeout_s:g} s")
        except httpx.HTTPError as exc:
            self._failed(rec, "transport", f"{type(exc).__name__}: {exc}")
        except (KeyError, TypeError, ValueError) as exc:  # a 2xx answer that is not what the API promises
            self._failed(rec, "bad_response", f"{type(exc).__name__}: {exc}")
        finally:
            rec.end_s = self.now()
            rec.step_latencies = step_latencies(rec.start_s, rec.commits)
        return rec

    def _failed(self, rec: SessionRecord, kind: str, detail: str) -> None:
        rec.outcome = "error" if not kind.startswith("session_") else rec.outcome
        rec.error_kind, rec.error = kind, detail[:500]
        if rec.phase != "load":
            return
        self.errors[kind] += 1
        if sum(self.errors.values()) >= self.cfg.max_errors and not self._abort.is_set():
            self.stopped_because = (f"stopped early: {sum(self.errors.values())} errors "
                                    f"(max_errors {self.cfg.max_errors})")
            self._abort.set()
            self._stop_starting.set()

    async def _cancel_inflight(self, client: GatewayClient) -> None:
        open_records = [r for r in self.records if r.end_s is None]
        tasks = [t for t in self.inflight.values() if not t.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ids = [r.session_id for r in open_records if r.session_id]
        if ids:  # best effort, bounded: the server stops work nobody waits for any more
            try:
                await asyncio.wait_for(asyncio.gather(*(client.cancel(s) for s in ids), return_exceptions=True), 10)
            except TimeoutError:
                pass

    # -- the Strong-only baseline -------------------------------------------------------------------

    async def _baseline(self, client: GatewayClient) -> None:
        """The same (task, trial)s as the first completed load sessions, with the baseline method."""
        done = sorted((r for r in self.load() if r.outcome == "done"), key=lambda r: r.index)
        picked = [r.index for r in done[: self.cfg.baseline_sessions]]
        gate = asyncio.Semaphore(min(self.cfg.concurrency, max(1, len(picked))))

        async def one(i: int) -> None:
            async with gate:
                await self._spawn(client, i, "baseline", self.cfg.baseline_method)

        self._stop_starting = asyncio.Event()  # 429s are waited out again in this phase
        runs = asyncio.gather(*(one(i) for i in picked), return_exceptions=True)
        try:
            await asyncio.wait_for(runs, max(self.cfg.drain_s, self.cfg.duration_s))
        except TimeoutError:
            await self._cancel_inflight(client)

    def load(self) -> list[SessionRecord]:
        return [r for r in self.records if r.phase == "load"]

    # -- progress -------------------------------------------------------------------------------------

    async def _sample(self) -> None:
        while True:
            snap = {"t": round(self.now(), 3), "in_flight": len(self.inflight), "started": self.started,
                    "done": self.done, "steps": self.steps, "errors": sum(self.errors.values()), "shed": self.shed}
            self.timeline.append(snap)
            self.on_tick(snap)
            await asyncio.sleep(1.0)

    @staticmethod
    async def _stats_or_none(client: GatewayClient) -> dict[str, Any] | None:
        try:
            return await client.stats()
        except (GatewayError, httpx.HTTPError):
            return None
