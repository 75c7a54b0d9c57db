"""The coordinator in one process: simulated engine replicas and the tool host as local objects,
the real session log on a local folder, real tau2 environments. Ray is exercised in tests/integration."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

import pytest

from specagent_ray.control.controller import Load
from specagent_ray.costs.hardware import Hardware
from specagent_ray.serve.core.api import ClientTool, CreateSession, ToolResult, UserMessage
from specagent_ray.serve.core.config import AppConfig, ClientSource, CoordinatorConfig, LatencyModel, SimEngines
from specagent_ray.serve.core.errors import BadRequest, Conflict, NotFound, Overloaded, ServiceUnavailable
from specagent_ray.serve.core.handles import Local
from specagent_ray.serve.core.tuning import SpeculationConfig
from specagent_ray.serve.engines.engine_client import SimEngineClient
from specagent_ray.serve.engines.batch_wire import unpacked
from specagent_ray.serve.engines.sim_engine import SimEngine
from specagent_ray.serve.log.records import parse
from specagent_ray.serve.sessions.coordinator import Coordinator
from specagent_ray.serve.toolhost.tool_host import ShardedToolHost, ToolHost
from specagent_ray.storage.base import StoreError
from specagent_ray.storage.local import LocalStore
from specagent_ray.telemetry.resources import report_from_ledger
from specagent_ray.testing.faults import LeaseWall
from specagent_ray.tools.bfcl import load_cases

FAST = LatencyModel(draft_base_s=0.001, draft_per_request_s=0, verify_base_s=0.002, verify_per_request_s=0,
                    step_base_s=0.001)


SLOW = LatencyModel(draft_base_s=0.01, draft_per_request_s=0, verify_base_s=0.05, verify_per_request_s=0,
                    step_base_s=0.02)  # sessions last about a second: long enough to crash in the middle


def config(latency: LatencyModel = FAST, **coord) -> AppConfig:
    coord.setdefault("lease_s", 1.0)  # a restarted coordinator waits out its predecessor's lease
    coord.setdefault("lease_skew_s", 0.05)
    return AppConfig(engines=SimEngines(latency=latency), coordinator=CoordinatorConfig(**coord),
                     tool_sources={"airline": {"kind": "tau2", "domain": "airline"}, "app": ClientSource()})


class Cluster:
    """The deployments of one app, in process; ``restart()`` replaces only the coordinator."""

    def __init__(self, tmp_path, cfg: AppConfig, tool_hosts: int = 1):
        self.cfg, self.store = cfg, LocalStore(tmp_path / "log")
        self.drafter = SimEngine("drafter", cfg.engines)
        self.verifier = SimEngine("verifier", cfg.engines)
        self.hosts = [ToolHost(cfg.tool_sources, self.store) for _ in range(tool_hosts)]
        self.tools = self.hosts[0]
        self.wall = LeaseWall(cfg.coordinator.lease_s, cfg.coordinator.lease_skew_s)
        self.coordinator = self._new()

    def _new(self) -> Coordinator:
        engines = SimEngineClient(Local(self.drafter), Local(self.verifier), self.cfg.engines, self.cfg.coordinator)
        tools = ShardedToolHost([Local(h) for h in self.hosts]) if len(self.hosts) > 1 else Local(self.tools)
        return Coordinator(self.cfg, engines, tools, self.store, wall=self.wall)

    async def crash_and_restart(self) -> Coordinator:
        old = self.coordinator
        old.log.store = None  # nothing more reaches the log: what is not durable is lost, as in a crash
        old.commits.flusher.cancel()
        for s in old.sessions.values():
            if s.runner is not None:
                s.runner.cancel()
        await asyncio.sleep(0.3)  # a disk write already under way in a thread completes, as it would
        self.wall.lapse()  # the successor finds the lease run out, as it would after waiting it out
        self.coordinator = self._new()
        await self.coordinator.start()
        return self.coordinator


async def finish(coord: Coordinator, sids, timeout=60, owner="local"):
    async def one(sid):
        after = 0
        while True:
            out = await coord.events(sid, after, wait_s=1, owner=owner)
            after += len(out["events"])
            if out["done"]:
                return out
    return await asyncio.wait_for(asyncio.gather(*(one(s) for s in sids)), timeout)


WRITING_TASKS = ("7", "9", "14")  # airline tasks whose gold actions write (cancel, book, update)


def sim(task_id="0", **kw) -> CreateSession:
    return CreateSession(tool_source="airline", task_id=task_id, user="simulated", **kw)


async def test_sessions_run_to_completion_with_batched_verifies_and_a_durable_log(tmp_path):
    cluster = Cluster(tmp_path, config(batch_window_ms=20))
    coord = cluster.coordinator
    await coord.start()
    sids = [(await coord.create(sim(str(i % 10), trial=i)))["session_id"] for i in range(30)]
    await finish(coord, sids)
    stats = coord.stats()
    assert stats["sessions"] == {"running": 0, "done": 30}
    assert stats["committed_steps"] == sum(len(s.steps) for s in coord.sessions.values())
    sizes = stats["batch_sizes"]["verify"]
    assert max(sizes) > 1, sizes  # verify requests of different sessions shared a batch
    assert 0 < stats["overhead_s"]["n"] <= stats["committed_steps"]  # one sample per commit
    cache = stats["cache"]["strong"]  # the token model's prefix cache: delivered is what the layout predicts
    assert 0 < cache["cached_share"] < 1 and cache["gap"] == 0 and cache["session_cached_share"]["n"] == 30
    assert cache["session_cached_share"]["p10"] <= cache["session_cached_share"]["p50"]
    assert cache["prompt_tokens"] == sum(s.ledger.totals("strong").prompt_tokens for s in coord.sessions.values())
    assert len(stats["engine_wait_s"]["strong"]) and stats["engine_wait_s"]["draft"]["n"] > 0
    traj = await coord.trajectory(sids[0], grade=True)
    assert traj["reward"] in (0.0, 1.0) and traj["steps"] and traj["usage"]["strong"]["calls"] >= 1
    assert traj["resources"]["flops_source"] == "estimated"
    replayed = coord.log.replay().sessions
    assert set(replayed) == set(sids)
    assert all(records[-1]["t"] == "final" for records in replayed.values())


@pytest.mark.parametrize("hardware", [Hardware(), Hardware(strong_model="qwen3-235b-a22b", gpu="h200", strong_gpus=8)])
async def test_a_served_resource_report_is_estimated_on_the_profiles_hardware(tmp_path, hardware):
    """The report names the deployment in the app's config and its estimates are that deployment's."""
    cluster = Cluster(tmp_path, config().model_copy(update={"hardware": hardware}))
    await cluster.coordinator.start()
    sid = (await cluster.coordinator.create(sim("7")))["session_id"]
    await finish(cluster.coordinator, [sid])
    report = (await cluster.coordinator.trajectory(sid))["resources"]
    assert report["hardware"] == hardware.model_dump()
    s = cluster.coordinator.sessions[sid]
    expected = report_from_ledger(s.ledger, hardware.deployments()).model_dump(mode="json")
    assert {k: report[k] for k in expected} == expected


async def test_finished_sessions_free_their_tool_environments_and_only_the_newest_stay_in_memory(tmp_path):
    cluster = Cluster(tmp_path, config(retain_finished=2))
    coord = cluster.coordinator
    await coord.start()
    sids = []
    for i in range(4):  # one after the other, so that no reader races an eviction
        sids.append((await coord.create(sim(str(i), trial=i)))["session_id"])
        await finish(coord, sids[-1:])
    assert cluster.tools.stats()["environments"] == 0  # every tau2 environment was closed at the end
    stats = coord.stats()
    assert stats["in_memory"] == 2 and stats["sessions"] == {"running": 0, "done": 4}
    await coord.trajectory(sids[2])
    await coord.trajectory(sids[3])
    with pytest.raises(NotFound, match="kept for the last 2"):
        await coord.trajectory(sids[0])
    assert set(coord.log.replay().sessions) == set(sids)  # dropped from memory, not from the log


async def test_calls_that_come_while_the_first_start_replays_wait_for_it(tmp_path):
    """The in-process gateway starts the coordinator on every call. A second first call that went on
    while the first start still had to replay the log could create a session that the replay then
    resumed beside its own runner (seen in CI: a client heard the same agent message twice)."""
    coord = Cluster(tmp_path, config()).coordinator
    warm, warmed, warms = coord.sources.warm, asyncio.Event(), []

    async def slow_warm():
        warms.append(1)
        await warmed.wait()
        await warm()
    coord.sources.warm = slow_warm
    first = asyncio.create_task(coord.start())
    await asyncio.sleep(0)  # the first start is warming the tool sources
    second = asyncio.create_task(coord.start())
    await asyncio.sleep(0.1)
    assert not second.done()  # it waits for the first start
    warmed.set()
    await asyncio.wait_for(asyncio.gather(first, second), 30)
    await coord.start()  # once started, a start returns at once
    assert warms == [1]
    sid = (await coord.create(CreateSession(tool_source="airline", task_id="0", message="Hi")))["session_id"]
    assert coord.sessions[sid].runner is not None and coord.recovery.resumed == 0


async def test_sharded_tool_hosts_keep_each_sessions_calls_on_one_shard(tmp_path):
    cluster = Cluster(tmp_path, config(), tool_hosts=3)
    coord = cluster.coordinator
    await coord.start()
    sids = [(await coord.create(sim(str(i), trial=i)))["session_id"] for i in range(12)]
    await finish(coord, sids)
    assert coord.stats()["sessions"] == {"running": 0, "done": 12}
    used = set()
    for i, host in enumerate(cluster.hosts):
        owners = {key.split(":")[0] for key in host.write_executions}
        assert all(coord.tool_host.shards.index(coord.tool_host.shard(sid)) == i for sid in owners)
        used |= {i} if owners else set()
        assert host.stats()["environments"] == 0
    assert used  # some session wrote
    # the sessions were spread over the shards (12 random ids all on one of 3 shards: p = 6e-6)
    assert len({coord.tool_host.shards.index(coord.tool_host.shard(sid)) for sid in sids}) >= 2


async def test_events_stream_in_order_and_end_with_final(tmp_path):
    cluster = Cluster(tmp_path, config())
    coord = cluster.coordinator
    await coord.start()
    sid = (await coord.create(sim("1")))["session_id"]
    out = (await finish(coord, [sid]))[0]
    events = (await coord.events(sid, 0, 0))["events"]
    assert [e["seq"] for e in events] == list(range(len(events)))
    kinds = [e["t"] for e in events]
    assert kinds[0] == "created" and kinds[-1] == "final" and "commit" in kinds and "tool_result" in kinds
    assert out["status"] == "done"


async def test_a_crashed_coordinator_resumes_every_session_and_runs_no_write_twice(tmp_path):
    cluster = Cluster(tmp_path, config(SLOW))
    coord = cluster.coordinator
    await coord.start()
    sids = [(await coord.create(sim(str(i), trial=i)))["session_id"] for i in range(12)]
    for _ in range(200):  # mid-run: once some commit is durable
        if any(e["t"] == "commit" for sid in sids for e in coord.sessions[sid].events):
            break
        await asyncio.sleep(0.05)
    before = {sid: len(coord.sessions[sid].steps) for sid in sids}
    durable = {sid: sum(len(e["steps"]) for e in coord.sessions[sid].events if e["t"] == "commit") for sid in sids}
    coord = await cluster.crash_and_restart()
    assert coord.recovery.resumed > 0
    await finish(coord, sids)
    assert all(coord.sessions[s].status == "done" for s in sids)
    for sid in sids:  # every commit a client could have seen survived, in order
        assert len(coord.sessions[sid].steps) >= durable[sid]
        assert before[sid] >= durable[sid]
    assert cluster.tools.write_executions and max(cluster.tools.write_executions.values()) == 1


async def test_lost_drafter_mid_run_redrafts_and_sessions_complete(tmp_path):
    cluster = Cluster(tmp_path, config())
    calls = {"n": 0}
    real = cluster.drafter.propose_batch

    async def flaky(requests):
        calls["n"] += 1
        if calls["n"] in (3, 4, 5):
            raise ConnectionError("drafter replica died")
        return await real(requests)

    cluster.drafter.propose_batch = flaky
    coord = cluster.coordinator
    await coord.start()
    sids = [(await coord.create(sim(str(i))))["session_id"] for i in range(4)]
    await finish(coord, sids)
    assert coord.stats()["sessions"] == {"running": 0, "done": 4}
    assert coord.stats()["redrafts"] >= 1


async def test_a_failing_verifier_is_retried_then_falls_back_to_a_strong_step(tmp_path):
    cluster = Cluster(tmp_path, config(verify_attempts=2))

    async def down(requests):
        raise TimeoutError("verifier down")

    cluster.verifier.verify_batch = down
    coord = cluster.coordinator
    events = []
    coord.on_event = lambda s, event: events.append((s.id, event.t))
    await coord.start()
    sid = (await coord.create(sim("0", method="specagent")))["session_id"]
    await finish(coord, [sid])
    s = coord.sessions[sid]
    assert s.status == "done" and (sid, "verifier_fallback") in events
    assert all(st.author == "strong" for st in s.steps if st.effect.value == "write" and st.action.kind.value == "tool")


async def test_admission_control_answers_429_past_the_session_limit(tmp_path):
    # drafts take a minute: the two admitted sessions are still running on the slowest machine
    stuck = LatencyModel(draft_base_s=60, draft_per_request_s=0, verify_base_s=60, verify_per_request_s=0,
                         step_base_s=60)
    cluster = Cluster(tmp_path, config(stuck, max_sessions=2, retry_after_s=3))
    coord = cluster.coordinator
    await coord.start()
    sids = [(await coord.create(sim(str(i))))["session_id"] for i in range(2)]
    with pytest.raises(Overloaded) as err:
        await coord.create(sim("3"))
    assert err.value.retry_after_s == 3 and "limit is 2" in err.value.message
    for sid in sids:
        await coord.cancel(sid)


async def test_a_burst_of_creates_admits_exactly_the_session_limit(tmp_path):
    """200 creates at once against max_sessions 50: each takes its slot before its first await."""
    coord = Cluster(tmp_path, config(max_sessions=50)).coordinator
    await coord.start()
    outcomes = await asyncio.gather(*(coord.create(sim(str(i % 50), trial=i)) for i in range(200)),
                                    return_exceptions=True)
    admitted = [o for o in outcomes if isinstance(o, dict)]
    assert len(admitted) == 50 and all(isinstance(o, Overloaded) for o in outcomes if not isinstance(o, dict))
    assert coord.stats()["sessions"]["running"] <= 50
    for sid in [o["session_id"] for o in admitted]:
        await coord.cancel(sid)


@pytest.mark.parametrize("req, error, text", [
    (dict(tool_source="nope", task_id="0", user="simulated"), BadRequest, "unknown tool source 'nope'"),
    (dict(tool_source="airline", task_id="999", user="simulated"), BadRequest, "not a airline task"),
    (dict(tool_source="airline", task_id="0", user="tau2"), BadRequest, "needs model engines"),
    (dict(tool_source="airline", task_id="0", user="client"), BadRequest, "opening message"),
    (dict(tool_source="app", message="hi", user="client"), BadRequest, "tau2 tool source"),
])
async def test_bad_sessions_are_refused_with_a_reason(tmp_path, req, error, text):
    coord = Cluster(tmp_path, config()).coordinator
    with pytest.raises(error, match=text):
        await coord.create(CreateSession(**req))


async def test_client_user_and_unknown_ids(tmp_path):
    coord = Cluster(tmp_path, config()).coordinator
    await coord.start()
    sid = (await coord.create(CreateSession(tool_source="airline", task_id="0", message="Hi, I need help")))["session_id"]
    with pytest.raises(NotFound, match="no pending tool call 'x'"):
        await coord.post_tool_result(sid, ToolResult(call_id="x", content="1"))
    with pytest.raises(NotFound):
        await coord.events("missing")
    with pytest.raises(BadRequest):
        await coord.events(sid, -1)
    sims = (await coord.create(sim("0")))["session_id"]
    with pytest.raises(Conflict, match="only client-user sessions take messages"):
        await coord.post_message(sims, UserMessage(text="hello"))
    for _ in range(40):  # the agent talks to the client; the client answers until the agent stops
        out = await coord.events(sid, 0, 0.2)
        if out["done"]:
            break
        if coord.sessions[sid].status == "waiting_user":
            await coord.post_message(sid, UserMessage(text="yes please", stop=False))
    await coord.cancel(sid)
    assert coord.sessions[sid].status in ("done", "cancelled")
    with pytest.raises(Conflict):
        await coord.post_message(sid, UserMessage(text="late"))


@pytest.mark.parametrize("trusted, overrides, effects", [
    (False, {}, {"peek": "write", "poke": "write"}),  # hints of an untrusted client are ignored
    (True, {}, {"peek": "read", "poke": "write"}),
    (True, {"peek": "write", "poke": "read"}, {"peek": "write", "poke": "read"}),  # overrides win
])
async def test_client_tools_follow_the_trust_rules(tmp_path, trusted, overrides, effects):
    cfg = config().model_copy(update={"tool_sources": {"app": ClientSource(trusted=trusted, overrides=overrides)}})
    coord = Cluster(tmp_path, cfg).coordinator
    tools = [ClientTool(name="peek", read_only=True), ClientTool(name="poke")]
    req = CreateSession(tool_source="app", message="hi", client_tools=tools)
    catalog = await coord.sources.catalog(req, coord.cfg.tool_sources["app"])
    assert {n: e.value for n, e in catalog.effects.items()} == effects
    assert catalog.effect("never_declared").value == "write"


async def test_two_coordinators_on_one_log_the_newer_fences_the_older_and_no_write_runs_twice(tmp_path):
    """Blue keeps running while green starts on the same log (a NewCluster upgrade, or a replica Serve
    thought dead): green takes the lease, blue has stopped before green reads the log (an ordering, not a
    timing: CI machines are slow), every session finishes on green, and no write runs twice."""
    cluster = Cluster(tmp_path, config(SLOW, lease_s=1.0))
    blue = cluster.coordinator
    await blue.start()
    sids = [(await blue.create(sim(str(i), trial=i)))["session_id"] for i in range(8)]
    await asyncio.sleep(0.5)
    green = cluster._new()
    blue_when_green_reads = []
    replay = green.log.replay
    green.log.replay = lambda: (blue_when_green_reads.append(blue.fenced), replay())[1]
    await green.start()  # waits out blue's lease before it reads the log
    assert blue_when_green_reads and blue_when_green_reads[0] and "taken over" in blue_when_green_reads[0]
    with pytest.raises(ServiceUnavailable, match="fenced"):
        await blue.events(sids[0])
    await finish(green, sids)
    assert all(green.sessions[s].status in ("done", "cancelled") for s in sids)
    assert sum(green.sessions[s].status == "done" for s in sids) >= 1
    assert max(cluster.tools.write_executions.values()) == 1
    assert green.stats()["log"]["epoch"] == blue.stats()["log"]["epoch"] + 1


async def test_a_corrupt_segment_costs_one_session_and_is_reported(tmp_path):
    cluster = Cluster(tmp_path, config())
    coord = cluster.coordinator
    await coord.start()
    sids = [(await coord.create(sim(str(i), trial=i)))["session_id"] for i in range(3)]
    await finish(coord, sids)
    store = cluster.store
    key = store.list("log/")[-1]
    store.put(key, store.get(key) + b'{"sid":"' + sids[0].encode() + b'","i":99999,"t":"commit","steps":[\xff\n'
              + b'{"sid":"' + sids[1].encode() + b'","i":99998,"t":"commit","steps":"not steps"}\n')  # wrong shape
    coord = await cluster.crash_and_restart()
    stats = coord.stats()
    broken = stats["log"]["broken_sessions"]
    assert set(broken) == {sids[0], sids[1]} and stats["log"]["problems"] == 1
    assert key in broken[sids[0]] and "line" in broken[sids[0]]
    assert "restore failed: ValidationError" in broken[sids[1]] and "steps" in broken[sids[1]]
    with pytest.raises(NotFound, match="could not be restored"):
        await coord.trajectory(sids[0])
    assert (await coord.trajectory(sids[2]))["status"] == "done"
    new = (await coord.create(sim("5")))["session_id"]  # and it serves
    await finish(coord, [new])


class RefusingStore:
    """The session log's store while it refuses every new segment (an outage of its writes)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def create(self, key, data):
        raise StoreError(f"injected outage: cannot create {key}")


