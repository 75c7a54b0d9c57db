"""One run of ``bench chaos`` (``chaos.py``): sessions on the served path, in this process, under one fault.

The sim profile's engines, its real coordinator, session log, lease and tau2 tool host (or the scripted
engines and the bank MCP server), the store wrapped by the fault (``chaos_faults.py``); clients that create
and follow the sessions; the one-shot fault struck once a session is mid-way; and the run's row: sessions
done, failed and lost, the verified writes run 0, 1 or 2+ times, infrastructure errors in observations,
and the p99 of a committed step's latency."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...launch.workload import infrastructure_errors
from ...serve.core.api import CreateSession
from ...serve.core.config import AppConfig
from ...serve.core.errors import ApiError
from ...serve.core.handles import Local
from ...serve.log.session_log import SessionLog
from ...serve.sessions.coordinator import Coordinator
from ...serve.sessions.session import FINISHED
from ...serve.toolhost.tool_host import ToolHost
from ...storage.local import LocalStore
from .chaos_faults import (
    TOOL_HOST_DOWN_S,
    ChaosStore,
    Connection,
    ToolHostSwitch,
    ToolLink,
    cpu_hog,
)

FAULTS = ("cpu-hog", "slow-store", "store-errors", "lease-store-down", "coordinator-killed", "tool-host-killed",
          "mcp-server-killed")
BANK = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
BANK_PLAN = ('call get_balance {"account": "alice"}; call transfer {"source": "alice", "target": "bob", '
             '"amount": 1}; call get_balance {"account": "bob"}; stop')


@dataclass
class Run:
    """One fault's run: its coordinators (the current one, None while a successor starts), what the
    clients saw, and each committed step's latency."""

    fault: str
    store: ChaosStore
    tools: ToolHostSwitch
    new_engines: Callable[[], Any]
    cfg: AppConfig
    coordinator: Coordinator | None = None
    outcomes: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    sids: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    last_commit: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    crashed: list[Coordinator] = field(default_factory=list)  # kept: their pending tasks end with the run

    async def start_coordinator(self) -> None:
        link = ToolLink(self.tools)
        c = Coordinator(self.cfg, self.new_engines(), Local(link), Connection(self.store))
        c.tool_link = link  # type: ignore[attr-defined]  # cut with its store connection when it crashes
        append = c._append

        def timed(sid: str, record: Any, data: dict[str, Any]) -> None:  # every record passes here
            now = time.perf_counter()
            if data.get("t") == "commit" and data.get("steps"):
                gap = (now - self.last_commit.get(sid, now)) / len(data["steps"])
                self.latencies.extend([gap] * len(data["steps"]))
            if data.get("t") in ("commit", "created"):
                self.last_commit[sid] = now
            append(sid, record, data)
        c._append = timed  # type: ignore[method-assign]  # sessions take it when made (also on resume)
        await c.start()
        self.coordinator = c

    def crash(self) -> None:
        """Crash the current coordinator as a killed process would: its connections to the store and the tool
        host first (what its stopped tasks still do on their way out reaches neither), then its tasks."""
        c, self.coordinator = self.coordinator, None
        if c is None:
            return
        self.crashed.append(c)
        c.log.store.cut = c.tool_link.cut = True  # type: ignore[attr-defined]  # its Connection and ToolLink
        for task in (c.commits.flusher, c.log._renewer, *(s.runner for s in c.sessions.values())):
            if task is not None:
                task.cancel()


@dataclass
class Row:
    fault: str
    sessions: int
    done: int
    failed: int
    lost: int
    graded: str
    writes: tuple[int, int, int]
    unlogged: int
    error_obs: int
    steps: int
    p99_s: float
    max_s: float
    ratio: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Settings:
    """One bench run's knobs (``add_parser`` says what each means)."""

    faults: tuple[str, ...] = FAULTS
    sessions: int = 12
    tasks: tuple[str, ...] = ()  # airline task ids, cycled; () = the first ones of tau2's base split
    lease_s: float = 4.0
    spread_s: float = 6.0
    bound_s: float = 60.0
    seed: int = 0

    def airline_tasks(self) -> list[str]:
        from ...tasks import benchmark

        ids = list(self.tasks) or benchmark("airline").task_ids()
        return [ids[i % len(ids)] for i in range(self.sessions)]


