"""The session log on its own: never overwriting, fencing, replay that survives bad records, compaction."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from specagent_ray.serve.log.lease import Fenced, Lease, LeaseUnconfirmed
from specagent_ray.serve.log.session_log import SessionLog
from specagent_ray.storage import LocalStore
from specagent_ray.testing.faults import FaultyStore


def new_log(store, period_s=1.0, real_clock=False, **kw) -> SessionLog:
    """A log whose lease, on a frozen clock, never runs out unless the test asks for the real one: a
    loaded CI machine that delays a renewal must not fail a test about something else."""
    clock = time.monotonic if real_clock else (lambda: 0.0)
    return SessionLog(store, Lease(store, period_s=period_s, skew_s=0.05, clock=clock), **kw)


class SlowFirstWrite:
    """A store whose first segment write blocks (in its thread) until released, then lands."""

    def __init__(self, inner):
        self.inner, self.release, self.started = inner, threading.Event(), threading.Event()
        self._first = True

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _slow(self, method, key, data):
        if self._first and key.startswith("log/"):
            self._first = False
            self.started.set()
            self.release.wait(10)
        return method(key, data)

    def put(self, key, data):
        return self._slow(self.inner.put, key, data)

    def create(self, key, data):
        return self._slow(self.inner.create, key, data)


async def test_a_cancelled_flush_that_lands_late_never_overwrites_newer_records(tmp_path):
    """A past race: DELETE cancels a session while its intent flush is slow; the next flush
    then must not share a key with the write still running in its thread."""
    store = SlowFirstWrite(LocalStore(tmp_path))
    log = new_log(store)
    await log.open()
    log.append("s1", {"t": "intent", "key": "s1:w0"})
    first = asyncio.ensure_future(log.durable())
    await asyncio.to_thread(store.started.wait, 5)
    first.cancel()  # the caller gives up; the store write goes on in its thread
    with pytest.raises(asyncio.CancelledError):
        await first
    log.append("s2", {"t": "intent", "key": "s2:w0"})
    await log.durable()  # stores both records (the cancelled batch was put back)
    assert {s: [r["key"] for r in rs] for s, rs in log.replay().sessions.items()} == {"s1": ["s1:w0"], "s2": ["s2:w0"]}
    store.release.set()  # the old write finishes last
    await asyncio.sleep(0.2)
    replayed = log.replay().sessions
    assert {s: [r["key"] for r in rs] for s, rs in replayed.items()} == {"s1": ["s1:w0"], "s2": ["s2:w0"]}
    await log.close()


async def test_a_batch_that_landed_twice_is_replayed_once(tmp_path):
    inner = LocalStore(tmp_path)
    store = FaultyStore(inner, fault="unknown", counts=lambda op, key: op == "create" and key.startswith("log/"))
    log = new_log(store)
    await log.open()
    store.injector.at = store.ops + 1  # the next segment lands, but the writer sees an error
    log.append("s", {"t": "created"})
    log.append("s", {"t": "commit", "n": 1})
    with pytest.raises(Exception, match="answer was lost"):
        await log.durable()
    log.append("s", {"t": "final"})
    await log.durable()
    assert len([k for k in inner.list("log/")]) == 2  # the first batch is stored twice
    assert [r["t"] for r in log.replay().sessions["s"]] == ["created", "commit", "final"]
    await log.close()


async def test_bad_records_cost_only_their_own_session(tmp_path):
    store = LocalStore(tmp_path)
    log = new_log(store)
    await log.open()
    for sid in ("good", "badjson", "truncated", "latin"):
        log.append(sid, {"t": "created"})
    await log.durable()
    await log.close()
    key = store.list("log/")[-1]
    corrupt = (b'{"sid":"badjson","i":9,"t":"commit",,}\n'
               b'{"sid":"latin","i":10,"t":"user_message","text":"caf\xe9"}\n'
               b'{"i":11,"t":"orphan"}\n'
               b'{"sid":"truncated","i":12,"t":"comm')
    store.put(key, store.get(key) + corrupt)
    replay = new_log(store).replay()
    assert set(replay.broken) == {"badjson", "latin", "truncated"}
    assert all(key in reason and " line " in reason for reason in replay.broken.values())
    assert len(replay.problems) == 4 and "no session named" in replay.problems[2]
    assert replay.sessions["good"] == [{"t": "created"}]


async def test_a_displaced_writer_is_fenced_and_loses_no_acknowledged_record(tmp_path):
    store = LocalStore(tmp_path)
    blue, green = new_log(store, 0.6, True), new_log(store, 0.6, True)
    fenced = []
    blue.on_fenced = fenced.append
    await blue.open()
    blue.append("s", {"t": "created"})
    await blue.durable()  # acknowledged: must survive
    replay = await green.open()  # takes epoch 2 and waits out blue's lease before reading
    assert replay.sessions == {"s": [{"t": "created"}]}
    await asyncio.sleep(0.3)  # blue's next renewal (every period / 3) finds the lease taken
    assert fenced and "taken over" in fenced[0]
    blue.append("s", {"t": "commit"})
    with pytest.raises(Fenced):
        await blue.durable()
    assert green.replay().sessions == {"s": [{"t": "created"}]}
    assert (blue.epoch, green.epoch) == (1, 2)
    await green.close()


async def test_a_writer_cut_off_from_the_store_stops_until_it_renews(tmp_path):
    store = FaultyStore(LocalStore(tmp_path), counts=lambda op, key: False)
    now = [0.0]
    lease = Lease(store, period_s=1.0, clock=lambda: now[0])
    log = SessionLog(store, lease)
    await log.open()
    now[0] = 1.5  # no renewal confirmed for longer than the period
    log.append("s", {"t": "created"})
    with pytest.raises(LeaseUnconfirmed):
        await log.durable()
    assert lease.renew()
    await log.durable()
    assert log.replay().sessions == {"s": [{"t": "created"}]}


async def test_compaction_keeps_live_sessions_archives_finished_ones_and_bounds_replay(tmp_path):
    store = LocalStore(tmp_path)
    log = new_log(store, compact_min=10**9)
    await log.open()
    for i in range(50):
        log.append(f"done{i}", {"t": "created"})
        log.append(f"done{i}", {"t": "final"})
        await log.durable()
    log.append("live", {"t": "created"})
    await log.durable()
    assert log.replay().keys_read == 1 + 51  # the opening snapshot and every segment
    await log.compact()
    replay = log.replay()
    assert replay.sessions == {"live": [{"t": "created"}]} and replay.keys_read == 1
    assert store.list("log/") == [] and len(store.list("snap/")) == 1
    archived = [json.loads(line) for k in store.list("archive/") for line in store.get(k).splitlines()]
    assert sorted({r["sid"] for r in archived}) == sorted(f"done{i}" for i in range(50))
    log.append("live", {"t": "commit"})
    await log.durable()
    await log.close()
    assert (await new_log(store).open()).sessions == {"live": [{"t": "created"}, {"t": "commit"}]}