async def test_create_and_messages_are_answered_only_once_their_records_are_stored(tmp_path):
    cluster = Cluster(tmp_path, config(ack_timeout_s=0.5))
    coord = cluster.coordinator
    await coord.start()
    healthy = coord.log.store
    coord.log.store = RefusingStore(healthy)
    with pytest.raises(ServiceUnavailable, match="not acknowledged"):
        await coord.create(sim("0"))
    assert coord.stats()["sessions"]["running"] == 0  # ended unstarted, not left running
    coord.log.store = healthy
    out = await coord.create(CreateSession(tool_source="airline", task_id="0", message="Hi, I need help"))
    sid = out["session_id"]
    assert any(r["t"] == "created" for r in coord.log.replay().sessions[sid])  # stored before the answer
    for _ in range(100):
        if coord.sessions[sid].status == "waiting_user":
            break
        await asyncio.sleep(0.02)
    coord.log.store = RefusingStore(healthy)
    with pytest.raises(ServiceUnavailable, match="stays queued"):
        await coord.post_message(sid, UserMessage(text="please cancel it"))
    coord.log.store = healthy
    for _ in range(100):  # the flusher keeps trying: the queued message is stored once the store is back
        texts = [r.get("text") for r in coord.log.replay().sessions[sid] if r["t"] == "user_message"]
        if texts:
            break
        await asyncio.sleep(0.05)
    assert texts == ["please cancel it"]
    await coord.cancel(sid)


