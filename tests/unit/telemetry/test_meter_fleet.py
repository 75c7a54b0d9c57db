"""The meter fleet over node meters that read a scripted NVML: placement, two tenants, a failing node, a
meter that dies and comes back, and the coordinator's span sink."""

from __future__ import annotations

import asyncio
import logging

import pytest

from specagent_ray.costs.ledger import Ledger
from specagent_ray.protocol.interfaces import CallRecord
from specagent_ray.protocol.types import Usage
from specagent_ray.serve.sessions.meter_spans import SpanSink
from specagent_ray.telemetry.fleet import MeterFleet
from specagent_ray.telemetry.meter_book import day_of
from specagent_ray.telemetry.node_meter import NodeMeter, nvml_api
from specagent_ray.testing.fake_nvml import ScriptedNvml


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def node_meter(clock: Clock, **nvml_args) -> NodeMeter:
    return NodeMeter("specagent_ray.testing.fake_nvml:ScriptedNvml", {"clock": clock, **nvml_args}, 0.1, clock,
                     autostart=False)


def run(step) -> None:
    asyncio.run(step)


def test_nvml_api_names_the_real_one_or_a_factory() -> None:
    assert type(nvml_api()).__name__ == "PynvmlApi"
    assert isinstance(nvml_api("specagent_ray.testing.fake_nvml:ScriptedNvml", {"peak_bandwidth": 1.0}), ScriptedNvml)
    with pytest.raises(ValueError, match="module:factory"):
        nvml_api("specagent_ray.testing.fake_nvml")


def test_a_node_meter_samples_each_roles_own_devices() -> None:
    clock = Clock()
    meter = node_meter(clock, devices=[[[0, 100, 50]], [[0, 20, 10]], [[0, 60, 0]]])
    meter.assign("strong", [0, 1])
    meter.assign("weak", [2])
    for _ in range(11):
        meter.sample_once()
        clock.t += 0.1
    got = meter.drain()
    assert got["strong"]["reason"] is None and got["strong"]["devices"] == [0, 1]
    assert sum(w[2] for w in got["strong"]["windows"]) == pytest.approx(1.2 * 1.0)  # (100 % + 20 %) x 1 s
    assert sum(w[2] for w in got["weak"]["windows"]) == pytest.approx(0.6)
    assert meter.drain()["weak"]["windows"] == []  # drained once


def test_a_node_without_a_driver_says_why_and_does_not_raise(caplog) -> None:
    meter = node_meter(Clock(), fail="NVML_ERROR_DRIVER_NOT_LOADED")
    with caplog.at_level(logging.WARNING):
        meter.assign("strong", [0])
        meter.sample_once()
    assert "DriverNotLoaded" in meter.drain()["strong"]["reason"]
    assert sum("ESTIMATED" in r.message for r in caplog.records) == 1


class Node:
    """A fleet's view of one node: a local NodeMeter the test can kill."""

    def __init__(self, meter: NodeMeter):
        self.meter, self.dead = meter, False

    def __getattr__(self, name):
        if self.__dict__.get("dead"):
            raise ConnectionError("actor died")
        return getattr(self.meter, name)


def fleet_on(clock: Clock, scripts: dict[str, dict]) -> tuple[MeterFleet, dict[str, list[Node]]]:
    spawned: dict[str, list[Node]] = {}

    def spawn(node: str) -> Node:
        spawned.setdefault(node, []).append(Node(node_meter(clock, **scripts[node])))
        return spawned[node][-1]
    return MeterFleet(spawn, seal_after_s=5.0, ttl_s=10.0, clock=clock), spawned


def tick(fleet: MeterFleet, spawned: dict[str, list[Node]], clock: Clock, seconds: float) -> None:
    for _ in range(int(round(seconds / 0.1))):
        for nodes in spawned.values():
            if not nodes[-1].dead:
                nodes[-1].meter.sample_once()
        clock.t += 0.1
    run(fleet.poll())


