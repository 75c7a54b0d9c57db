"""The write path under injected faults (marker ``faults``).

A run serves a few simulated airline sessions that write, in process, over a store and a tool host that
fail at their Nth operation (``specagent_ray.testing.faults``): raise, unknown outcome, cancel, delay.
The sweep moves N over every store and tool operation of a clean run. After each run, restarting the
coordinator and the tool host right after the fault (resuming over a new number of tool host
shards), it asserts:
- 0 lost intents: every write a tool ran has its intent in the log;
- 0 duplicate executions of any key;
- 0 writes without an accepting verdict or a strong repair before their intent;
- every acknowledged session finished (done, cancelled, or failed with a reason).
The fast tier moves N over the write path's operations (every second segment and idempotency-record
create, every keyed tool call) with unknown outcomes; the slow tier over every store operation and every
tool call, with every fault.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field

import pytest

from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.config import AppConfig, CoordinatorConfig, LatencyModel, SimEngines
from specagent_ray.serve.core.errors import ServiceUnavailable
from specagent_ray.serve.core.handles import Local
from specagent_ray.serve.engines.engine_client import SimEngineClient
from specagent_ray.serve.engines.sim_engine import SimEngine
from specagent_ray.serve.log.session_log import SessionLog
from specagent_ray.serve.sessions.coordinator import Coordinator
from specagent_ray.serve.sessions.session import FINISHED
from specagent_ray.serve.toolhost.tool_host import ShardedToolHost, ToolHost
from specagent_ray.storage import LocalStore
from specagent_ray.testing.faults import FAULTS, FaultyStore, FaultyToolHost, LeaseWall, Severable

pytestmark = pytest.mark.faults
FAST = LatencyModel(draft_base_s=0.001, draft_per_request_s=0, verify_base_s=0.002, verify_per_request_s=0,
                    step_base_s=0.001)
WRITING_TASKS = ("7", "9", "14")  # airline tasks whose gold actions write (cancel, book, update)
CFG = AppConfig(engines=SimEngines(latency=FAST), coordinator=CoordinatorConfig(lease_s=0.5, lease_skew_s=0.05,
                                                                             ack_timeout_s=1.0),
                tool_sources={"airline": {"kind": "tau2", "domain": "airline"}})


@dataclass
class Outcome:
    executions: dict[str, int]
    records: dict[str, list[dict]]
    sessions: list[str]
    injected: list[str] = field(default_factory=list)
    store_ops: int = 0
    tool_ops: int = 0


def every_store_op(op: str, key: str) -> bool:
    return not key.startswith("lease")  # lease renewals run on a timer: their count is not repeatable


def write_path_store_op(op: str, key: str) -> bool:
    """The store writes the at-most-once promise rests on: segments (intents) and idempotency records."""
    return op == "create" and key.startswith(("log/", "idem/"))


def keyed_call(call, key) -> bool:
    return key is not None


async def serve(tmp_path, store_fault: tuple[int, str] | None = None, tool_fault: tuple[int, str] | None = None,
                store_ops=every_store_op, tool_calls=lambda call, key: True, tasks=WRITING_TASKS) -> Outcome:
    """Serve the sessions; right after the fault (if the sessions are still running) crash the
    coordinator and the tool host, and resume on a new coordinator over two new tool host shards."""
    wall = LeaseWall(CFG.coordinator.lease_s, CFG.coordinator.lease_skew_s)
    base = LocalStore(tmp_path / "log")
    store = FaultyStore(base, *(store_fault or (None,)), counts=store_ops)
    hosts = [ToolHost(CFG.tool_sources, store)]
    tools = FaultyToolHost(hosts[0], *(tool_fault or (None,)), counts=tool_calls)
    drafter, verifier = SimEngine("drafter", CFG.engines), SimEngine("verifier", CFG.engines)

    async def coordinator(tool_host) -> Coordinator:
        for _ in range(5):  # a fault during start (replay, the opening snapshot) fails it: start again
            view = Severable(store)  # this coordinator's own connection to the store
            c = Coordinator(CFG, SimEngineClient(Local(drafter), Local(verifier), CFG.engines, CFG.coordinator),
                            tool_host, view, wall=wall)
            c.view, c.wall = view, wall  # type: ignore[attr-defined]
            try:
                await c.start()
                return c
            except (Exception, asyncio.CancelledError):  # noqa: BLE001
                crash(c)
        raise AssertionError("the coordinator never started")

    coord = await coordinator(Local(tools))
    # The coordinator crashes at the very moment of the fault: nothing it has not stored yet survives.
    store.injector.on_inject = tools.injector.on_inject = lambda: crash(coord)
    sids = []
    for i, task in enumerate(tasks):
        try:
            sids.append((await coord.create(CreateSession(tool_source="airline", task_id=task, user="simulated",
                                                          trial=i)))["session_id"])
        except ServiceUnavailable:
            pass  # not acknowledged: the client was told, and the session never started
        except asyncio.CancelledError:  # the request was cancelled: the session may exist, unacknowledged
            pass
    injected = lambda: bool(store.injected or tools.injected)  # noqa: E731
    if not await settled(coord, sids, until=injected) or injected():
        crash(coord)  # (already done at the fault; here for a run that got stuck without one)
        await asyncio.sleep(0.1)  # let what was in flight land or fail
        hosts += [ToolHost(CFG.tool_sources, store), ToolHost(CFG.tool_sources, store)]
        coord = await coordinator(ShardedToolHost([Local(h) for h in hosts[1:]]))  # and a new shard count
    assert await settled(coord, sids, timeout=30), {s: coord.sessions[s].status for s in sids}
    for sid in sids:
        s = coord.sessions[sid]
        assert s.status in FINISHED and (s.status != "failed" or s.error), (sid, s.status, s.error)
    crash(coord)
    executions = Counter()
    for h in hosts:
        executions.update(h.write_executions)
    return Outcome(dict(executions), all_records(base), sids, store.injected + tools.injected,
                   store.ops, tools.ops)


async def settled(coord: Coordinator, sids: list[str], timeout: float = 15, until=lambda: False) -> bool:
    for _ in range(int(timeout / 0.02)):
        if all(sid in coord.sessions and coord.sessions[sid].status in FINISHED for sid in sids):
            return True
        if until():
            return False
        await asyncio.sleep(0.02)
    return False


def crash(coord: Coordinator) -> None:
    """Crash a coordinator: its store connection is cut first (nothing queued reaches the store), then its
    tasks are cancelled. The lease is not released: a successor waits it out."""
    coord.view.sever()  # type: ignore[attr-defined]
    for task in (coord.commits.flusher, coord.log._renewer, *(s.runner for s in coord.sessions.values())):
        if task is not None:
            task.cancel()
    coord.wall.lapse()  # type: ignore[attr-defined]


def all_records(store: LocalStore) -> dict[str, list[dict]]:
    """Every session's records: the archive (finished before a snapshot), then the live log."""
    out: dict[str, list[dict]] = {}
    for key in store.list("archive/"):
        for line in store.get(key).splitlines():
            record = json.loads(line)
            out.setdefault(record.pop("sid"), []).append(record)
    for sid, records in SessionLog(store).replay().sessions.items():
        out.setdefault(sid, []).extend(records)
    return out


