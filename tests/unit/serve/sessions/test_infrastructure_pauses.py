"""A lapse of the infrastructure is a pause of the step, never the tool's answer (hostile tests).

A served simulated airline session whose gold path writes, in process, over a real local store wrapped
so that a test can hold the session log's lease unconfirmed (every renewal refused), stop the store
answering at all, or make the tool host raise. Whatever happens, no observation in the trajectory
carries the infrastructure's error, and no write runs twice.
"""

from __future__ import annotations

import asyncio

import pytest

from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.config import AppConfig, CoordinatorConfig, SimEngines
from specagent_ray.serve.core.handles import Local
from specagent_ray.serve.engines.engine_client import SimEngineClient
from specagent_ray.serve.engines.sim_engine import SimEngine
from specagent_ray.serve.sessions.coordinator import Coordinator
from specagent_ray.serve.toolhost.tool_host import ToolHost
from specagent_ray.storage.base import StoreError
from specagent_ray.storage.local import LocalStore
from specagent_ray.testing.faults import LeaseWall
from specagent_ray.testing.served import FAST, finished

TASK = "7"  # an airline task whose gold path writes
LEASE_S = 0.6
INFRA = ("session log", "not acknowledged", "ServiceUnavailable", "Unavailable", "fenced", "tool host", "StoreError",
         "held:", "restarting")
SOURCES = AppConfig(engines=SimEngines(), tool_sources={"airline": {"kind": "tau2", "domain": "airline"}}).tool_sources


class Holdable:
    """A store that stops answering while ``held`` (unreachable: the lease's renewals and the log's
    writes all fail), and answers again once released."""

    def __init__(self, inner: LocalStore):
        self.inner, self.held = inner, False

    def __getattr__(self, name: str):
        method = getattr(self.inner, name)

        def op(*args):
            if self.held:
                raise StoreError(f"held: {name}")
            return method(*args)
        return op


