"""A displaced coordinator hands its sessions over with their world intact (hostile tests).

A simulated airline session whose gold path writes twice to one reservation (task 7: change its flights,
then cancel it) runs on coordinator A, in process, over a real local store and one tau2 tool host. Once A
has committed the first write, A is taken out while the session runs, and B, on the same store and tool
host, takes the log's lease and resumes the session:
- fenced: a partition cuts A off from the store; B takes over; the partition heals and A learns at its
  next renewal that it was displaced, and stops its sessions (A is alive the whole time);
- crashed: A's store connection is cut and its tasks are cancelled (the fault suite's crash).
B's next write waits until A has dealt with its session. Then the trajectory tau2 grades must hold
exactly the writes the tool host ran, each once, and tau2's evaluator must replay it: every write's
observation is what the session's own world answered. A displaced coordinator that closes the session's
tool environment makes B run the rest in a pristine world, and the replay refuses it.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.config import AppConfig, CoordinatorConfig, SimEngines
from specagent_ray.serve.core.handles import Local
from specagent_ray.serve.engines.engine_client import SimEngineClient
from specagent_ray.serve.engines.sim_engine import SimEngine
from specagent_ray.serve.log.records import written
from specagent_ray.serve.log.session_log import SessionLog
from specagent_ray.serve.sessions.coordinator import Coordinator
from specagent_ray.serve.toolhost.tool_host import ToolHost
from specagent_ray.storage.base import StoreError
from specagent_ray.storage.local import LocalStore
from specagent_ray.testing.faults import LeaseWall
from specagent_ray.testing.served import FAST, finished

TASK = "7"  # gold path: update_reservation_flights on XEHM4B, then cancel_reservation of XEHM4B
LEASE_S = 0.6
CFG = AppConfig(engines=SimEngines(latency=FAST), tool_sources={"airline": {"kind": "tau2", "domain": "airline"}},
                coordinator=CoordinatorConfig(lease_s=LEASE_S, lease_skew_s=0.05, ack_timeout_s=0.3, intent_wait_s=3))


class Partition:
    """A's connection to the store: it is ``cut`` (a partition, or a crash) right after the log segment
    that holds the first write's commit is stored, so nothing A does after that point reaches the store;
    a test may heal it (``cut = False``)."""

    def __init__(self, inner: LocalStore):
        self.inner, self.cut = inner, False
        self.at_point, self.loop = asyncio.Event(), asyncio.get_running_loop()

    def __getattr__(self, name: str):
        method = getattr(self.inner, name)

        def op(*args):
            if self.cut:
                raise StoreError(f"partitioned: {name}")
            out = method(*args)
            if name == "create" and args[0].startswith("log/") and commits_a_write(args[1]):
                self.cut = True
                self.loop.call_soon_threadsafe(self.at_point.set)  # store operations run on worker threads
            return out
        return op


def commits_a_write(segment: bytes) -> bool:
    return any(r["t"] == "commit" and written(r["keys"]) for r in map(json.loads, segment.decode().splitlines()))


class WritesWait:
    """The tool host as B reaches it: its writes wait until ``open`` is set; everything else passes."""

    def __init__(self, inner: ToolHost):
        self.inner, self.open = inner, asyncio.Event()

    async def execute(self, *args, **kwargs):
        if args[3] if len(args) > 3 else kwargs.get("key"):
            await self.open.wait()
        return await self.inner.execute(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def coordinator(store, tool_host, wall: LeaseWall) -> Coordinator:
    engines = SimEngineClient(Local(SimEngine("drafter", CFG.engines)), Local(SimEngine("verifier", CFG.engines)),
                              CFG.engines, CFG.coordinator)
    return Coordinator(CFG, engines, Local(tool_host), store, wall=wall)


async def until(condition, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def committed_keys(store: LocalStore, sid: str) -> list[str]:
    """Every write key the session's commit records settle, in order, repeats included (from the archive,
    where a snapshot moves finished sessions, then the live log)."""
    records = [r for key in store.list("archive/") for r in map(json.loads, store.get(key).splitlines())
               if r["sid"] == sid]
    records += SessionLog(store).replay().sessions.get(sid, [])
    return [k for r in records if r["t"] == "commit" for k in written(r["keys"])]


@pytest.mark.parametrize("displaced", ["fenced", "crashed"])
async def test_a_resumed_session_runs_on_in_the_world_its_committed_writes_made(tmp_path, displaced):
    base = LocalStore(tmp_path / "log")
    host = ToolHost(CFG.tool_sources, LocalStore(tmp_path / "tools"))
    wall, a_store = LeaseWall(LEASE_S, 0.05), Partition(base)
    a = coordinator(a_store, host, wall)
    await a.start()
    sid = (await a.create(CreateSession(tool_source="airline", task_id=TASK, user="simulated")))["session_id"]
    s_a = a.sessions[sid]
    await asyncio.wait_for(a_store.at_point.wait(), 30)  # the first write ran and its commit is stored; cut
    if displaced == "crashed":
        for task in (a.commits.flusher, a.log._renewer, s_a.runner):
            task.cancel()
    else:
        await until(lambda: a.log.paused() is not None)  # A's own clock says its lease is no longer valid
    wall.lapse()  # B need not wait out A's lease in real time
    b_tools = WritesWait(host)
    b = coordinator(LocalStore(tmp_path / "log"), b_tools, wall)
    await b.start()
    assert b.sessions[sid].committed_keys  # B resumes after the committed write
    if displaced == "fenced":
        a_store.cut = False  # the partition heals: A's next renewal finds B's epoch, and A stops
        await until(lambda: a.fenced is not None)
    await asyncio.wait({s_a.runner}, timeout=1.0)  # A deals with its session (it may linger, storing nothing)
    b_tools.open.set()
    s = await finished(b, sid)
    assert s.status == "done", s.error

    ran = Counter(host.write_executions)
    keys = committed_keys(base, sid)
    assert all(n == 1 for n in ran.values()), ran  # no write ran twice
    assert sorted(keys) == sorted(ran), (keys, ran)  # the trajectory holds exactly the writes that ran, once each
    graded = await b.trajectory(sid, grade=True)
    assert "grade_error" not in graded, graded["grade_error"]  # tau2's replay agrees with every observation
    assert graded["reward"] is not None
    for task in (a.commits.flusher, a.log._renewer, s_a.runner):
        task.cancel()
