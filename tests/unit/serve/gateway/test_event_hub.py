"""The gateway's event hub: every stream of one shard shares one poll, and each stream still gets its
own session's events in order, once, with its own errors (a fake coordinator answers the polls)."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest

from specagent_ray.serve.core.errors import NotFound, ServiceUnavailable
from specagent_ray.serve.gateway.event_hub import EventHub


def ev(seq: int, t: str = "drafted") -> dict[str, Any]:
    return {"seq": seq, "t": t}


class Shards:
    """A coordinator's ``events_many`` over scripted sessions: ``logs[sid]`` is the session's events."""

    def __init__(self, logs: dict[str, list[dict[str, Any]]]):
        self.logs = logs
        self.polls: list[tuple[int, list[tuple[str, int, str]]]] = []
        self.changed = asyncio.Event()
        self.fail: BaseException | None = None
        self.missing: set[str] = set()

    async def __call__(self, method: str, shard: int, wants: list, wait_s: float) -> dict[int, Any]:
        assert method == "events_many"
        self.polls.append((shard, list(wants)))
        while True:
            if self.fail is not None:
                raise self.fail
            out = {}
            for i, (sid, after, owner) in enumerate(wants):
                if sid in self.missing or owner != "t":
                    out[i] = pickle.loads(pickle.dumps(NotFound(f"no session {sid!r}")))  # as Ray would carry it
                elif len(self.logs[sid]) > after or (self.logs[sid] and self.logs[sid][-1]["t"] == "final"):
                    events, log = self.logs[sid][after:], self.logs[sid]
                    out[i] = {"events": events, "status": "running", "done": log[-1]["t"] == "final"}
            if out:
                return out
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), wait_s)
            except TimeoutError:
                return {}

    def add(self, sid: str, *kinds: str) -> None:
        log = self.logs[sid]
        log.extend(ev(len(log), t) for t in kinds)
        self.changed.set()


async def drain(hub: EventHub, sid: str, after: int = 0, owner: str = "t") -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    with hub.follow(sid, after, owner) as follower:
        while True:
            out = await follower.next(5)
            got += out["events"]
            if out["done"]:
                return got


async def test_streams_of_one_shard_share_polls_and_each_gets_its_own_events_in_order_once():
    shards = Shards({f"0-{i}": [] for i in range(20)})
    hub = EventHub(shards, interval_s=0.01, wait_s=5)
    streams = [asyncio.create_task(drain(hub, f"0-{i}")) for i in range(20)]
    for round_ in range(5):
        await asyncio.sleep(0.02)
        for i in range(20):
            shards.add(f"0-{i}", *(["final"] if round_ == 4 else ["drafted", "commit"]))
    results = await asyncio.wait_for(asyncio.gather(*streams), 30)
    for got in results:
        assert [e["seq"] for e in got] == list(range(9)) and got[-1]["t"] == "final"
    assert len(shards.polls) < 5 * 20 / 2  # one poll carried many streams
    assert max(len(wants) for _, wants in shards.polls) == 20


async def test_a_stream_that_joins_while_a_poll_waits_is_asked_for_at_once():
    shards = Shards({"0-a": [], "0-b": [ev(0), ev(1, "final")]})
    hub = EventHub(shards, interval_s=0.0, wait_s=60)  # the first poll would wait a minute for a's news
    waiting = asyncio.create_task(drain(hub, "0-a"))
    await asyncio.sleep(0.05)
    assert [sid for sid, _, _ in shards.polls[-1][1]] == ["0-a"]
    got = await asyncio.wait_for(drain(hub, "0-b"), 5)  # not after the minute
    assert [e["seq"] for e in got] == [0, 1]
    shards.add("0-a", "final")
    assert [e["t"] for e in await asyncio.wait_for(waiting, 5)] == ["final"]


async def test_a_stream_starts_from_its_cursor_and_a_finished_stream_is_asked_for_no_more():
    shards = Shards({"0-a": [ev(0), ev(1), ev(2, "final")], "0-b": []})
    hub = EventHub(shards, interval_s=0.0, wait_s=5)
    assert [e["seq"] for e in await drain(hub, "0-a", after=1)] == [1, 2]
    other = asyncio.create_task(drain(hub, "0-b"))
    await asyncio.sleep(0.05)
    shards.add("0-b", "final")
    await asyncio.wait_for(other, 5)
    assert all(sid != "0-a" for _, wants in shards.polls[1:] for sid, _, _ in wants)


async def test_an_error_about_one_session_ends_only_its_stream():
    shards = Shards({"0-a": [], "0-gone": []})
    shards.missing.add("0-gone")
    hub = EventHub(shards, interval_s=0.0, wait_s=5)
    fine = asyncio.create_task(drain(hub, "0-a"))
    with pytest.raises(NotFound, match="0-gone"):
        await asyncio.wait_for(drain(hub, "0-gone"), 5)
    with pytest.raises(NotFound):
        await asyncio.wait_for(drain(hub, "0-a", owner="someone else"), 5)  # another tenant's: 404
    shards.add("0-a", "commit", "final")
    assert [e["seq"] for e in await asyncio.wait_for(fine, 5)] == [0, 1]


async def test_a_failed_poll_ends_every_stream_of_its_shard_after_the_events_already_handed_over():
    shards = Shards({"0-a": [ev(0)], "0-b": [], "1-c": []})
    hub = EventHub(shards, interval_s=0.0, wait_s=5)
    with hub.follow("0-a", 0, "t") as a, hub.follow("0-b", 0, "t") as b, hub.follow("1-c", 0, "t") as c:
        await asyncio.sleep(0.05)  # a's first event arrived and waits for a's stream to ask
        shards.fail = ServiceUnavailable("this coordinator was fenced")
        shards.changed.set()
        await asyncio.sleep(0.05)  # then the failure arrived
        assert [e["seq"] for e in (await a.next(5))["events"]] == [0]  # what came before the error first
        for follower in (a, b, c):  # the fake fails every shard's poll: each stream ends with the error
            with pytest.raises(ServiceUnavailable, match="fenced"):
                await follower.next(5)
    assert {shard for shard, _ in shards.polls} == {0, 1}  # one poll per shard


async def test_a_stream_whose_client_left_is_not_asked_for():
    shards = Shards({"0-a": [], "0-b": []})
    hub = EventHub(shards, interval_s=0.0, wait_s=0.05)
    with hub.follow("0-a", 0, "t") as a:
        await a.next(0.1)
    with hub.follow("0-b", 0, "t") as b:
        await b.next(0.2)
    assert [sid for sid, _, _ in shards.polls[-1][1]] == ["0-b"]


async def test_a_finished_session_whose_stream_reads_slowly_is_not_polled_again_and_again():
    """A finished session always has news for the coordinator (its end): asked for again, every poll
    would answer at once, for nothing."""
    shards = Shards({"0-a": [ev(0, "final")]})
    hub = EventHub(shards, interval_s=0.0, wait_s=5)
    with hub.follow("0-a", 0, "t") as a:
        await asyncio.sleep(0.3)  # the stream is busy elsewhere (a slow client)
        assert len(shards.polls) == 1
        assert (await a.next(5))["done"]