async def test_every_stored_record_is_one_typed_kind_and_restore_rebuilds_the_same_session(tmp_path):
    cluster = Cluster(tmp_path, config())
    coord = cluster.coordinator
    await coord.start()
    sids = [(await coord.create(sim(t, trial=1)))["session_id"] for t in WRITING_TASKS]
    await finish(coord, sids)
    kinds = set()
    for sid, records in coord.log.replay().sessions.items():
        for r in records:
            assert parse(r).data() == r, r  # the JSON form is exactly the typed record's
            kinds.add(r["t"])
    assert {"created", "agent_message", "user_message", "drafted", "staged", "accepted", "intent", "result",
            "tool_result", "commit", "final"} <= kinds
    before = {sid: coord.sessions[sid] for sid in sids}
    coord = await cluster.crash_and_restart()
    for sid, a in before.items():
        b = coord.sessions[sid]
        assert (b.steps, b.status, b.termination, b.committed_keys, b.intents, b.ledger.calls) == \
               (a.steps, a.status, a.termination, a.committed_keys, a.intents, a.ledger.calls)
        assert b.events == a.events


async def test_owners_and_idempotency_keys_survive_a_restart(tmp_path):
    """A create retried after the coordinator died answers with the first session, and the session is
    still its owner's alone (both come back from the ``created`` record)."""
    cluster = Cluster(tmp_path, config())
    coord = cluster.coordinator
    await coord.start()
    req = CreateSession(tool_source="airline", task_id="0", user="client", message="hi")
    sid = (await coord.create(req, owner="key-a", idempotency_key="op-1"))["session_id"]
    await coord.post_message(sid, UserMessage(text="my id is 42"), owner="key-a", idempotency_key="m-1")
    coord = await cluster.crash_and_restart()
    assert (await coord.create(req, owner="key-a", idempotency_key="op-1"))["session_id"] == sid
    assert (await coord.create(req, owner="key-b", idempotency_key="op-1"))["session_id"] != sid
    with pytest.raises(Conflict, match="different message"):
        await coord.post_message(sid, UserMessage(text="my id is 43"), owner="key-a", idempotency_key="m-1")
    with pytest.raises(NotFound, match="no session"):
        await coord.trajectory(sid, owner="key-b")
    assert (await coord.trajectory(sid, owner="key-a"))["session_id"] == sid


