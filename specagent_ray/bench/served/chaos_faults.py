"""The faults of ``bench chaos`` (``chaos.py``): a store that is slow, fails or is unreachable, one
coordinator's connections to it and to the tool host that a crash cuts, a tool host replica that dies,
and CPU hogs."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ...serve.toolhost.tool_host import ToolHost
from ...storage.base import StoreError
from ...storage.local import LocalStore

STORE_OPS = ("put", "create", "get", "read", "swap", "exists", "list", "delete")
HOG = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"
TOOL_HOST_DOWN_S = 3.0


class ChaosStore:
    """The one store every part shares, with the faults that act on it: a heavy-tailed delay per
    operation (``slow``), a fraction of operations that raise (``error_rate``), and a window in which
    every operation fails (``down_until``, monotonic). Thread-safe: operations run on worker threads."""

    def __init__(self, inner: LocalStore, seed: int):
        self.inner, self.rng, self.lock = inner, random.Random(seed), threading.Lock()
        self.slow, self.error_rate, self.down_until = False, 0.0, 0.0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name not in STORE_OPS:
            return method

        def op(*args: Any) -> Any:
            if time.monotonic() < self.down_until:
                raise StoreError(f"chaos: the store is unreachable ({name})")
            with self.lock:
                u, v = self.rng.random(), self.rng.random()
            if self.slow:  # 2% of 1-3 s, 10% of 20-200 ms, else up to 5 ms
                time.sleep(1 + 2 * v if u < 0.02 else 0.02 + 0.18 * v if u < 0.12 else 0.005 * v)
            if v < self.error_rate:
                raise StoreError(f"chaos: injected store error ({name})")
            return method(*args)
        return op


class Connection:
    """One coordinator's connection to the store; ``cut`` when it crashes, so that nothing it still has
    queued or in flight reaches the store afterwards (a dead process writes nothing)."""

    def __init__(self, store: Any):
        self.store, self.cut = store, False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if name not in STORE_OPS:
            return method

        def op(*args: Any) -> Any:
            if self.cut:
                raise StoreError(f"chaos: crashed, {name} never reaches the store")
            return method(*args)
        return op


class ToolHostSwitch:
    """The tool host replica: ``kill`` drops it and its calls in flight (their callers get a
    ConnectionError, as from a dead actor); for ``down_s`` every call fails, then a new ``ToolHost`` on
    the same store serves. ``hosts`` keeps every one, for their write counts."""

    def __init__(self, make: Callable[[], ToolHost]):
        self.make, self.hosts, self.down_until = make, [make()], 0.0
        self.host: ToolHost | None = self.hosts[0]
        self.inflight: set[asyncio.Task] = set()

    def _alive(self) -> ToolHost:
        if self.host is None:
            if time.monotonic() < self.down_until:
                raise ConnectionError("chaos: the tool host replica is dead")
            self.host = self.make()
            self.hosts.append(self.host)
        return self.host

    def kill(self, down_s: float) -> None:
        self.host, self.down_until = None, time.monotonic() + down_s
        for task in list(self.inflight):
            task.cancel()

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        task = asyncio.ensure_future(self._alive().execute(*args, **kwargs))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:  # the caller's own cancellation: the call goes with it
            task.cancel()
            raise
        if task.cancelled():
            raise ConnectionError("chaos: the tool host replica died during the call")
        return task.result()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._alive(), name)


class ToolLink:
    """One coordinator's connection to the tool host (``ToolHostSwitch``); ``cut`` when it crashes: nothing
    it sends afterwards arrives (a dead process neither writes nor closes a session's environment, which
    its successor resumes in), and a call it sent before runs to its end at the tool host, as a remote
    call does when its caller dies."""

    def __init__(self, tools: ToolHostSwitch):
        self.tools, self.cut = tools, False

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.cut:
                raise ConnectionError(f"chaos: crashed, {name} never reaches the tool host")
            result = getattr(self.tools, name)(*args, **kwargs)
            return await asyncio.shield(result) if inspect.isawaitable(result) else result
        return call


@contextlib.contextmanager
def cpu_hog(on: bool, bound_s: float) -> Iterator[None]:
    """One spinning process per core while the block runs; each ends by itself after ``bound_s``, and
    every one is killed when the block ends, however it ends."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG, str(bound_s)]) for _ in range(os.cpu_count() or 1)] \
        if on else []
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