def test_two_tenants_on_two_nodes_share_the_strong_role_and_conservation_holds() -> None:
    clock = Clock()
    busy = {"devices": [[[0, 80, 40]]] * 2}
    fleet, spawned = fleet_on(clock, {"a": busy, "b": busy})
    fleet.placement("strong", "a", [0, 1])
    fleet.placement("strong", "b", [0, 1])
    run(fleet.poll())  # meters start
    tick(fleet, spawned, clock, 0.1)  # the samplers prime
    start = clock.t
    fleet.spans("strong", [("t1", "s1", start, start + 2.0, 300), ("t2", "s2", start, start + 2.0, 100)])
    tick(fleet, spawned, clock, 2.0)
    tick(fleet, spawned, clock, 1.0)  # a second with no call: unattributed
    usage = fleet.book.tenant_usage()
    day = day_of(start)
    t1, t2 = usage["t1"][day]["strong"]["gpu_seconds"], usage["t2"][day]["strong"]["gpu_seconds"]
    assert t1 == pytest.approx(3 * t2)
    totals = fleet.stats()["roles"]["strong"]
    assert t1 + t2 == pytest.approx(2 * 2 * 0.8 * 2.0, rel=0.01)  # 2 nodes x 2 devices x 80 % x 2 s
    assert totals["charged"]["gpu_seconds"] + totals["unattributed"]["gpu_seconds"] == \
        pytest.approx(totals["measured"]["gpu_seconds"], rel=1e-9)
    assert totals["unattributed"]["gpu_seconds"] > 0


def test_a_failing_node_leaves_its_role_estimated_and_the_other_measured() -> None:
    clock = Clock()
    fleet, spawned = fleet_on(clock, {"a": {}, "b": {"fail": "NVML_ERROR_DRIVER_NOT_LOADED"}})
    fleet.placement("weak", "a", [0])
    fleet.placement("strong", "b", [0, 1])
    run(fleet.poll())
    tick(fleet, spawned, clock, 0.1)
    fleet.spans("weak", [("t1", "s1", clock.t, clock.t + 1, 10)])
    fleet.spans("strong", [("t1", "s1", clock.t, clock.t + 1, 10)])
    tick(fleet, spawned, clock, 1.0)
    assert set(fleet.book.session("s1")) == {"weak"}
    assert "DriverNotLoaded" in fleet.stats()["roles"]["strong"]["state"]


def test_a_meter_that_dies_is_started_again_and_its_gap_is_not_invented() -> None:
    clock = Clock()
    fleet, spawned = fleet_on(clock, {"a": {"devices": [[[0, 50, 10]]]}})
    fleet.placement("strong", "a", [0])
    run(fleet.poll())
    tick(fleet, spawned, clock, 1.1)
    spawned["a"][-1].dead = True
    tick(fleet, spawned, clock, 1.0)  # this second is lost with the meter
    assert fleet.restarts == 1 and "restarting" in fleet.stats()["roles"]["strong"]["state"]
    fleet.placement("strong", "a", [0])
    run(fleet.poll())  # a new meter
    tick(fleet, spawned, clock, 1.1)
    assert len(spawned["a"]) == 2 and fleet.stats()["roles"]["strong"]["state"] == "measured"
    measured = fleet.stats()["roles"]["strong"]["measured"]["gpu_seconds"]
    assert measured == pytest.approx(0.5 * 2.0, rel=0.01)  # two measured seconds, not three


def test_a_placement_not_renewed_is_forgotten_and_its_meter_stopped() -> None:
    clock = Clock()
    fleet, spawned = fleet_on(clock, {"a": {}})
    fleet.placement("weak", "a", [0])
    run(fleet.poll())
    clock.t += 11
    run(fleet.poll())
    assert fleet.meters == {} and fleet.book.state("weak") is not None
    assert spawned["a"][0].meter.samplers == {}


def test_the_span_sink_sends_each_call_once_and_keeps_them_when_the_meter_is_down() -> None:
    sent: list[tuple[str, list]] = []
    down = [True]

    async def send(role: str, rows: list) -> None:
        if down[0]:
            raise ConnectionError("meter restarting")
        sent.append((role, rows))
    sink = SpanSink(send, 0.5, wall=lambda: 100.0)
    ledger = Ledger(on_record=sink.on_call("t1", "s1"))
    ledger.record(CallRecord("strong", "verify", Usage(prompt_tokens=100, cached_prompt_tokens=60, decode_tokens=5), 0.25))
    run(sink.push())
    assert sent == [] and len(sink.held["strong"]) == 1
    down[0] = False
    run(sink.push())
    run(sink.push())
    assert sent == [("strong", [("t1", "s1", 99.75, 100.0, 45)])]
    assert sink.sent == 1 and sink.dropped == 0