async def telecom_sessions(tmp_path, cfg: AppConfig, user_calls: int):
    """8 simulated telecom sessions, started, on tasks whose gold has the user act at least ``user_calls`` times."""
    from specagent_ray.tools.tau2 import Tau2Domain

    telecom = Tau2Domain.load("telecom")
    tasks = [t for t in telecom.base
             if sum(a.requestor == "user" for a in telecom.tasks[t].evaluation_criteria.actions) >= user_calls][:8]
    data = cfg.model_dump()
    data["tool_sources"] = {"telecom": {"kind": "tau2", "domain": "telecom"}}
    cluster = Cluster(tmp_path, AppConfig.model_validate(data))
    await cluster.coordinator.start()
    sids = [(await cluster.coordinator.create(CreateSession(tool_source="telecom", task_id=t, user="simulated",
                                                            trial=i)))["session_id"] for i, t in enumerate(tasks)]
    return telecom, tasks, cluster, sids


async def test_telecom_users_run_their_own_tools_once_and_are_graded_with_them(tmp_path):
    telecom, tasks, cluster, sids = await telecom_sessions(tmp_path, config(), user_calls=1)
    coord = cluster.coordinator
    await finish(coord, sids)
    user_keys = {k: n for k, n in cluster.tools.write_executions.items() if k.split(":")[-1].startswith("u")}
    assert user_keys and max(user_keys.values()) == 1  # no user-side call ran twice
    rewards = []
    for sid in sids:
        out = await coord.trajectory(sid, grade=True)
        assert out["status"] == "done"
        graded = [u for s in out["steps"] if s["observation"] for u in s["observation"].get("user_calls", [])]
        assert len(graded) == sum(k.startswith(sid + ":u") for k in user_keys)  # graded = what ran
        assert all(s["action"].get("name") not in telecom.user_tool_schemas for s in out["steps"])  # agent never did
        rewards.append(out["reward"])
    assert 1.0 in rewards  # the user's calls reach tau2's grader: without them no telecom task here passes
    from dataclasses import replace as swap

    s = coord.sessions[sids[rewards.index(1.0)]]  # a record the tau2 world disagrees with: no 500, a reason
    i = next(i for i, st in enumerate(s.steps) if st.observation and st.observation.user_calls)
    u = s.steps[i].observation.user_calls[0]
    s.steps[i] = swap(s.steps[i], observation=swap(s.steps[i].observation, user_calls=(swap(u, content="forged"),)))
    s.reward = None
    out = await coord.trajectory(s.id, grade=True)
    assert out["reward"] is None and "could not replay" in out["grade_error"]


