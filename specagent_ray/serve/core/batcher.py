"""Gathering requests from many sessions into one engine submission.

A request waits at most ``window_s`` for company, and a batch holds at most ``max_batch`` requests; a
full batch leaves at once. Lower ``priority`` values leave first (a session waiting on a staged write
goes before one that is still drafting). Batches are submitted without waiting for the previous one,
so the engine, not the batcher, decides how many run at a time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# One result per request, in order; an exception in place of a result fails only that request.
Submit = Callable[[Sequence[T]], Awaitable[Sequence["R | BaseException"]]]


class Batcher(Generic[T, R]):
    """Guarantees: every request gets exactly one answer (its result or its exception), also when the
    submission raises for the whole batch; requests leave in (priority, arrival) order."""

    def __init__(self, submit: Submit, window_s: float, max_batch: int):
        self._submit = submit
        self.window_s = window_s
        self.max_batch = max_batch
        self._heap: list[tuple[int, int, T, asyncio.Future]] = []
        self._seq = itertools.count()
        self._wake: asyncio.Event | None = None
        self._full: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self._inflight: set[asyncio.Task] = set()
        self.sizes: Counter[int] = Counter()  # batch size -> how many batches had it
        self.on_batch: Callable[[int], None] = lambda size: None  # e.g. a metrics histogram

    def __len__(self) -> int:
        return len(self._heap)

    async def __call__(self, item: T, priority: int = 1) -> R:
        self._start()
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (priority, next(self._seq), item, future))
        assert self._wake is not None and self._full is not None
        self._wake.set()
        if len(self._heap) >= self.max_batch:
            self._full.set()
        return await future

    def _start(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._wake, self._full = asyncio.Event(), asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self._gather())

    async def _gather(self) -> None:
        assert self._wake is not None and self._full is not None
        while True:
            await self._wake.wait()
            if len(self._heap) < self.max_batch and self.window_s > 0:
                try:
                    async with asyncio.timeout(self.window_s):
                        await self._full.wait()
                except TimeoutError:
                    pass
            batch = [heapq.heappop(self._heap) for _ in range(min(self.max_batch, len(self._heap)))]
            if len(self._heap) < self.max_batch:
                self._full.clear()
            if not self._heap:
                self._wake.clear()
            if batch:
                self.sizes[len(batch)] += 1
                self.on_batch(len(batch))
                task = asyncio.get_running_loop().create_task(self._run(batch))
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)

    async def _run(self, batch: list[tuple[int, int, T, asyncio.Future]]) -> None:
        try:
            results = await self._submit([item for _, _, item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"engine answered {len(results)} of {len(batch)} batched requests")
        except BaseException as exc:  # noqa: BLE001 - handed to every waiter, never lost
            results = [exc] * len(batch)
        for (_, _, _, future), result in zip(batch, results, strict=True):
            if future.done():
                continue  # the waiter was cancelled
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
