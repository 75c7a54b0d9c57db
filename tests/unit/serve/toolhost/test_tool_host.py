"""The tool host's at-most-once rules on their own, with a counting tool in place of tau2 or MCP."""

from __future__ import annotations

import asyncio

import pytest

from specagent_ray.protocol.types import Observation, ToolCall
from specagent_ray.serve.log.idempotency import KeyReused, StaleEpoch
from specagent_ray.serve.toolhost.tool_host import ShardedToolHost, ToolHost
from specagent_ray.storage import LocalStore


class CountingHost(ToolHost):
    """Runs every call by counting it per call; ``hang`` makes writes hang (a host killed mid-write)."""

    ran: list[str] = []

    def __init__(self, store, hang: bool = False):
        super().__init__({}, store)
        self.hang = hang

    async def _run(self, source, session_id, call, key=None, *where):
        CountingHost.ran.append(f"{call.name}{call.arguments}")
        if self.hang:
            await asyncio.sleep(3600)
        return Observation(f"done {call.arguments}")


@pytest.fixture(autouse=True)
def fresh_count():
    CountingHost.ran = []


BOOK = ToolCall("book", {"seat": "1A"})


async def test_a_key_reused_for_another_call_is_refused_here_and_on_another_host(tmp_path):
    store = LocalStore(tmp_path)
    host = CountingHost(store)
    assert (await host.execute("s", "sid", BOOK, "sid:w0", 1)).content == "done {'seat': '1A'}"
    with pytest.raises(KeyReused):
        await host.execute("s", "sid", ToolCall("book", {"seat": "2B"}), "sid:w0", 1)
    with pytest.raises(KeyReused):  # the durable record says so after a restart as well
        await CountingHost(store).execute("s", "sid", ToolCall("book", {"seat": "2B"}), "sid:w0", 1)
    assert CountingHost.ran == ["book{'seat': '1A'}"]


async def test_a_write_from_an_older_epoch_is_refused(tmp_path):
    host = CountingHost(LocalStore(tmp_path))
    await host.execute("s", "sid", BOOK, "sid:w0", 3)
    with pytest.raises(StaleEpoch, match="epoch 2, older than epoch 3"):
        await host.execute("s", "sid", ToolCall("book", {"seat": "9C"}), "sid:w1", 2)
    assert len(CountingHost.ran) == 1


async def test_a_host_killed_mid_write_never_runs_it_again_and_a_new_shard_count_changes_nothing(tmp_path):
    store = LocalStore(tmp_path)
    doomed = CountingHost(store, hang=True)
    running = asyncio.ensure_future(doomed.execute("s", "sid", BOOK, "sid:w0", 1))
    await asyncio.sleep(0.1)
    running.cancel()  # the host dies mid-write: its claim is stored, its result never is
    survivors = ShardedToolHost([CountingHost(store), CountingHost(store), CountingHost(store)])
    obs = await survivors.execute("s", "sid", BOOK, "sid:w0", 2)
    assert obs.error and "outcome unknown" in obs.content
    assert CountingHost.ran == ["book{'seat': '1A'}"]  # ran once, by the host that died


async def test_a_finished_write_answers_its_first_result_on_every_shard(tmp_path):
    store = LocalStore(tmp_path)
    first = await CountingHost(store).execute("s", "sid", BOOK, "sid:w0", 1)
    for shards in (1, 2, 5):
        hosts = ShardedToolHost([CountingHost(store) for _ in range(shards)])
        assert await hosts.execute("s", "sid", BOOK, "sid:w0", 1) == first
    assert len(CountingHost.ran) == 1


class Calls:
    """A handle that counts the calls that reach a shard, as the coordinator pays for each."""

    def __init__(self, host):
        self.host, self.calls = host, []

    def __getattr__(self, name):
        async def call(*args):
            self.calls.append(name)
            result = getattr(self.host, name)(*args)
            return await result if asyncio.iscoroutine(result) else result
        return call


async def test_reads_and_closes_of_many_sessions_reach_a_shard_in_few_calls_and_fail_alone(tmp_path):
    class Flaky(CountingHost):
        async def _run(self, source, session_id, call, key=None, *where):
            if call.name == "broken":
                raise RuntimeError("tool blew up")
            return await super()._run(source, session_id, call, key, *where)

    shards = [Calls(Flaky(LocalStore(tmp_path))) for _ in range(2)]
    hosts = ShardedToolHost(shards)
    sids = [f"s{i}" for i in range(40)]
    calls = [ToolCall("broken" if i == 7 else "read", {"i": i}) for i in range(len(sids))]
    results = await asyncio.gather(*(hosts.execute("src", sid, call) for sid, call in zip(sids, calls)),
                                   return_exceptions=True)
    for i, result in enumerate(results):  # each session gets its own answer; one failure stays its own
        assert (isinstance(result, RuntimeError) if i == 7 else result == Observation(f"done {{'i': {i}}}")), i
    reads = sum(s.calls.count("execute_many") for s in shards)
    assert 2 <= reads < len(sids) // 4, [s.calls for s in shards]
    await hosts.execute("src", "s0", BOOK, "s0:w0", 1)  # writes still go alone, through the keyed path
    assert sum(s.calls.count("execute") for s in shards) == 1
    await asyncio.gather(*(hosts.close_session(sid) for sid in sids))
    assert sum(s.calls.count("close_sessions") for s in shards) <= 4