def sim_config(lease_s: float, bank_journal: Path | None = None) -> AppConfig:
    """The sim profile's application args (its engines, latencies, coordinator) on one shard, with the
    airline tool source, or the scripted engines and the bank MCP server for the MCP runs."""
    import yaml

    from ...launch.deployment_profiles import profile_path

    args = yaml.safe_load(profile_path("sim").read_text())["applications"][0]["args"]
    args = {**args, "coordinators": 1, "tool_hosts": 1, "tool_sources": {"airline": args["tool_sources"]["airline"]}}
    args.pop("session_log", None)
    args["coordinator"] = {**args["coordinator"], "lease_s": lease_s, "lease_skew_s": min(0.5, lease_s / 4)}
    if bank_journal is not None:
        args["engines"] = {"kind": "scripted"}
        args["tool_sources"] = {"bank": {"kind": "mcp", "trusted": True,
                                         "command": [*BANK, "--journal", str(bank_journal)]}}
    return AppConfig.model_validate(args)


def engines_for(cfg: AppConfig) -> Callable[[], Any]:
    from ...serve.engines.engine_client import SimEngineClient
    from ...serve.engines.sim_engine import SimEngine

    if cfg.engines.kind == "scripted":
        from ...models.scripted_plan import PlanEngineClient
        from ...serve.engines.priority import ProgramPriority

        return lambda: PlanEngineClient(ProgramPriority())
    drafter, verifier = SimEngine("drafter", cfg.engines), SimEngine("verifier", cfg.engines)
    return lambda: SimEngineClient(Local(drafter), Local(verifier), cfg.engines, cfg.coordinator)


async def client(run: Run, request: CreateSession, arrive_s: float, deadline: float, on_done: Callable) -> None:
    """One client: create when admitted (retrying 429, 503 and a coordinator that is not there), then
    follow the session until it ends or the bound passes."""
    await asyncio.sleep(arrive_s)
    sid = None
    while sid is None and time.monotonic() < deadline:
        c = run.coordinator
        try:
            if c is None:
                raise ConnectionError("no coordinator")
            async with asyncio.timeout(c.cfg.coordinator.ack_timeout_s + 5):  # not wait_for: it can swallow a cancel
                sid = (await c.create(request))["session_id"]
        except (TimeoutError, ApiError, ConnectionError):
            await asyncio.sleep(0.2)
    if sid is None:
        run.outcomes["failed"] += 1
        run.reasons["never admitted within the bound"] += 1
        return on_done()
    run.sids.append(sid)
    while time.monotonic() < deadline:
        s = run.coordinator.sessions.get(sid) if run.coordinator is not None else None
        if s is not None and s.status in FINISHED:
            reason = s.error or (s.termination if s.status != "done" else None)
            if s.status == "done":
                run.outcomes["done"] += 1
            elif reason:
                run.outcomes["failed"] += 1
                run.reasons[reason.split(":")[0]] += 1
            else:
                run.outcomes["lost"] += 1
            return on_done()
        await asyncio.sleep(0.05)
    run.outcomes["lost"] += 1
    on_done()


def running(run: Run) -> int:
    """Sessions of the current coordinator that have committed a step and not ended."""
    c = run.coordinator
    return sum(s.status not in FINISHED and bool(s.steps) for s in c.sessions.values()) if c else 0


async def inject(run: Run, fault: str, at_s: float, patience_s: float, journal: Path | None) -> None:
    """The one-shot faults: ``at_s`` into the run, as soon as a session is mid-way (within ``patience_s``)."""
    await asyncio.sleep(at_s)
    until = time.monotonic() + patience_s
    while not running(run) and time.monotonic() < until:
        await asyncio.sleep(0.005)
    mid = f"{running(run)} session(s) mid-way"
    if fault == "lease-store-down":
        down_s = 1.5 * run.cfg.coordinator.lease_s
        run.store.down_until = time.monotonic() + down_s
        run.notes.append(f"store down {down_s:g} s, {mid}")
    elif fault == "coordinator-killed":
        run.crash()
        started = time.monotonic()
        await run.start_coordinator()
        run.notes.append(f"crashed with {mid}; successor serving after {time.monotonic() - started:.1f} s")
    elif fault == "tool-host-killed":
        lost = len(run.tools.inflight)
        run.tools.kill(TOOL_HOST_DOWN_S)
        run.notes.append(f"killed with {mid}, {lost} call(s) in flight")
    elif fault == "mcp-server-killed" and journal is not None:
        calls = journal.read_text().splitlines() if journal.exists() else []
        if calls:
            os.kill(json.loads(calls[-1])["pid"], signal.SIGKILL)
        run.notes.append(f"server SIGKILLed with {mid}" if calls else "no server to kill yet")


