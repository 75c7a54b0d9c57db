"""Fault injection for the write path: a store and a tool host that fail at their Nth operation.

A fault is one of:
- ``raise``: the operation does not happen and the caller gets an error;
- ``unknown``: the operation happens, then the caller gets an error (the outcome is unknown to it);
- ``cancel``: the caller is cancelled at once while the operation goes on in the background and lands a
  little later (a DELETE, a timeout, a shutdown cancelling a task whose store write keeps running);
- ``delay``: the operation happens late, the caller waits.

``ops`` counts every operation that ``counts`` accepts, from 1; ``injected`` lists what was injected;
``on_inject`` is called at the moment of injection (a test crashes the coordinator there).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from ..storage.base import StoreError

FAULTS = ("raise", "unknown", "cancel", "delay")


class InjectedFault(StoreError):
    """An error injected by a test (a store error, so callers treat it as one)."""


class _Injector:
    def __init__(self, at: int | None, fault: str, delay_s: float):
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
        self.at, self.fault, self.delay_s = at, fault, delay_s
        self.ops = 0
        self.injected: list[str] = []
        self.on_inject: Callable[[], None] = lambda: None
        self._lock = threading.Lock()

    def next(self, what: str) -> str | None:
        with self._lock:
            self.ops += 1
            if self.ops != self.at:
                return None
            self.injected.append(f"{self.fault} at op {self.ops} ({what})")
        self.on_inject()
        return self.fault


class _Faulty:
    injector: _Injector

    @property
    def ops(self) -> int:
        return self.injector.ops

    @property
    def injected(self) -> list[str]:
        return self.injector.injected


class FaultyStore(_Faulty):
    """A ``Store`` around ``inner`` with one fault at operation ``at`` (None: never)."""

    OPS = ("put", "create", "get", "read", "swap", "exists", "list", "delete")

    def __init__(self, inner: Any, at: int | None = None, fault: str = "raise", delay_s: float = 0.05,
                 counts: Callable[[str, str], bool] = lambda op, key: not key.startswith("lease")):
        self.inner, self.counts = inner, counts
        self.injector = _Injector(at, fault, delay_s)
        self.landed_late: list[threading.Thread] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name not in self.OPS:
            return method

        def op(key: str = "", *args: Any) -> Any:
            fault = self.injector.next(f"{name} {key}") if self.counts(name, key) else None
            return self._do(fault, lambda: method(key, *args), f"{name} {key}")
        return op

    def _do(self, fault: str | None, run: Callable[[], Any], what: str) -> Any:
        delay = self.injector.delay_s
        if fault == "raise":
            raise InjectedFault(f"injected: {what} failed")
        if fault == "unknown":
            run()
            raise InjectedFault(f"injected: {what} landed, but the answer was lost")
        if fault == "cancel":
            late = threading.Thread(target=lambda: (time.sleep(delay), _quietly(run)), daemon=True)
            late.start()
            self.landed_late.append(late)
            raise asyncio.CancelledError(f"injected: caller cancelled during {what}")
        if fault == "delay":
            time.sleep(delay)
        return run()

    def __str__(self) -> str:
        return f"faulty {self.inner}"


def _quietly(run: Callable[[], Any]) -> None:
    try:
        run()
    except Exception:  # noqa: BLE001 - a late landing that fails is just one that never landed
        pass


class Severable:
    """A store that stops answering for good once ``sever()`` is called: a crashed process's view of it
    (nothing it still has queued or in flight reaches the store after the crash)."""

    def __init__(self, inner: Any):
        self.inner, self.severed = inner, False

    def sever(self) -> None:
        self.severed = True

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def op(*args: Any) -> Any:
            if self.severed:
                raise InjectedFault(f"crashed: {name} never reaches the store")
            return method(*args)
        return op


class FaultyToolHost(_Faulty):
    """A tool host (``ToolHost``) whose ``execute`` fails at call ``at``; everything else passes through."""

    def __init__(self, inner: Any, at: int | None = None, fault: str = "raise", delay_s: float = 0.05,
                 counts: Callable[[Any, str | None], bool] = lambda call, key: True):
        self.inner, self.counts = inner, counts
        self.injector = _Injector(at, fault, delay_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def execute(self, source: str, session_id: str, call: Any, key: str | None = None,
                      epoch: int | None = None, *where: Any) -> Any:
        fault = self.injector.next(f"execute {call.name} key={key}") if self.counts(call, key) else None

        def run() -> Any:
            return self.inner.execute(source, session_id, call, key, epoch, *where)
        if fault == "raise":
            raise ConnectionError(f"injected: tool host unreachable for {call.name}")
        if fault == "unknown":
            await run()
            raise ConnectionError(f"injected: {call.name} ran, but the answer was lost")
        if fault == "cancel":
            asyncio.get_running_loop().create_task(_late(run, self.injector.delay_s))
            raise asyncio.CancelledError(f"injected: caller cancelled during {call.name}")
        if fault == "delay":
            await asyncio.sleep(self.injector.delay_s)
        return await run()


async def _late(run: Callable[[], Any], delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    try:
        await run()
    except Exception:  # noqa: BLE001
        pass


class LeaseWall:
    """A wall clock for coordinators' leases (``Coordinator(wall=...)``) that a test moves past a crashed
    coordinator's lease (``lapse``) instead of waiting it out. Equivalent to waiting only once the
    crashed coordinator can neither renew nor write: cut its store connection first."""

    def __init__(self, lease_s: float, skew_s: float):
        self.step, self.offset = lease_s + skew_s, 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def lapse(self) -> None:
        self.offset += self.step
