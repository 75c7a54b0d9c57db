"""The tool host's at-most-once rules on their own, with a counting tool in place of tau2 or MCP."""

from __future__ import annotations

import asyncio

import pytest

from specagent_ray.protocol.types import Observation, ToolCall
from specagent_ray.serve.idempotency import KeyReused, StaleEpoch
from specagent_ray.serve.tool_host import ShardedToolHost, ToolHost
from specagent_ray.storage import LocalStore


class CountingHost(ToolHost):
    """Runs every call by counting it per call; ``hang`` makes writes hang (a host killed mid-write)."""

    ran: list[str] = []

    def __init__(self, store, hang: bool = False):
        super().__init__({}, store)
        self.hang = hang

    async def _run(self, source, session_id, call, key=None):
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