async def one_fault(fault: str, settings: Settings, seed: int, where: Path, advance: Callable[[], None]) -> Row:
    """One run of ``settings.sessions`` sessions under ``fault``, its store in ``where``; its row."""
    mcp = fault.endswith("(mcp)") or fault == "mcp-server-killed"
    journal = where / "bank.jsonl" if mcp else None
    cfg = sim_config(settings.lease_s, journal)
    store = ChaosStore(LocalStore(where / "store"), seed)
    run = Run(fault, store, ToolHostSwitch(lambda: ToolHost(cfg.tool_sources, store)), engines_for(cfg), cfg)
    store.slow, store.error_rate = fault == "slow-store", 0.05 if fault == "store-errors" else 0.0
    requests = [CreateSession(tool_source="bank", message=BANK_PLAN) if mcp else
                CreateSession(tool_source="airline", task_id=t, user="simulated", trial=i)
                for i, t in enumerate(settings.airline_tasks())]
    spread, n = settings.spread_s, len(requests)
    try:
        with cpu_hog(fault == "cpu-hog", settings.bound_s + 30):
            await run.start_coordinator()
            deadline = time.monotonic() + settings.bound_s
            shot = asyncio.ensure_future(inject(run, fault, 0.35 * spread, spread, journal))
            await asyncio.gather(*(client(run, r, spread * i / max(n - 1, 1), deadline, advance)
                                   for i, r in enumerate(requests)))
            await shot
        graded = await grade(run) if not mcp else "n/a"
    finally:
        await stop(run)
    return tally(run, store.inner, graded, journal)


async def stop(run: Run) -> None:
    """End the run: the coordinator crashes (nothing more is stored), MCP servers stop, every task left ends."""
    run.crash()
    for host in run.tools.hosts:
        for box in host._mcp.values():  # stops the MCP server processes this host started
            await box.close()
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


async def grade(run: Run) -> str:
    """``graded/done`` by tau2's evaluator; why a done session was not graded goes to the notes."""
    c = run.coordinator
    if c is None:
        return "n/a"
    done = [sid for sid in run.sids if sid in c.sessions and c.sessions[sid].status == "done"]
    graded, why = 0, Counter()
    for sid in done:
        report = await c.trajectory(sid, grade=True)
        graded += report.get("reward") is not None
        if report.get("reward") is None:
            why[report.get("grade_error") or "no reward"] += 1
    run.notes += [f"{n} not graded: {reason}" for reason, n in why.items()]
    return f"{graded}/{len(done)}"


def logged(store: LocalStore) -> dict[str, list[dict[str, Any]]]:
    """Every session's records in the log: the archive (finished before a snapshot), then the live log."""
    out: dict[str, list[dict[str, Any]]] = {}
    for key in store.list("archive/"):
        for line in store.get(key).splitlines():
            record = json.loads(line)
            out.setdefault(record.pop("sid"), []).append(record)
    for sid, records in SessionLog(store).replay().sessions.items():
        out.setdefault(sid, []).extend(records)  # type: ignore[arg-type]
    return out


def tally(run: Run, store: LocalStore, graded: str, journal: Path | None) -> Row:
    records = logged(store)
    intents = {r["key"] for rs in records.values() for r in rs if r.get("t") == "intent"}
    if journal is not None:  # the MCP server's own count, across its restarts
        lines = journal.read_text().splitlines() if journal.exists() else []
        ran = Counter(c["key"] for c in map(json.loads, lines) if c.get("key"))
    else:
        ran = Counter()
        for host in run.tools.hosts:
            ran.update(host.write_executions)
    counts = Counter(min(ran.get(k, 0), 2) for k in intents)
    bad = [text for rs in records.values() for text in infrastructure_errors(rs)]
    notes = run.notes + [f"{n}x {why}" for why, n in run.reasons.most_common(3)]
    notes += [f"observation: {text[:80]!r}" for text in dict.fromkeys(bad)][:2]
    lat = sorted(run.latencies)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    return Row(run.fault, len(run.sids), run.outcomes["done"], run.outcomes["failed"], run.outcomes["lost"], graded,
               (counts[0], counts[1], counts[2]), len(set(ran) - intents), len(bad), len(lat), p99,
               lat[-1] if lat else float("nan"), notes=notes)