class FlakyToolHost:
    """A tool host that raises ``error`` on its first ``fails`` calls (a replica restarting), then answers."""

    def __init__(self, inner: ToolHost, fails: int, error: Exception = ConnectionError("tool host replica restarting")):
        self.inner, self.fails, self.error = inner, fails, error

    async def execute(self, *args, **kwargs):
        if self.fails > 0:
            self.fails -= 1
            raise self.error
        return await self.inner.execute(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def coordinator(tmp_path, store, tool_host=None, **coord) -> tuple[Coordinator, ToolHost]:
    cfg = AppConfig(engines=SimEngines(latency=FAST), tool_sources={"airline": {"kind": "tau2", "domain": "airline"}},
                    coordinator=CoordinatorConfig(lease_s=LEASE_S, lease_skew_s=0.05, ack_timeout_s=0.3, **coord))
    engines = SimEngineClient(Local(SimEngine("drafter", cfg.engines)), Local(SimEngine("verifier", cfg.engines)),
                              cfg.engines, cfg.coordinator)
    host = ToolHost(cfg.tool_sources, LocalStore(tmp_path / "tools"))
    return Coordinator(cfg, engines, Local(tool_host or host), store, wall=LeaseWall(LEASE_S, 0.05)), host


def infrastructure_in_observations(s) -> list[str]:
    return [x.observation.content for x in s.steps if x.observation is not None
            and any(word in x.observation.content for word in INFRA)]


async def test_a_lease_unconfirmed_for_twice_its_period_delays_a_staged_write_which_then_runs_once(tmp_path, caplog):
    store = Holdable(LocalStore(tmp_path / "log"))
    coord, host = coordinator(tmp_path, store)
    await coord.start()
    staged = asyncio.Event()
    coord.on_event = lambda s, event: staged.set() if event.t == "staged" else None
    sid = (await coord.create(CreateSession(tool_source="airline", task_id=TASK, user="simulated")))["session_id"]
    await asyncio.wait_for(staged.wait(), 30)
    store.held = True  # from here the lease stays unconfirmed for twice its period, and the intent unstored
    await asyncio.sleep(2 * LEASE_S)
    store.held = False
    s = await finished(coord, sid)
    assert s.status == "done", s.error
    assert "a write's intent waits for the session log" in caplog.text  # it did wait, and did not fail
    assert host.write_executions and max(host.write_executions.values()) == 1
    assert infrastructure_in_observations(s) == []
    graded = await coord.trajectory(sid, grade=True)
    assert graded["reward"] is not None


async def test_a_store_that_never_answers_ends_the_session_failed_with_a_reason_and_runs_nothing(tmp_path):
    store = Holdable(LocalStore(tmp_path / "log"))
    coord, host = coordinator(tmp_path, store, intent_wait_s=1.0)
    await coord.start()
    staged = asyncio.Event()
    coord.on_event = lambda s, event: staged.set() if event.t == "staged" else None
    sid = (await coord.create(CreateSession(tool_source="airline", task_id=TASK, user="simulated")))["session_id"]
    await asyncio.wait_for(staged.wait(), 30)
    store.held = True  # the store never answers again
    s = coord.sessions[sid]
    async with asyncio.timeout(30):
        while s.status not in ("failed", "done"):
            await asyncio.sleep(0.05)
    assert s.status == "failed" and s.error.startswith("unavailable:") and "not stored within 1 s" in s.error
    assert sum(host.write_executions.values()) == 0  # the write whose intent was never stored never ran
    assert infrastructure_in_observations(s) == []


@pytest.mark.parametrize("fails", [1, 3])
async def test_a_tool_host_that_raises_for_a_while_is_waited_for_and_never_an_observation(tmp_path, fails):
    store = LocalStore(tmp_path / "log")
    inner = ToolHost(SOURCES, LocalStore(tmp_path / "tools"))
    coord, _ = coordinator(tmp_path, store, FlakyToolHost(inner, fails))
    await coord.start()
    sid = (await coord.create(CreateSession(tool_source="airline", task_id=TASK, user="simulated")))["session_id"]
    s = await finished(coord, sid)
    assert s.status == "done", s.error
    assert infrastructure_in_observations(s) == []
    assert max(inner.write_executions.values()) == 1


async def test_a_tool_host_gone_for_longer_than_its_patience_ends_the_session_failed(tmp_path):
    store = LocalStore(tmp_path / "log")
    inner = ToolHost(SOURCES, LocalStore(tmp_path / "tools"))
    coord, _ = coordinator(tmp_path, store, FlakyToolHost(inner, 10**6), tool_retry_s=0.5)
    await coord.start()
    sid = (await coord.create(CreateSession(tool_source="airline", task_id=TASK, user="simulated")))["session_id"]
    s = await finished(coord, sid)
    assert s.status == "failed" and s.error.startswith("unavailable: the tool host did not answer within 0.5 s")
    assert infrastructure_in_observations(s) == [] and sum(inner.write_executions.values()) == 0


async def test_while_the_log_is_paused_new_sessions_get_503_at_once_and_are_admitted_again_after(tmp_path):
    from specagent_ray.serve.core.errors import ServiceUnavailable

    store = Holdable(LocalStore(tmp_path / "log"))
    coord, _ = coordinator(tmp_path, store)
    await coord.start()
    request = CreateSession(tool_source="airline", task_id=TASK, user="simulated")
    store.held = True
    async with asyncio.timeout(10):
        while coord.log.paused(coord.cfg.coordinator.ack_timeout_s) is None:  # past the deadline, and the grace
            await asyncio.sleep(0.02)
    with pytest.raises(ServiceUnavailable, match="not confirmed"):
        await coord.create(request)
    store.held = False
    async with asyncio.timeout(10):
        while coord.log.paused() is not None:
            await asyncio.sleep(0.02)
    s = await finished(coord, (await coord.create(request))["session_id"])
    assert s.status == "done", s.error


def test_a_failed_sessions_error_code_says_what_failed():
    from specagent_ray.serve.agents.readback import failure_code

    assert failure_code("unavailable: the tool host did not answer within 30 s") == "unavailable"
    assert failure_code("engine unavailable: no replica") == "engine_unavailable"
    assert failure_code("engine error: 500") == "engine_error"
    assert failure_code("internal error: KeyError (logged on the server)") == failure_code(None) == "server_error"


async def test_a_tools_own_exception_is_its_answer_not_a_pause(tmp_path):
    """A tool that refuses its arguments (here: the tool host raising a ValueError) answered the call: the
    agent reads it as the step's error observation at once, and nothing is tried again."""
    inner = ToolHost(SOURCES, LocalStore(tmp_path / "tools"))
    host = FlakyToolHost(inner, 1, ValueError("reservation id must be 6 characters"))
    coord, _ = coordinator(tmp_path, LocalStore(tmp_path / "log"), host, tool_retry_s=60)
    await coord.start()
    sid = (await coord.create(CreateSession(tool_source="airline", task_id=TASK, user="simulated")))["session_id"]
    s = await finished(coord, sid, timeout_s=30)
    assert s.status == "done", s.error
    answers = [x.observation.content for x in s.steps if x.observation is not None and x.observation.error]
    assert any("reservation id must be 6 characters" in a for a in answers)
