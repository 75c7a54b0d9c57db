"""Served sessions with parallel calls: the simulated engines draft them and the session commits a multi-call
step (and never one with them off); a parallel action's client reads all go out in the response that ends
the turn (no reader sees the turn end with only some of them); a turn answers all of them or none."""

from __future__ import annotations

import asyncio
import time

import pytest

from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import (
    Action,
    Effect,
    Parts,
    SpecConfig,
    Task,
    run_specagent,
)
from specagent_ray.protocol.types import ToolCall
from specagent_ray.serve.core.api import CreateSession, ToolResult
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.core.config import (
    AppConfig,
    CoordinatorConfig,
    SessionDefaults,
    SimEngines,
)
from specagent_ray.serve.core.errors import BadRequest
from specagent_ray.serve.log.group_commit import GroupCommit
from specagent_ray.serve.log.records import TurnMeta
from specagent_ray.serve.responses.items import output_items, status_of
from specagent_ray.serve.sessions.coordinator import Coordinator
from specagent_ray.serve.sessions.runner import SessionTools
from specagent_ray.serve.sessions.session import Session
from specagent_ray.serve.sessions.turns import TurnPost, take_turn
from specagent_ray.testing.served import FAST, finished, sim_coordinator
from specagent_ray.tools.scripted import object_schema

TASK = "7"  # an airline task whose gold path has two independent reads and two independent writes


# -- the simulated engines, served ----------------------------------------------------------------------------

def coordinator(tmp_path, default: bool) -> Coordinator:
    cfg = AppConfig(engines=SimEngines(latency=FAST), defaults=SessionDefaults(parallel_calls=default),
                    coordinator=CoordinatorConfig(lease_s=1.0, lease_skew_s=0.05),
                    tool_sources={"airline": {"kind": "tau2", "domain": "airline"}})
    return sim_coordinator(tmp_path / "log", cfg)


@pytest.mark.parametrize("default, asked, parallel", [
    (False, True, True), (False, None, False), (True, None, True), (True, False, False)])
async def test_a_served_session_with_parallel_calls_commits_multi_call_steps_and_one_without_never(
        tmp_path, default, asked, parallel):
    coord = coordinator(tmp_path, default)
    await coord.start()
    req = CreateSession(tool_source="airline", task_id=TASK, user="simulated", parallel_calls=asked)
    s = await finished(coord, (await coord.create(req))["session_id"])
    assert s.status == "done", s.error
    multi = [x for x in s.steps if x.action.more]
    assert bool(multi) is parallel
    if parallel:  # each call has its own result, and a parallel write settles one key per call
        assert all(len(x.observation.parts) == len(x.action.calls) for x in multi)
        commits = [r for r in s.events if r["t"] == "commit"]
        written = [k for r in commits for st, k in zip(r["steps"], r["keys"]) if st["action"].get("more")
                   and st["effect"] == "write"]
        assert all(isinstance(k, list) and None not in k for k in written)


# -- a parallel action's client reads, as the Responses API shows them ----------------------------------------

R1, R2 = ToolCall("lookup", {"q": "a"}), ToolCall("lookup", {"q": "b"})
CATALOG = Catalog({"lookup": object_schema(q="string")}, {"lookup": Effect.READ})


class SlowLog:
    """A session log whose every write takes a while (a disk), so records appended meanwhile wait for the next."""

    def append(self, sid, data) -> None:
        pass

    async def durable(self) -> None:
        await asyncio.sleep(0.005)


async def client_session() -> tuple[Session, asyncio.Task]:
    """A client-user session whose weak model drafts two client reads as one action, then says done."""
    commits = GroupCommit(SlowLog(), 5.0, time.perf_counter)  # type: ignore[arg-type]
    commits.start()
    request = CreateSession(tool_source="app", user="client", message="hi", parallel_calls=True)
    s = Session("s1", request, Task("0", "hi"), log=lambda sid, rec, data: commits.append(s, data))

    async def run(call, key):
        return await s.client_call(call, key or s.read_call_id(call))

    parts = Parts(ScriptedPolicy([Action.parallel([R1, R2]), Action.message("done")]),
                  ScriptedPolicy([Action.stop()]), ScriptedVerifier([]), SessionTools(s, CATALOG, run, commits.stored),
                  ScriptedUser(), s.ledger, journal=s)
    return s, asyncio.get_running_loop().create_task(run_specagent(s.task, parts, SpecConfig(k=3, parallel_calls=True)))


