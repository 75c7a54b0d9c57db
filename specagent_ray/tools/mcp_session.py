"""One connection to an MCP server, for ``McpToolbox`` (mcp.py), which replaces a connection that drops.

The SDK's transports hold anyio task groups and cancel scopes, which must be entered and exited in the
same task; an owner task therefore holds the ``Client`` open until :meth:`McpConnection.close`.

Guarantees: :meth:`McpConnection.open` returns what ``prepare(client)`` returned once the server has
answered it, or raises :class:`Lost` having stopped all it started (also when it times out);
:meth:`McpConnection.request` never outlives the connection: it raises :class:`Lost` as soon as the owner
task ends, instead of hanging; :meth:`McpConnection.close` ends the owner task (stdio: the SDK stops the
server process) in bounded time, and is safe to call twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp import Client

T = TypeVar("T")

# How long close() lets the SDK wind the connection down (stdio: close stdin, wait, kill) before cancelling.
_CLOSE_GRACE_S = 10.0


class Lost(Exception):
    """The connection could not be opened, or it ended. The message is one line; it may name the server."""


class McpConnection:
    def __init__(self, client: Client, label: str) -> None:
        self._unopened: Client | None = client
        self.label = label
        self.client: Client | None = None  # set while the connection is up
        self.lost = ""  # why the connection ended, once it has
        self.dropped = False  # a request saw it drop: nothing more is sent on it
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.dropped and self._owner is not None and not self._owner.done()

    async def open(self, prepare: Callable[[Client], Awaitable[T]], timeout_s: float) -> T:
        client, self._unopened = self._unopened, None
        if client is None:
            raise RuntimeError(f"MCP connection to {self.label} was opened before")
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(client, prepare, ready), name=f"mcp:{self.label}")
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: it can swallow the caller's cancel
                return await asyncio.shield(ready)
        except TimeoutError:
            ready.cancel()  # nobody awaits it any more; a late failure must not be logged as unretrieved
            await self.close()
            raise Lost(f"no answer within {timeout_s:g}s while connecting") from None
        except BaseException:  # Lost, or the caller was cancelled: leave no server process behind
            await asyncio.shield(self.close())
            raise

    async def close(self) -> None:
        owner, self._owner = self._owner, None
        if owner is None:
            return
        self._stop.set()
        if self.client is None:
            owner.cancel()  # still connecting (or already gone): nothing graceful to wait for
        done, _ = await asyncio.wait({owner}, timeout=_CLOSE_GRACE_S)
        if not done:
            owner.cancel()
            await asyncio.wait({owner})

    async def request(self, request: Awaitable[T]) -> T:
        """Await ``request`` unless the owner task ends first, so a dead connection fails fast, never hangs."""
        owner = self._owner
        task = asyncio.ensure_future(request)
        if owner is None or owner.done():
            task.cancel()
            raise Lost(self.lost or "closed")
        try:
            await asyncio.wait({task, owner}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            return task.result()
        raise Lost(self.lost or "connection closed during the call")

    async def _own(self, client: Client, prepare: Callable[[Client], Awaitable[Any]],
                   ready: asyncio.Future[Any]) -> None:
        try:
            async with client:
                value = await prepare(client)
                self.client = client
                if not ready.done():
                    ready.set_result(value)
                await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - every SDK/transport failure becomes one Lost
            self.lost = error_line(exc)
            if not ready.done():
                ready.set_exception(Lost(self.lost))
        finally:
            self.client = None
            if not ready.done():  # cancelled before connecting; open() reports its own timeout
                ready.cancel()


def error_line(exc: BaseException) -> str:
    """The innermost useful message of ``exc`` on one line; task-group failures arrive wrapped in groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    detail = " ".join(str(exc).split()) or "no details"
    return f"{type(exc).__name__}: {detail}"
