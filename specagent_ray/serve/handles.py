"""One calling convention for deployments, whether they run in Serve or in this process.

``await h.method(*args)`` calls the method; ``h.routed(session_id)`` tags calls with that id, which a
session-aware router would use to pick one replica (a no-op in process; Serve's default router ignores it). Tests and the coordinator's unit tier use
``Local``; the served app uses ``Served`` over a ``DeploymentHandle``.
"""

from __future__ import annotations

import inspect
import zlib
from typing import Any


def lane_of(session_id: str, lanes: int) -> int:
    """The lane (engine batcher, tool host shard) a session keeps for life: a stable hash of its id,
    the same in every process and after a restart."""
    return zlib.crc32(session_id.encode()) % lanes


class Served:
    def __init__(self, handle: Any):
        self._handle = handle

    def routed(self, session_id: str) -> Served:
        return Served(self._handle.options(session_id=session_id))

    def __getattr__(self, name: str):
        method = getattr(self._handle, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
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
