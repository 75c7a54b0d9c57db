"""``Coordinator.events_many``: each reader's answer is the one ``events`` would give it, in one call."""

from __future__ import annotations

import asyncio

from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.config import (
    AppConfig,
    CoordinatorConfig,
    LatencyModel,
    SimEngines,
)
from specagent_ray.serve.core.errors import NotFound
from specagent_ray.serve.core.handles import Local
from specagent_ray.serve.engines.engine_client import SimEngineClient
from specagent_ray.serve.engines.sim_engine import SimEngine
from specagent_ray.serve.sessions.coordinator import Coordinator
from specagent_ray.serve.toolhost.tool_host import ToolHost
from specagent_ray.storage.local import LocalStore

SLOW = LatencyModel(draft_base_s=0.05, draft_per_request_s=0, verify_base_s=0.05, verify_per_request_s=0,
                    step_base_s=0.05)


def coordinator(tmp_path, latency: LatencyModel = SLOW) -> Coordinator:
    cfg = AppConfig(engines=SimEngines(latency=latency), coordinator=CoordinatorConfig(),
                    tool_sources={"airline": {"kind": "tau2", "domain": "airline"}})
    engines = SimEngineClient(Local(SimEngine("drafter", cfg.engines)), Local(SimEngine("verifier", cfg.engines)),
                              cfg.engines, cfg.coordinator)
    return Coordinator(cfg, engines, Local(ToolHost(cfg.tool_sources)), LocalStore(tmp_path / "log"))


async def test_each_reader_gets_what_events_would_give_it_and_only_readers_with_news_answer(tmp_path):
    coord = coordinator(tmp_path)
    await coord.start()
    a = (await coord.create(CreateSession(tool_source="airline", task_id="0", user="simulated"), owner="t"))["session_id"]
    b = (await coord.create(CreateSession(tool_source="airline", task_id="1", user="simulated"), owner="t"))["session_id"]
    while not (await coord.events(a, 0, 0, owner="t"))["done"]:
        await asyncio.sleep(0.05)  # a runs to its end
    whole_a = await coord.events(a, 0, 0, owner="t")
    n = len(whole_a["events"])
    wants = [(a, 2, "t"), (a, n, "t"), (b, 10_000, "t"), ("0-nope", 0, "t"), (a, 0, "other")]
    out = await coord.events_many(wants, 0.2)
    assert out[0] == await coord.events(a, 2, 0, owner="t") and out[0]["events"] == whole_a["events"][2:]
    assert out[1] == {"events": [], "status": "done", "done": True}  # the end is news: the reader stops
    assert 2 not in out  # b has nothing past 10,000 yet
    assert isinstance(out[3], NotFound) and isinstance(out[4], NotFound)  # unknown, and another tenant's
    await coord.cancel(b, owner="t")


async def test_it_waits_while_nobody_has_news_and_answers_at_the_next_commit(tmp_path):
    coord = coordinator(tmp_path, LatencyModel(draft_base_s=0.5, draft_per_request_s=0, verify_base_s=0.5,
                                               verify_per_request_s=0, step_base_s=0.5))  # runs throughout
    await coord.start()
    sid = (await coord.create(CreateSession(tool_source="airline", task_id="0", user="simulated"), owner="t"))["session_id"]
    seen = len((await coord.events(sid, 0, 0, owner="t"))["events"])
    loop = asyncio.get_running_loop()
    started = loop.time()
    out = await coord.events_many([(sid, seen, "t")], 30)
    assert out[0]["events"] and out[0]["events"][0]["seq"] == seen  # woken by the session's next records
    assert loop.time() - started < 10
    started = loop.time()
    assert await coord.events_many([(sid, 10_000, "t")], 0.3) == {}  # commits woke it; none was for this reader
    assert loop.time() - started >= 0.3
    await coord.cancel(sid, owner="t")
    while not (done := await coord.events(sid, 0, 0, owner="t"))["done"]:
        await asyncio.sleep(0.02)  # its final record is being stored
    assert await coord.events_many([(sid, len(done["events"]), "t")], 0.1) == {
        0: {"events": [], "status": "cancelled", "done": True}}