async def test_telecom_users_never_run_a_call_twice_across_a_coordinator_crash(tmp_path):
    telecom, tasks, cluster, sids = await telecom_sessions(tmp_path, config(SLOW), user_calls=2)
    coord = cluster.coordinator
    for _ in range(200):  # crash once some user has acted on their phone
        if any(k.split(":")[-1].startswith("u") for k in cluster.tools.write_executions):
            break
        await asyncio.sleep(0.05)
    coord = await cluster.crash_and_restart()
    await finish(coord, sids)
    assert all(coord.sessions[s].status == "done" for s in sids)
    user_keys = {k: n for k, n in cluster.tools.write_executions.items() if k.split(":")[-1].startswith("u")}
    assert user_keys and max(user_keys.values()) == 1
    from specagent_ray.sim.gold import user_requests

    for sid, task in zip(sids, tasks):  # nor again under a new key: at most the calls the task asks for
        assert sum(k.startswith(sid + ":") for k in user_keys) <= len(user_requests(telecom, task))


def test_a_users_call_keeps_its_key_until_its_reply_is_committed_and_then_gets_a_new_one(tmp_path):
    from specagent_ray.protocol.types import (
        Action,
        Effect,
        Observation,
        Step,
        ToolCall,
        UserToolCall,
    )

    coord = Cluster(tmp_path, config()).coordinator
    s = coord._session("s1", sim(), None, "local", None)
    toggle, reboot = ToolCall("toggle_airplane_mode", {}), ToolCall("reboot_device", {})
    first = s.user_call_key(toggle)
    s.steps.append(Step(Action.tool("get_data_usage", customer_id="C1"), Observation("ok"), "weak", Effect.READ))
    assert s.user_call_key(toggle) == first  # an extra committed read (a re-drafted block) changes nothing
    assert s.user_call_key(reboot) != first
    reply = Observation("Done.", user_calls=(UserToolCall(toggle, "Airplane mode is OFF"),))
    s.steps.append(Step(Action.message("Please toggle airplane mode."), reply, "weak", Effect.WRITE))
    assert s.user_call_key(toggle) not in (first, s.user_call_key(reboot))  # asked again later: a new run


