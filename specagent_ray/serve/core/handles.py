"""One calling convention for deployments, whether they run in Serve or in this process.

``await h.method(*args)`` calls the method; ``h.routed(session_id)`` tags calls with that id, which a
session-aware router would use to pick one replica (a no-op in process; Serve's default router ignores it). Tests and the coordinator's unit tier use
``Local``; the served app uses ``Served`` over a ``DeploymentHandle``.
"""

from __future__ import annotations

import asyncio
import inspect
import zlib
from collections import Counter
from typing import Any


def lane_of(session_id: str, lanes: int) -> int:
    """The lane (engine batcher, tool host shard) a session keeps for life: a stable hash of its id,
    the same in every process and after a restart."""
    return zlib.crc32(session_id.encode()) % lanes


def by_grpc(handle: Any) -> Any:
    """``handle`` with its calls sent over the callee replica's inter-deployment gRPC server instead of as
    Ray actor calls (``_by_reference=False``). Serve routes them the same way (router, queue limits,
    sticky ``session_id``); a replica's death is still a ``RayActorError`` and a callee's exception is
    still raised in the caller. What changes is cost: an actor call is a streaming Ray task through the
    object store, and at one shard's step rate it took most of the coordinator's CPU (docs/serving.md).
    Results come back by value, never as an ``ObjectRef`` to pass on; messages are bounded by
    ``RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH``, which ``app.REPLICA`` sets in every replica."""
    return handle.options(_by_reference=False)


class Served:
    """A ``DeploymentHandle``; ``counts``, if given, counts the calls made through it by method."""

    def __init__(self, handle: Any, counts: Counter[str] | None = None):
        self._handle, self._counts = handle, counts

    def routed(self, session_id: str) -> Served:
        return Served(self._handle.options(session_id=session_id), self._counts)

    def __getattr__(self, name: str):
        method, counts = getattr(self._handle, name), self._counts

        async def call(*args: Any, **kwargs: Any) -> Any:
            if counts is not None:
                counts[name] += 1
            return await method.remote(*args, **kwargs)
        return call


class Local:
    def __init__(self, obj: Any):
        self._obj = obj

    def routed(self, session_id: str) -> Local:
        return self

    def __getattr__(self, name: str):
        async def call(*args: Any, **kwargs: Any) -> Any:
            result = getattr(self._obj, name)(*args, **kwargs)  # looked up per call, like a live replica
            return await result if inspect.isawaitable(result) else result
        return call


class NoReplica(ConnectionError):
    """No replica of a deployment took a call within the caller's patience: none is running (it cannot
    start, or every one is restarting). The call never ran anywhere."""


async def taken(response: Any, patience_s: float) -> Any:
    """The result of a Serve ``DeploymentResponse``; ``NoReplica`` if no replica takes the call within
    ``patience_s``. Serve itself queues a call until some replica runs, which for a deployment that
    cannot start is forever; a call already taken by a replica is awaited without a bound."""
    try:  # Serve's own step of the await: resolving the call to a replica
        async with asyncio.timeout(patience_s):  # not wait_for: it can swallow the caller's cancel
            await response._fetch_future_result_async()
    except asyncio.TimeoutError:
        response.cancel()  # still queued: cancelling the assignment stops it from ever running
        raise NoReplica(f"no replica took the call within {patience_s:g} s") from None
    return await response