def post(*outputs: tuple[str, str]) -> TurnPost:
    return TurnPost(previous=0, inputs=[ToolResult(call_id=c, content=o) for c, o in outputs],
                    meta=TurnMeta(model="specagent"))


async def test_every_client_read_of_a_parallel_action_is_in_the_response_that_ends_the_turn():
    s, runner = await client_session()
    out = await s.wait_events(0, 5, whole_turn=True)  # what a client waiting for the whole response gets
    turn = out["events"]
    calls = [i for i in output_items(turn, s.id, {}) if i["type"] == "function_call"]
    assert status_of(turn, latest=True) == "completed"
    assert [(c["name"], c["arguments"]) for c in calls] == [("lookup", '{"q": "a"}'), ("lookup", '{"q": "b"}')]
    ids = [c["call_id"] for c in calls]
    assert take_turn(s, post((ids[1], "B"), (ids[0], "A")), None, 8) == 1  # in any order, each to its call
    await asyncio.wait_for(runner, 5)
    step = next(x for x in s.steps if x.action.more)
    assert [p.content for p in step.observation.parts] == ["A", "B"]


async def test_a_turn_that_answers_only_some_calls_of_an_action_is_refused_and_records_nothing():
    s, runner = await client_session()
    await s.wait_events(0, 5, whole_turn=True)
    first = next(iter(s.pending_calls))
    recorded = s.recorded
    with pytest.raises(BadRequest, match="no output for function call"):
        take_turn(s, post((first, "A")), None, 8)  # the agent would wait for the other one forever
    assert s.recorded == recorded and len(s.pending_calls) == 2 and s.turns.count == 1
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


W1, W2 = ToolCall("book", {"q": "a"}), ToolCall("book", {"q": "b"})
WRITES = Catalog({"lookup": object_schema(q="string"), "book": object_schema(q="string")},
                 {"lookup": Effect.READ, "book": Effect.WRITE})


class StoringLog(SlowLog):
    """A SlowLog that keeps what each ``durable()`` stored, so a test can ask whether a record was stored."""

    def __init__(self):
        self.pending: list[dict] = []
        self.stored: list[dict] = []

    def append(self, sid, data) -> None:
        self.pending.append(data)

    async def durable(self) -> None:
        batch, self.pending = self.pending, []
        await asyncio.sleep(0.005)
        self.stored += batch


async def test_the_accepted_client_writes_of_one_action_go_out_together_each_with_a_durable_intent():
    """Two client writes the verifier accepted as one action: both function calls are in the response that
    ends the turn, and each one's intent was stored before it went out."""
    log = StoringLog()
    commits = GroupCommit(log, 5.0, time.perf_counter)  # type: ignore[arg-type]
    commits.start()
    request = CreateSession(tool_source="app", user="client", message="hi", parallel_calls=True)
    s = Session("s1", request, Task("0", "hi"), log=lambda sid, rec, data: commits.append(s, data))

    async def run(call, key):
        assert any(r.get("t") == "intent" and r.get("key") == key for r in log.stored)  # stored, not just made
        return await s.client_call(call, key)

    parts = Parts(ScriptedPolicy([Action.parallel([W1, W2]), Action.message("booked")]),
                  ScriptedPolicy([Action.stop()]), ScriptedVerifier([]), SessionTools(s, WRITES, run, commits.stored),
                  ScriptedUser(), s.ledger, journal=s)
    runner = asyncio.get_running_loop().create_task(run_specagent(s.task, parts, SpecConfig(k=3, parallel_calls=True)))
    out = await s.wait_events(0, 5, whole_turn=True)
    calls = [i for i in output_items(out["events"], s.id, {}) if i["type"] == "function_call"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("book", '{"q": "a"}'), ("book", '{"q": "b"}')]
    ids = [c["call_id"] for c in calls]
    assert take_turn(s, post((ids[1], "B"), (ids[0], "A")), None, 8) == 1
    await asyncio.wait_for(runner, 5)
    step = next(x for x in s.steps if x.action.more)
    assert [p.content for p in step.observation.parts] == ["A", "B"] and step.effect is Effect.WRITE