async def test_bfcl_sessions_run_on_their_own_backends_resume_after_a_crash_and_grade(tmp_path):
    cfg = config(SLOW).model_dump()
    cfg["tool_sources"] = {"files": {"kind": "bfcl", "category": "base"}}
    cluster = Cluster(tmp_path, AppConfig.model_validate(cfg))
    coord = cluster.coordinator
    await coord.start()
    cases = [f"multi_turn_base_{i}" for i in range(8)]
    sids = [(await coord.create(CreateSession(tool_source="files", task_id=c, user="simulated", trial=i)))["session_id"]
            for i, c in enumerate(cases)]
    with pytest.raises(BadRequest, match="not a BFCL base case"):
        await coord.create(CreateSession(tool_source="files", task_id="multi_turn_base_9999", user="simulated"))
    for _ in range(200):  # crash once some turn was answered
        if any(e["t"] == "commit" for sid in sids for e in coord.sessions[sid].events):
            break
        await asyncio.sleep(0.05)
    coord = await cluster.crash_and_restart()
    await finish(coord, sids)
    assert max(cluster.tools.write_executions.values()) == 1  # no write ran twice
    rewards = []
    for sid, case in zip(sids, cases):
        out = await coord.trajectory(sid, grade=True)
        # A simulated agent may stop early (its seeded premature stop, drawn at a state that depends on
        # where the crash fell); every session still ends, and no turn is answered twice.
        assert out["status"] == "done" and out["termination"] in ("user_stop", "agent_stop"), out
        messages = sum(s["action"]["kind"] == "message" for s in out["steps"])
        turns = len(load_cases("base")[case].turns)
        assert messages == turns if out["termination"] == "user_stop" else messages <= turns, (messages, turns)
        rewards.append(out["reward"])
    assert 1.0 in rewards  # graded by BFCL's checker


@pytest.fixture
def without_bfcl(monkeypatch):
    """BFCL's package as a newcomer's venv has it: not installed (importing it fails as it would)."""
    from specagent_ray.tools.bfcl import load_cases

    load_cases.cache_clear()
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)
    yield
    load_cases.cache_clear()


async def test_without_bfcls_package_only_the_bfcl_source_is_unavailable(tmp_path, without_bfcl, caplog):
    cfg = config().model_dump()
    cfg["tool_sources"] = {**cfg["tool_sources"], "files": {"kind": "bfcl", "category": "base"},
                           "git": {"kind": "mcp", "command": ["no-such-mcp-server", "--repo", "secret-path"]}}
    cluster = Cluster(tmp_path, AppConfig.model_validate(cfg))
    cluster.tools.warm()  # the tool host starts, with one line naming each missing part
    coord = cluster.coordinator
    await coord.start()  # and so does the coordinator
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("'files'" in m and "pip install --no-deps bfcl-eval==" in m for m in lines), lines
    assert any("'git'" in m and "'no-such-mcp-server'" in m and "not on PATH" in m for m in lines), lines
    with pytest.raises(Conflict, match="'files' is unavailable.*pip install --no-deps bfcl-eval"):
        await coord.create(CreateSession(tool_source="files", task_id="multi_turn_base_0", user="simulated"))
    with pytest.raises(Conflict, match="'git' is unavailable") as refused:
        await coord.create(CreateSession(tool_source="git", user="client", message="status?"))
    assert "no-such-mcp-server" not in refused.value.message and "secret-path" not in refused.value.message
    sid = (await coord.create(sim("0")))["session_id"]  # the other sources serve as before
    assert (await finish(coord, [sid]))[0]["done"]


async def test_a_served_exact_ablation_asks_the_same_judge_for_exact_steps_only(tmp_path):
    """The served ``specagent-exact`` changes the verifier's criterion, as the bench's does: its verifies
    reach the verifier replica marked ``exact`` (specagent's stay ``semantic``), and the strong engine is
    not asked for a step per drafted position."""
    cluster = Cluster(tmp_path, config().model_copy(update={"methods": ("specagent", "specagent-exact")}))
    criteria, strong_steps = Counter(), Counter()
    verify, propose = cluster.verifier.verify_batch, cluster.verifier.propose_batch

    async def verify_spy(requests):  # the batch arrives as it crosses Ray: pickled (batch_wire.packed)
        criteria.update((r.session_id, r.criterion) for r in unpacked(requests))
        return await verify(requests)

    async def propose_spy(requests):
        strong_steps.update(r.session_id for r in unpacked(requests))
        return await propose(requests)

    cluster.verifier.verify_batch, cluster.verifier.propose_batch = verify_spy, propose_spy
    coord = cluster.coordinator
    await coord.start()
    exact = [(await coord.create(sim(t, method="specagent-exact")))["session_id"] for t in WRITING_TASKS]
    semantic = (await coord.create(sim("7", method="specagent")))["session_id"]
    await finish(coord, [*exact, semantic])
    assert {c for (sid, c) in criteria if sid in exact} == {"exact"}
    assert {c for (sid, c) in criteria if sid == semantic} == {"semantic"}
    verifies = sum(n for (sid, _), n in criteria.items() if sid in exact)
    assert sum(strong_steps[s] for s in exact) < verifies  # repairs only, not a strong step per position
    assert max(cluster.tools.write_executions.values()) == 1


