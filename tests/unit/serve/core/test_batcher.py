"""The batcher: window, size cap, priority, and one answer per request."""

from __future__ import annotations

import asyncio

import pytest

from specagent_ray.serve.core.batcher import Batcher


class Engine:
    def __init__(self, fail_on=None):
        self.batches = []
        self.fail_on = fail_on

    async def submit(self, items):
        self.batches.append(list(items))
        if self.fail_on == "batch":
            raise ConnectionError("replica died")
        return [ValueError(f"bad {i}") if i == self.fail_on else i * 10 for i in items]


async def test_requests_within_the_window_share_one_batch():
    engine = Engine()
    batcher = Batcher(engine.submit, window_s=0.05, max_batch=100)
    results = await asyncio.gather(*(batcher(i) for i in range(20)))
    assert results == [i * 10 for i in range(20)]
    assert engine.batches == [list(range(20))]
    assert batcher.sizes == {20: 1}


async def test_a_full_batch_leaves_before_the_window_and_the_cap_holds():
    engine = Engine()
    batcher = Batcher(engine.submit, window_s=30.0, max_batch=4)
    results = await asyncio.wait_for(asyncio.gather(*(batcher(i) for i in range(8))), timeout=5)
    assert results == [i * 10 for i in range(8)]
    assert [len(b) for b in engine.batches] == [4, 4]


async def test_priority_requests_leave_first():
    engine = Engine()
    batcher = Batcher(engine.submit, window_s=0.05, max_batch=2)
    await asyncio.gather(batcher(1, priority=1), batcher(2, priority=1), batcher(3, priority=0))
    assert engine.batches[0] == [3, 1]


async def test_a_failed_request_fails_alone_and_a_failed_batch_fails_every_waiter():
    batcher = Batcher(Engine(fail_on=2).submit, window_s=0.01, max_batch=10)
    results = await asyncio.gather(*(batcher(i) for i in range(4)), return_exceptions=True)
    assert results[:2] == [0, 10] and isinstance(results[2], ValueError) and results[3] == 30
    batcher = Batcher(Engine(fail_on="batch").submit, window_s=0.01, max_batch=10)
    results = await asyncio.gather(*(batcher(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)


async def test_zero_window_submits_at_once():
    engine = Engine()
    batcher = Batcher(engine.submit, window_s=0.0, max_batch=8)
    assert await batcher(5) == 50
    assert engine.batches == [[5]]


@pytest.mark.parametrize("n", [1, 7, 64])
async def test_every_request_is_answered_exactly_once(n):
    engine = Engine()
    batcher = Batcher(engine.submit, window_s=0.001, max_batch=5)
    results = await asyncio.gather(*(batcher(i) for i in range(n)))
    assert sorted(results) == [i * 10 for i in range(n)]
    assert sum(len(b) for b in engine.batches) == n
