"""The two deployments of ``bench calls`` (``replica_calls.py``): an echo replica, and a caller replica that times
echoes to it through a Serve handle or over a plain socket. Both take ``app.REPLICA``'s settings, and the
caller's handle is ``by_grpc``, as the coordinator's handles to its tool hosts and engines are."""

from __future__ import annotations

import asyncio
import resource
import struct
import time
from typing import Any

from ray import serve

from ...serve.app import QUIET, REPLICA
from ...serve.core.handles import by_grpc

HEADER = 4  # bytes: the payload's length, big-endian


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _framed_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            (n,) = struct.unpack("!I", await reader.readexactly(HEADER))
            writer.write(struct.pack("!I", n) + await reader.readexactly(n))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


@serve.deployment(name="CallEcho", ray_actor_options=REPLICA, logging_config=QUIET, max_ongoing_requests=10_000)
class CallEcho:
    async def echo(self, data: bytes) -> bytes:
        return data

    async def listen(self) -> int:
        """Starts the plain-socket echo on loopback (once) and returns its port."""
        if not hasattr(self, "_server"):
            self._server = await asyncio.start_server(_framed_echo, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    def cpu(self) -> float:
        return cpu_s()


@serve.deployment(name="CallProbe", ray_actor_options=REPLICA, logging_config=QUIET)
class CallProbe:
    def __init__(self, echo: Any):
        self.echo = by_grpc(echo)
        self.send = self.echo.echo  # the method's handle made once, as the coordinator's batchers hold theirs

    async def measure(self, way: str, calls: int, concurrency: int, size: int) -> dict[str, float]:
        """CPU and wall seconds of this process, and the echo replica's CPU seconds, for ``calls`` echoes
        of ``size`` bytes, one way (the echo's figure includes the one call that reads it)."""
        payload, each = b"x" * size, max(calls // concurrency, 1)
        if way == "serve":
            async def lane() -> None:
                for _ in range(each):
                    await self.send.remote(payload)
        else:
            port = await self.echo.listen.remote()
            conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(concurrency)]

            async def lane() -> None:
                reader, writer = conns.pop()
                for _ in range(each):
                    writer.write(struct.pack("!I", size) + payload)
                    await writer.drain()
                    (n,) = struct.unpack("!I", await reader.readexactly(HEADER))
                    await reader.readexactly(n)
                writer.close()
        callee = await self.echo.cpu.remote()
        before, start = cpu_s(), time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        used, wall = cpu_s() - before, time.perf_counter() - start
        return {"calls": each * concurrency, "cpu_s": used, "wall_s": wall,
                "callee_cpu_s": await self.echo.cpu.remote() - callee}