async def test_two_writes_of_one_action_that_need_approval_ask_one_at_a_time_and_both_finish():
    """Approvals are asked one after another, each in a turn of its own: answering one turn never leaves the
    other write's request open in a turn that has already ended."""
    from specagent_ray.serve.core.api import Approval
    from specagent_ray.serve.sessions.turns import ApprovalPost

    commits = GroupCommit(SlowLog(), 5.0, time.perf_counter)  # type: ignore[arg-type]
    commits.start()
    request = CreateSession(tool_source="app", user="client", message="hi", parallel_calls=True,
                            approval=Approval())
    s = Session("s1", request, Task("0", "hi"), log=lambda sid, rec, data: commits.append(s, data))
    ran: list[ToolCall] = []

    async def run(call, key):
        ran.append(call)
        from specagent_ray.protocol.types import Observation
        return Observation("booked")

    parts = Parts(ScriptedPolicy([Action.parallel([W1, W2]), Action.message("booked")]),
                  ScriptedPolicy([Action.stop()]), ScriptedVerifier([]), SessionTools(s, WRITES, run, commits.stored),
                  ScriptedUser(), s.ledger, journal=s)
    runner = asyncio.get_running_loop().create_task(run_specagent(s.task, parts, SpecConfig(k=3, parallel_calls=True)))
    after = 0
    for turn in (1, 2):
        out = await s.wait_events(after, 5, whole_turn=True)
        after += len(out["events"])
        asks = [r for r in out["events"] if r["t"] == "approval_request"]
        assert len(asks) == 1, [r["t"] for r in out["events"]]
        answer = ApprovalPost(approval_request_id=asks[0]["id"], approve=True)
        assert take_turn(s, TurnPost(previous=turn - 1, inputs=[answer], meta=TurnMeta(model="specagent")),
                         None, 8) == turn
    await asyncio.wait_for(runner, 5)
    assert sorted(c.arguments["q"] for c in ran) == ["a", "b"]


class ShakyLog(SlowLog):
    """A session log whose lease is unconfirmed for its first few flushes (a starved renewal thread)."""

    def __init__(self, failures: int):
        self.failures = failures

    async def durable(self) -> None:
        from specagent_ray.serve.log.lease import LeaseUnconfirmed

        if self.failures > 0:
            self.failures -= 1
            raise LeaseUnconfirmed("session log lease (epoch 1) not confirmed within 5.0 s")
        await asyncio.sleep(0)


async def test_a_lease_unconfirmed_for_a_moment_delays_a_write_and_never_becomes_its_result(tmp_path):
    """The coordinator's tools wait for the log through the group commit, which retries a store error until
    its ack timeout: the write runs once the intent is stored, and the agent never sees the lease's error."""
    coord = sim_coordinator(tmp_path / "log", AppConfig(engines=SimEngines(latency=FAST),
                                                        tool_sources={"airline": {"kind": "tau2", "domain": "airline"}}))
    assert coord.runner.durable == coord.commits.stored  # the tools' wait is the retrying one
    commits = GroupCommit(ShakyLog(failures=3), 5.0, time.perf_counter)  # type: ignore[arg-type]
    s = Session("s1", CreateSession(tool_source="app", user="client", message="hi"), Task("0", "hi"),
                log=lambda sid, rec, data: None)
    ran = []

    async def run(call, key):
        ran.append(key)
        from specagent_ray.protocol.types import Observation
        return Observation("booked")

    obs = await SessionTools(s, WRITES, run, commits.stored).execute(W1)
    assert obs.content == "booked" and not obs.error and len(ran) == 1