def test_restored_calls_are_not_sent_again() -> None:
    """A restarted coordinator hooks a session's ledger to the meter, then replays its records
    (``Coordinator._session``, then ``Session.restore``): the replayed calls were sent by the coordinator
    that made them, so they rebuild the ledger without reaching the meter again; new calls do reach it."""
    from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier
    from specagent_ray.protocol import Action, Effect, Parts, SpecConfig, Task, run_specagent
    from specagent_ray.protocol.types import Observation
    from specagent_ray.serve.core.api import CreateSession
    from specagent_ray.serve.core.catalog import Catalog
    from specagent_ray.serve.sessions.runner import SessionTools
    from specagent_ray.serve.sessions.session import Session

    catalog = Catalog({"lookup": {"type": "object"}, "note": {"type": "object"}},
                      {"lookup": Effect.READ, "note": Effect.WRITE})
    request = CreateSession(tool_source="bank", user="client", message="hi")

    def session(records: list[dict], sink: SpanSink) -> Session:
        s = Session("s1", request, Task("0", "hi"), log=lambda sid, rec, data: records.append(data))
        s.ledger.on_record = sink.on_call("t1", "s1")  # as the coordinator hooks every session it makes
        return s

    async def tool(call, key):
        return Observation("ok")

    async def durable():
        return None

    async def first_life(sink: SpanSink, records: list[dict]) -> Session:
        s = session(records, sink)
        weak = [Action.tool("lookup", id="a"), Action.tool("note", id="a"), Action.stop()]
        parts = Parts(ScriptedPolicy(weak), ScriptedPolicy([]), ScriptedVerifier([]), SessionTools(s, catalog, tool,
                      durable), ScriptedUser(), s.ledger, journal=s)
        await run_specagent(s.task, parts, SpecConfig(k=3))
        return s

    records: list[dict] = []
    before, after = SpanSink(lambda role, rows: None, 0.5, wall=lambda: 100.0), \
        SpanSink(lambda role, rows: None, 0.5, wall=lambda: 200.0)
    made = asyncio.run(first_life(before, records)).ledger.calls
    assert len(made) >= 3 and sum(map(len, before.held.values())) == len(made)  # each sent once, as it was made
    assert any(r["t"] in ("commit", "calls") and r.get("calls") for r in records)  # the log holds the calls

    again = session([], after)
    again.restore(records)
    assert [(c.role, c.purpose) for c in again.ledger.calls] == [(c.role, c.purpose) for c in made]  # rebuilt
    assert sum(map(len, after.held.values())) == 0  # and not sent again
    again.ledger.record(CallRecord("weak", "draft", Usage(prompt_tokens=10, decode_tokens=2), 0.5))
    assert after.held["weak"] == [("t1", "s1", 199.5, 200.0, 12)]  # a new call still is


def test_a_device_two_roles_hold_is_not_split_by_role_so_both_are_estimated() -> None:
    clock = Clock()
    fleet, spawned = fleet_on(clock, {"a": {"devices": [[[0, 50, 10]]] * 3}})
    fleet.placement("weak", "a", [0, 1])
    fleet.placement("strong", "a", [1, 2])
    fleet.placement("strong", "b", [])  # a CPU engine: nothing to meter, no meter started
    run(fleet.poll())
    tick(fleet, spawned, clock, 0.5)
    assert "shared" in fleet.book.state("weak") and "shared" in fleet.book.state("strong")
    assert set(spawned) == {"a"}


def test_engine_workers_report_their_node_and_nvml_index() -> None:
    import ray

    from specagent_ray.serve.engines.gpu_placement import by_node, gpu_placement

    node = "n" * 56
    original = ray.get_runtime_context
    ray.get_runtime_context = lambda: type("Ctx", (), {"get_node_id": lambda self: node})()
    try:
        assert gpu_placement("3,5", 1) == (node, 5)  # Ray gave this worker GPUs 3 and 5; it uses the second
        assert gpu_placement("", 2) == (node, 2)
        assert gpu_placement("GPU-8f2e,GPU-11aa", 0) is None  # UUIDs: not resolved, left unmetered
    finally:
        ray.get_runtime_context = original
    assert by_node([("a", 3), ("b", 0), ("a", 1), None, ("a", 3)]) == {"a": [1, 3], "b": [0]}


def test_a_meter_that_never_answers_costs_a_report_its_measurement_not_its_answer(monkeypatch) -> None:
    from specagent_ray.serve.sessions import meter_spans
    from specagent_ray.serve.sessions.meter_spans import MeterLink

    monkeypatch.setattr(meter_spans, "ANSWER_S", 0.05)

    class Hung:
        async def session(self, sid):
            await asyncio.sleep(3600)

        async def spans(self, role, rows):
            await asyncio.sleep(3600)

    async def main():
        link = MeterLink(Hung(), 0.5, wall=lambda: 100.0)
        link.sink.held["weak"].append(("t1", "s1", 99.0, 100.0, 5))
        await link.sink.push()  # kept for the next push, not waited on forever
        return await link.measured("s1"), link.sink.held["weak"]
    measured, held = asyncio.run(main())
    assert measured is None and held == [("t1", "s1", 99.0, 100.0, 5)]