async def test_model_engines_judge_the_exact_ablation_with_the_same_verifier_prompt():
    """On OpenAI-compatible engines the served verifier switches its criterion too: the same prompt up
    to the closing instruction, which accepts only the reviewer's own exact steps."""
    import contextlib
    import types

    from specagent_ray.models.backend import Completion
    from specagent_ray.protocol.interfaces import JudgeWithCriteria
    from specagent_ray.protocol.types import Action, Effect, History, Step, Task, Usage
    from specagent_ray.serve.core.catalog import Catalog
    from specagent_ray.serve.core.config import CoordinatorConfig, Endpoint, OpenAIEngines
    from specagent_ray.serve.engines.engine_client import OpenAIEngineClient

    class Backend:
        def __init__(self):
            self.requests = []

        async def complete(self, messages, json_schema, max_tokens, temperature=0.0, headers=None, priority=None):
            self.requests.append(messages)
            return Completion('{"accepted_prefix": 1, "reason": "", "repair": null}', Usage(10, 0, 5), "stop", "v")

    engines = OpenAIEngines(drafter=Endpoint(url="http://127.0.0.1:9/v1", model="d"),
                            verifier=Endpoint(url="http://127.0.0.1:9/v1", model="v"))
    client = OpenAIEngineClient(engines, CoordinatorConfig(batch_window_ms=1), {})
    client.verifier = Backend()  # what the verifier endpoint is asked
    session = types.SimpleNamespace(id="s1", outside=contextlib.nullcontext, request=types.SimpleNamespace(instructions=None, context=None))
    catalog = Catalog({"lookup": {"type": "object", "properties": {}}}, {"lookup": Effect.READ}, "Be careful.")
    _, _, judge = client.models(session, catalog)  # type: ignore[arg-type]
    assert isinstance(judge, JudgeWithCriteria)
    block = [Step(Action.tool("lookup"), None, "weak", Effect.READ)]
    for verifier in (judge, judge.by_exact_match()):
        assert (await verifier.verify(History(Task("t", "hi")), block)).verdict.accepted_prefix == 1
    semantic, exact = client.verifier.requests
    assert semantic[:-1] == exact[:-1]
    assert "need not be the action you would have chosen" in semantic[-1]["content"]
    assert "only if it is exactly the action you would have chosen" in exact[-1]["content"]
    assert semantic[0]["content"].startswith("You are a customer service agent")  # no instructions: the default
    client.verifier = Backend()
    told = types.SimpleNamespace(id="s2", outside=contextlib.nullcontext,
                                 request=types.SimpleNamespace(instructions="You are a careful bank teller.", context=None))
    _, _, judge = client.models(told, catalog)  # type: ignore[arg-type]
    await judge.verify(History(Task("t", "hi")), block)
    system = client.verifier.requests[0][0]["content"]
    assert system.startswith("You are a careful bank teller.") and "customer service" not in system


async def test_a_table_of_k0_makes_every_served_step_the_strong_models_own(tmp_path):
    """speculation.mode table mapping every load to K = 0: each block's step is written by the strong model,
    nothing is drafted or verified, and /v1/stats counts the choices."""
    cfg = config().model_copy(update={"speculation": SpeculationConfig(mode="table", table=((1e9, 0),))})
    cluster = Cluster(tmp_path, cfg)
    coord = cluster.coordinator
    await coord.start()
    sids = [(await coord.create(sim(t)))["session_id"] for t in WRITING_TASKS]
    await finish(coord, sids)
    steps = [x for sid in sids for x in coord.sessions[sid].steps]
    assert steps and {x.author for x in steps} == {"strong"}
    purposes = {c.purpose for sid in sids for c in coord.sessions[sid].ledger.calls}
    assert purposes == {"step"}
    assert coord.stats()["speculation"] == {"mode": "table", "chosen_k": {"0": len(steps)}}


async def test_adaptive_k_follows_the_engines_load(tmp_path):
    """Past the planner's GPU-seconds crossover the adaptive controller lets the strong model write; with the
    sessions actually running (a few), it drafts."""
    cfg = config().model_copy(update={"speculation": SpeculationConfig(mode="adaptive")})
    cluster = Cluster(tmp_path, cfg)
    coord = cluster.coordinator
    await coord.start()
    sizes = coord.runner.block_sizes
    real = sizes.load
    assert real().sessions == 0
    sizes.load = lambda: Load(100_000, 256, 8)  # as if the engines served a hundred thousand sessions
    busy = (await coord.create(sim("0")))["session_id"]
    await finish(coord, [busy])
    sizes.load = real
    idle = (await coord.create(sim("0", trial=1)))["session_id"]
    await finish(coord, [idle])
    by_author = {sid: Counter(x.author for x in coord.sessions[sid].steps) for sid in (busy, idle)}
    assert set(by_author[busy]) == {"strong"} and by_author[idle]["weak"] > 0
    chosen = coord.stats()["speculation"]["chosen_k"]
    assert chosen["0"] >= sum(by_author[busy].values()) and any(int(k) > 0 for k in chosen)


def test_the_sessions_of_one_coordinator_choose_k_apart():
    """Adaptive K is each session's own: a session whose drafts all pass keeps drafting beside many whose
    drafts all fail, and they stop."""
    from specagent_ray.protocol.types import (
        Action,
        Effect,
        History,
        Observation,
        Step,
        Task,
    )
    from specagent_ray.serve.sessions.block_sizes import BlockSizes

    sizes = BlockSizes(SpeculationConfig(mode="adaptive"), config().hardware, 6, lambda: Load(1))
    good, bad = sizes.for_session(), sizes.for_session()
    read = Step(Action.tool("find"), Observation("ok"), "weak", Effect.READ)
    write = Step(Action.tool("book"), None, "weak", Effect.WRITE)
    for _ in range(10):
        good.drafted([read, write], True)
        good.reviewed([read, write], 2, False)
    for _ in range(200):  # a write first, and rejected
        bad.drafted([write], True)
        bad.reviewed([write], 0, True)
    h = History(Task("t", "x"))
    assert good.next_k(h) > 0 and bad.next_k(h) == 0
    assert sizes.stats()["chosen_k"]["0"] == 1


def test_the_load_counts_every_shards_sessions_and_requests_per_replica():
    from specagent_ray.serve.engines.priority import ProgramPriority
    from specagent_ray.serve.sessions.block_sizes import engine_load

    priority = ProgramPriority()
    priority.in_flight.update(strong=6, weak=3)
    assert engine_load(priority, lambda: 5, 2, (4, 3))() == Load(10, 3.0, 2.0)


