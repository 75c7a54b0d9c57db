"""The coordinator's CPU by part: per-thread CPU from /proc, the calls a replica counts, and what
``bench scale`` makes of two ``stats()`` answers."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter

import pytest

from specagent_ray.bench.served.scale import per_step
from specagent_ray.serve.core.handles import Served
from specagent_ray.telemetry.threads import (
    CALLS_IN,
    CALLS_OUT,
    IO_THREADS,
    LOOP,
    RAY_CORE,
    cpu_by_part,
    serve_replica_parts,
    thread_cpu_s,
)

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread CPU comes from /proc")


def burn(cpu_s: float) -> None:
    start = time.thread_time()
    while time.thread_time() - start < cpu_s:
        sum(range(1000))


@linux
def test_a_busy_thread_is_counted_in_its_part_and_a_gone_thread_reads_none():
    done, go = threading.Event(), threading.Event()

    def work():
        burn(0.3)
        done.set()
        go.wait(10)  # alive while its CPU is read
    worker = threading.Thread(target=work, name="ThreadPoolExecutor-7_0")
    worker.start()
    assert done.wait(30)
    parts = cpu_by_part(serve_replica_parts(threading.get_native_id()))
    cpu = thread_cpu_s(worker.native_id)
    go.set()
    worker.join()
    assert cpu is not None and cpu >= 0.25
    assert parts[IO_THREADS] >= 0.25 and LOOP in parts
    # ended: nothing to read, once the OS has reaped the thread (join returns a moment before it has)
    deadline = time.monotonic() + 5
    while thread_cpu_s(worker.native_id) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread_cpu_s(worker.native_id) is None


def test_thread_names_map_to_the_parts_of_a_serve_replica():
    part_of = serve_replica_parts(loop_tid=11)
    assert part_of(11, "Thread-1 (_run_user_code_event_loop)") == LOOP
    assert part_of(12, "Thread-3 (_run_router_event_loop)") == CALLS_OUT
    assert part_of(13, "AsyncIO Thread: default") == CALLS_IN
    assert part_of(14, "ThreadPoolExecutor-1_0") == IO_THREADS
    assert part_of(15, "") == RAY_CORE  # a C++ thread: Python does not know its name


async def test_served_counts_its_calls_by_method_also_when_routed():
    class Method:
        def __init__(self, name):
            self.name = name

        def remote(self, *args):
            async def answer():
                return (self.name, args)
            return answer()

    class Handle:
        def options(self, **kw):
            return self

        def __getattr__(self, name):
            return Method(name)

    counts: Counter[str] = Counter()
    served = Served(Handle(), counts)
    assert await served.execute(1) == ("execute", (1,))
    await served.routed("lane-0").verify_batch([])
    await asyncio.gather(*(served.execute(i) for i in range(3)))
    assert counts == {"execute": 4, "verify_batch": 1}
    assert await Served(Handle()).execute(2) == ("execute", (2,))  # without counts: just the call


def test_per_step_takes_differences_over_the_window_and_sums_shards():
    def shard(cpu, calls):
        return {"process": {"cpu_s_by_part": cpu, "calls_in": calls, "calls_out": {}}}
    idle = {"shards": [shard({LOOP: 1.0, RAY_CORE: 2.0}, {"events": 10}), shard({LOOP: 0.5}, {})]}
    after = {"shards": [shard({LOOP: 1.2, RAY_CORE: 2.1}, {"events": 30}), shard({LOOP: 0.6}, {"events": 20})]}
    out = per_step(idle, after, steps=100)
    assert out["cpu_s_by_part"] == pytest.approx({LOOP: 3.0, RAY_CORE: 1.0})  # ms per step
    assert out["calls_in"] == pytest.approx({"events": 0.4}) and out["calls_out"] == {}
    assert list(out["cpu_s_by_part"]) == [LOOP, RAY_CORE]  # the largest part first
