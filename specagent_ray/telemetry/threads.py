"""CPU time of this process's threads, summed by the part of the process each thread serves.

A Ray Serve replica runs its user code on one event loop thread, its outgoing handle calls on a router
thread, and Ray's own work (incoming requests, object transfer, the GCS client) on the main thread and
on threads that Python does not know (C++). ``process_time()`` sums them all; ``cpu_by_part`` tells
them apart, from ``/proc/self/task`` (Linux; elsewhere it answers ``{}``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
TASKS = "/proc/self/task"


def thread_cpu_s(tid: int) -> float | None:
    """User plus system CPU seconds of one thread of this process, or None once it has ended."""
    try:
        with open(f"{TASKS}/{tid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the name, in parentheses, may hold spaces
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime and stime: fields 14 and 15 of stat(5)


def cpu_by_part(part_of: Callable[[int, str], str]) -> dict[str, float]:
    """CPU seconds of every live thread, summed by ``part_of(native id, Python thread name or "")``.
    Threads that ended since are not counted: callers take differences over a window in which the
    threads they watch live (the parts of a serving replica live as long as it)."""
    if not os.path.isdir(TASKS):
        return {}
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    out: dict[str, float] = {}
    for entry in os.listdir(TASKS):
        cpu = thread_cpu_s(int(entry))
        if cpu is not None:
            part = part_of(int(entry), names.get(int(entry), ""))
            out[part] = out.get(part, 0.0) + cpu
    return {part: round(cpu, 3) for part, cpu in sorted(out.items())}


LOOP, CALLS_IN, CALLS_OUT, IO_THREADS, RAY_CORE = "session loop", "calls in", "calls out", "I/O threads", "Ray core"


def serve_replica_parts(loop_tid: int) -> Callable[[int, str], str]:
    """The parts of a Ray Serve replica's threads: its user code's event loop (``loop_tid``), the
    actor's own loop (Serve takes calls in there and hands them to the user code's), the handle
    router's loop (calls out to other deployments), the user loop's default executor (blocking I/O:
    session log writes, lease renewals), and Ray core (its C++ threads: RPCs, object transfer)."""
    def part_of(tid: int, name: str) -> str:
        if tid == loop_tid:
            return LOOP
        if "_run_router_event_loop" in name:
            return CALLS_OUT
        if name.startswith("AsyncIO Thread"):
            return CALLS_IN
        if name.startswith(("ThreadPoolExecutor", "asyncio")):
            return IO_THREADS
        return RAY_CORE
    return part_of