def test_a_roofline_call_alone_takes_what_the_cost_model_says_and_slows_beside_others():
    """Continuous batching: a call's decode passes run at the batch of the moment."""
    from specagent_ray.costs.planner import CallShape, call_at_batch
    from specagent_ray.serve.engines.sim_roofline import Roofline, _Call

    class Done:
        def __init__(self):
            self.is_done = False

        def done(self):
            return self.is_done

        def set_result(self, _):
            self.is_done = True

    def run(n: int, shape: CallShape) -> float:
        roof = Roofline("verifier", Hardware())
        roof.calls = [_Call(roof.prefill_s(shape), shape.decode, shape.prompt, Done()) for _ in range(n)]
        elapsed, dt = 0.0, 0.01
        while not roof.calls[0].done.done():
            roof.advance(dt)
            elapsed += dt
        return elapsed

    shape, engine = CallShape(6000, 3000, 300), Roofline("verifier", Hardware()).engine
    alone, crowded = run(1, shape), run(16, shape)
    assert alone == pytest.approx(call_at_batch(engine, shape, 1).latency_s, rel=0.02)
    assert crowded == pytest.approx(call_at_batch(engine, shape, 16).latency_s, rel=0.02)  # the planner's batch term
    assert crowded > 1.3 * alone  # sixteen sequences touch more experts and read more KV per pass


async def test_roofline_sim_engines_serve_and_meter_a_batch():
    from specagent_ray.serve.engines.batch_wire import SimRequest

    engine = SimEngine("verifier", SimEngines(latency=LatencyModel(model="roofline", time_scale=1e-3)))
    before = engine.meters()
    await engine.verify_batch([SimRequest("s0", "airline", "0", 0, ())])
    after = engine.meters()
    assert after["calls"] == before["calls"] + 1 and after["gpu_s"] > before["gpu_s"] and after["served"] == 1
    assert after["seq_s"] > 0 and engine.roofline.in_flight == 0 and not engine.roofline.calls


def test_the_roofline_meter_integrates_sequences_in_flight_over_time():
    from specagent_ray.serve.engines.sim_roofline import Roofline

    now = [0.0]
    roof = Roofline("verifier", Hardware(), clock=lambda: now[0])
    roof.enter(2)
    now[0] = 3.0
    roof.enter(1)
    now[0] = 4.0
    roof.leave(3)
    now[0] = 10.0
    assert roof.read()["seq_s"] == 2 * 3 + 3 * 1 and roof.in_flight == 0


async def test_a_roofline_replica_runs_at_most_its_batch_cap_and_queues_the_rest():
    from specagent_ray.serve.engines.batch_wire import SimRequest
    from specagent_ray.serve.engines.sim_roofline import Roofline

    roof = Roofline("verifier", Hardware(), time_scale=1e-4, tick_s=0.001)
    assert 1 < roof.cap < 10_000  # the KV next to 397B of weights on 16 GPUs
    roof._room = asyncio.Semaphore(2)
    seen = []
    advance = roof.advance
    roof.advance = lambda dt: (seen.append(roof.in_flight), advance(dt))
    await roof.serve("verify", [SimRequest(f"s{i}", "airline", "0", 0, ()) for i in range(5)])
    assert max(seen) == 2 and roof.meter["calls"] == 5 and roof.in_flight == 0


async def test_usage_by_tenant_is_the_sum_of_its_sessions_reports_and_survives_a_restart(tmp_path):
    """From the session log: archives (after a compaction), the snapshot and the segments after it."""
    cluster = Cluster(tmp_path, config())
    coord = cluster.coordinator
    await coord.start()
    made = {owner: [(await coord.create(sim(t, trial=i), owner=owner))["session_id"] for i, t in enumerate(tasks)]
            for owner, tasks in (("acme", ("0", "7", "9")), ("globex", ("14",)))}
    for owner, sids in made.items():
        await finish(coord, sids, owner=owner)
    await coord.log.compact()  # the finished sessions move to the archive
    late = (await coord.create(sim("1"), owner="acme"))["session_id"]
    await finish(coord, [late], owner="acme")
    made["acme"].append(late)
    expected = {}
    for owner, sids in made.items():
        reports = [(await coord.trajectory(sid, owner=owner))["resources"] for sid in sids]
        expected[owner] = {"gpu_seconds": sum(r["gpu_seconds"] for r in reports),
                           "strong_hbm_bytes": sum(r["hbm_bytes_by_role"].get("strong", 0) for r in reports),
                           "strong_prompt": sum(r["tokens"]["strong"]["prompt"] for r in reports),
                           "sessions_done": len(sids)}

    def totals(usage):
        out = {}
        for owner, days in usage.items():
            out[owner] = {"gpu_seconds": sum(d["gpu_seconds"] for d in days.values()),
                          "strong_hbm_bytes": sum(d["strong_hbm_bytes"] for d in days.values()),
                          "strong_prompt": sum(d["tokens"]["strong"]["prompt"] for d in days.values()),
                          "sessions_done": sum(d.get("sessions_done", 0) for d in days.values())}
        return out

    def same(a, b):
        return a.keys() == b.keys() and all(a[o][k] == pytest.approx(b[o][k], rel=1e-9) for o in a for k in a[o])

    usage = await coord.usage()
    assert same(totals(usage), expected)
    assert set(await coord.usage("globex")) == {"globex"} and await coord.usage(since="2999-01-01") == {}
    restarted = await cluster.crash_and_restart()
    assert same(totals(await restarted.usage()), expected)


async def test_engine_batches_cross_as_bytes_and_each_request_arrives_whole(tmp_path):
    """The coordinator pickles a batch itself (Ray then carries bytes); the replica reads back every
    request with its whole history."""
    cluster = Cluster(tmp_path, config())
    seen: list = []
    real = cluster.drafter.propose_batch

    async def spy(requests):
        assert isinstance(requests, bytes)
        seen.extend(unpacked(requests))
        return await real(requests)

    cluster.drafter.propose_batch = spy
    coord = cluster.coordinator
    await coord.start()
    sid = (await coord.create(sim("3")))["session_id"]
    await finish(coord, [sid])
    committed = coord.sessions[sid].steps
    assert seen and max(len(r.steps) for r in seen) > 0
    assert all(tuple(r.steps) == tuple(committed[:len(r.steps)]) for r in seen)  # each a prefix of H, whole
