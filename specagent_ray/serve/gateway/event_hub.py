"""The gateway's event streams, fed by one poll per coordinator shard (``sessions/event_polls.py``).

A stream's first answer comes from its own ``events`` call (a 404 answers before the stream starts);
from then on it follows its session through the hub, which keeps every stream of one shard in a single
``events_many`` long-poll, at most one per ``interval_s``, and hands each stream what came for it.

Guarantees: a stream gets its session's events in order and each once (its cursor moves only by what
the hub handed it); a stream that ends (done, an error, its client gone) leaves the poll; an error
about one session (404) reaches that stream only; a poll that fails (the coordinator unavailable past
the gateway's patience, or fenced) ends every stream of that shard with that error, as each stream's
own long-poll would have; a stream that joins while a poll waits is asked for at once, not after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..sessions.shards import shard_of

Call = Callable[..., Awaitable[Any]]  # the gateway's call to the coordinator: (method, *args)


class Follower:
    """One stream's place in its shard's poll: its cursor, and what arrived for it since it last asked."""

    def __init__(self, sid: str, after: int, owner: str):
        self.sid, self.cursor, self.owner = sid, after, owner
        self.events: list[dict[str, Any]] = []
        self.status, self.done, self.error = "running", False, None
        self.ready = asyncio.Event()

    def take(self, answer: Any) -> None:
        if isinstance(answer, BaseException):
            self.fail(answer)
            return
        self.events += answer["events"]
        self.cursor += len(answer["events"])
        self.status, self.done = answer["status"], answer["done"]
        self.ready.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.ready.set()

    async def next(self, wait_s: float) -> dict[str, Any]:
        """What arrived since the last call (``events``' answer), waiting up to ``wait_s`` for something;
        raises the error that ended the stream."""
        try:
            async with asyncio.timeout(wait_s):
                await self.ready.wait()
        except TimeoutError:
            pass
        if not self.events and self.error is not None:
            raise self.error  # after every event that came before it
        if self.error is None:
            self.ready.clear()
        events, self.events = self.events, []
        return {"events": events, "status": self.status, "done": self.done}


class EventHub:
    def __init__(self, call: Call, interval_s: float, wait_s: float):
        self.call, self.interval_s, self.wait_s = call, interval_s, wait_s
        self._shards: dict[int, ShardPoll] = {}

    @contextmanager
    def follow(self, sid: str, after: int, owner: str) -> Iterator[Follower]:
        """Follow ``sid`` from ``after`` for as long as the ``with`` block runs."""
        index = shard_of(sid) or 0
        poll = self._shards.get(index)
        if poll is None:
            poll = self._shards[index] = ShardPoll(index, self.call, self.interval_s, self.wait_s)
        follower = Follower(sid, after, owner)
        poll.add(follower)
        try:
            yield follower
        finally:
            poll.followers.discard(follower)


class ShardPoll:
    """The single poll of one shard: runs while any stream follows a session there."""

    def __init__(self, shard: int, call: Call, interval_s: float, wait_s: float):
        self.shard, self.call, self.interval_s, self.wait_s = shard, call, interval_s, wait_s
        self.followers: set[Follower] = set()
        self._runner: asyncio.Task | None = None
        self._asking: asyncio.Task | None = None

    def add(self, follower: Follower) -> None:
        self.followers.add(follower)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run())
        elif self._asking is not None and not self._asking.done():
            self._asking.cancel()  # it asks without the newcomer: ask again, with it

    async def _run(self) -> None:
        loop, last = asyncio.get_running_loop(), float("-inf")
        while self.followers:
            await asyncio.sleep(max(0.0, last + self.interval_s - loop.time()))
            asking = [f for f in self.followers if f.error is None and not f.done]
            if not asking:
                await asyncio.sleep(max(self.interval_s, 0.01))  # their streams still hand out the end
                continue
            last = loop.time()
            wants = [(f.sid, f.cursor, f.owner) for f in asking]
            self._asking = loop.create_task(self.call("events_many", self.shard, wants, self.wait_s))
            try:
                answers = await self._asking
            except asyncio.CancelledError:
                if self._asking.cancelled() and not asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    last = float("-inf")  # a newcomer: ask again at once
                    continue
                raise
            except Exception as exc:  # noqa: BLE001 - the call's own error, as each stream would have had it
                for f in asking:
                    f.fail(exc)
                continue
            for i, answer in answers.items():
                asking[i].take(answer)