def check(outcome: Outcome) -> None:
    intents = {r["key"]: (sid, i) for sid, rs in outcome.records.items() for i, r in enumerate(rs) if r["t"] == "intent"}
    assert all(n == 1 for n in outcome.executions.values()), outcome.executions  # 0 duplicate executions
    lost = set(outcome.executions) - set(intents)
    assert not lost, f"writes ran without a logged intent: {lost}"  # 0 lost intents
    for key in outcome.executions:
        sid, at = intents[key]
        if not authorised(outcome.records[sid], at):
            _dump(outcome.records[sid], at)
        assert authorised(outcome.records[sid], at), f"write {key} ran without approval"


def authorised(records: list[dict], at: int) -> bool:
    """The intent at ``at`` follows an accepting verdict on the staged write, or a strong repair of it."""
    intent = records[at]
    call = {"kind": "tool", **intent["call"]}
    for r in reversed(records[:at]):
        if r["t"] == "accepted":
            j, n = r["detail"].split("/")
            staged = next(x for x in reversed(records[:at]) if x["t"] == "staged")
            return j == n and staged["action"] == call and intent["author"] == "weak"
        if r["t"] in ("fused_repair", "strong_repair"):
            return r["action"] == call and intent["author"] == "strong"
        if r["t"] not in ("commit", "tool_result", "result"):
            return False
    return False


# Scopes: the store operations and tool calls counted, the sessions' tasks, the faults, and the stride
# of the store sweep. The fast tier faults every keyed tool call and every second write-path store
# operation (N = 1, 3, 5, ...) of one session with an unknown outcome (the write lands, the caller sees
# an error); the slow tier every operation of three sessions with every fault.
SCOPES = {"write-path": (write_path_store_op, keyed_call, ("7",), ("unknown",), 2),
          "all": (every_store_op, lambda call, key: True, WRITING_TASKS, FAULTS, 1)}
CASES = [pytest.param(scope, fault, id=f"{scope}-{fault}", marks=[pytest.mark.slow] if scope == "all" else [])
         for scope, (_, _, _, faults, _) in SCOPES.items() for fault in faults]
_CLEAN: dict[str, Outcome] = {}


async def clean_run(tmp_path, scope: str) -> Outcome:
    """A run without faults (once per scope): it must write, and it counts the operations to sweep."""
    if scope not in _CLEAN:
        store_ops, tool_calls, tasks, _, _ = SCOPES[scope]
        outcome = await serve(tmp_path / "clean", store_ops=store_ops, tool_calls=tool_calls, tasks=tasks)
        check(outcome)
        assert outcome.executions, "the sessions must write for the sweep to mean anything"
        _CLEAN[scope] = outcome
    return _CLEAN[scope]


async def sweep(tmp_path, scope: str, fault: str, where: str) -> None:
    store_ops, tool_calls, tasks, _, stride = SCOPES[scope]
    clean = await clean_run(tmp_path, scope)
    ops = clean.store_ops if where == "store" else clean.tool_ops
    runs = injected = 0
    for n in range(1, ops + 1, stride if where == "store" else 1):
        kind = {"store_fault" if where == "store" else "tool_fault": (n, fault)}
        outcome = await serve(tmp_path / f"{fault}-{n}", store_ops=store_ops, tool_calls=tool_calls, tasks=tasks,
                              **kind)
        check(outcome)
        runs, injected = runs + 1, injected + len(outcome.injected)
    print(f"{where} {fault} ({scope}): {injected} faults injected in {runs} runs over {ops} operations")
    assert runs and injected >= runs // 2  # most runs reached their Nth operation (counts vary run to run)


@pytest.mark.parametrize("scope, fault", CASES)
async def test_store_faults_at_every_nth_operation(tmp_path, scope, fault):
    await sweep(tmp_path, scope, fault, "store")


@pytest.mark.parametrize("scope, fault", CASES)
async def test_tool_host_faults_at_every_nth_call(tmp_path, scope, fault):
    await sweep(tmp_path, scope, fault, "tool host")

def _dump(records, at):  # debugging aid
    for i, r in enumerate(records[: at + 1]):
        print(i, r["t"], {k: v for k, v in r.items() if k in ("detail", "action", "key", "author", "call")})
