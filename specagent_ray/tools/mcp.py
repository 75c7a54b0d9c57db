"""Tools served by an MCP server, over stdio or streamable HTTP, through the ``mcp`` SDK (2.x).

Effects come from the server's ``read_only_hint`` annotations only when the server is trusted: the MCP
spec says annotations from untrusted servers are hints that must not drive decisions, and a wrongly
READ tool would run before review. Anything unannotated or unknown is WRITE.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    ContentBlock,
    Tool,
)
from pydantic import ValidationError

from ..protocol.types import Effect, Observation, ToolCall

log = logging.getLogger(__name__)
IDEMPOTENCY_META = "specagent/idempotency-key"  # a _meta key (MCP: "prefix/name" outside the reserved prefixes)

# A paginating server that never stops sending cursors must not hang start().
_MAX_TOOL_PAGES = 1000
# How long close() lets the SDK wind the connection down (stdio: close stdin, wait, kill) before cancelling.
_CLOSE_GRACE_S = 10.0


class McpUnavailable(RuntimeError):
    """The MCP server could not be reached or stopped answering. The message is one line naming the server."""


def effect_of(name: str, read_only_hint: bool | None, trusted: bool, overrides: Mapping[str, str]) -> Effect:
    """Per-tool override ("read"/"write") always wins; else READ only if the server is trusted AND
    read_only_hint is True; else WRITE (unknown/unannotated tools are WRITE)."""
    if name in overrides:
        return Effect(overrides[name])
    return Effect.READ if trusted and read_only_hint is True else Effect.WRITE


@dataclass(frozen=True)
class McpTool:
    """One tool as the server listed it, with the effect this toolbox decided for it."""

    name: str
    parameters: dict[str, Any]  # the tool's inputSchema (JSON schema object)
    effect: Effect
    read_only_hint: bool | None


class McpToolbox:
    """One connection to one MCP server, over stdio (``command``) or streamable HTTP (``url``).

    Guarantees:

    - after :meth:`start`, ``catalog`` lists every tool the server offers (all pages), each with the
      effect :func:`effect_of` decides;
    - :meth:`call` never raises for a tool-level failure: ``isError`` results, protocol errors the
      server returns for a call (bad arguments, say) and calls to tools missing from ``catalog`` all
      become ``Observation(error=True)`` whose content names the tool;
    - transport failures (cannot spawn or connect, connection lost, no answer within ``timeout_s``)
      raise :class:`McpUnavailable` with a one-line message naming the server, or, when the toolbox has a
      ``name`` (a served tool source), naming only that: the command line and URL never leave the server;
    - the connection stays open between calls, and any number of asyncio tasks may call concurrently.
    """

    def __init__(
        self,
        *,
        command: list[str] | None = None,
        url: str | None = None,
        trusted: bool = False,
        overrides: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        name: str | None = None,
    ) -> None:
        if (command is None) == (url is None) or command == []:
            raise ValueError("McpToolbox needs exactly one of command=[...] (stdio) or url=... (streamable HTTP)")
        self.overrides = dict(overrides or {})
        for tool, value in self.overrides.items():
            if value not in ("read", "write"):
                raise ValueError(f"override for tool {tool!r} must be 'read' or 'write', not {value!r}")
        self.command, self.url, self.trusted, self.timeout_s = command, url, trusted, timeout_s
        self.server = url if url is not None else shlex.join(command or [])
        self.name = name
        self.catalog: dict[str, McpTool] = {}
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lost = ""  # why the connection ended, once it has

    # Lifecycle. The SDK's transports hold anyio task groups and cancel scopes, which must be entered
    # and exited in the same task; one owner task therefore holds the Client open until close().

    async def start(self) -> None:
        """Connect, negotiate, and list the tools into ``catalog``; raises McpUnavailable on failure."""
        if self._owner is not None:
            raise RuntimeError(f"McpToolbox for {self.server} is already started")
        self._stop, self._lost = asyncio.Event(), ""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp:{self.server}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.timeout_s)
        except TimeoutError:
            ready.cancel()  # nobody awaits it any more; a late failure must not be logged as unretrieved
            await self.close()
            raise self._unavailable(f"no answer within {self.timeout_s:g}s while connecting") from None
        except McpUnavailable:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the connection (stdio: the server process is stopped). Safe to call twice."""
        owner, self._owner = self._owner, None
        if owner is None:
            return
        self._stop.set()
        if self._client is None:
            owner.cancel()  # still connecting (or already gone): nothing graceful to wait for
        done, _ = await asyncio.wait({owner}, timeout=_CLOSE_GRACE_S)
        if not done:
            owner.cancel()
            await asyncio.wait({owner})

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """The owner task: holds the SDK contexts open from connect until close() or connection loss."""
        try:
            async with self._new_client() as client:
                self.catalog = await self._list_catalog(client)
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - every SDK/transport failure becomes one McpUnavailable
            self._lost = _error_line(exc)
            if not ready.done():
                ready.set_exception(self._unavailable(self._lost))
        finally:
            self._client = None
            if not ready.done():  # cancelled before connecting; start() reports its own timeout
                ready.cancel()

    def _new_client(self) -> Client:
        # cache=None: a toolbox must see the server's current tool list, never a cached one.
        if self.url is not None:
            return Client(self.url, read_timeout_seconds=self.timeout_s, cache=None)
        head, *args = self.command or []
        return Client(StdioServerParameters(command=head, args=args), read_timeout_seconds=self.timeout_s, cache=None)

    async def _list_catalog(self, client: Client) -> dict[str, McpTool]:
        catalog: dict[str, McpTool] = {}
        cursor: str | None = None
        for _ in range(_MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            catalog.update((tool.name, self._describe(tool)) for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return catalog
        raise RuntimeError(f"tools/list still paginating after {_MAX_TOOL_PAGES} pages")

    def _describe(self, tool: Tool) -> McpTool:
        hint = tool.annotations.read_only_hint if tool.annotations is not None else None
        effect = effect_of(tool.name, hint, self.trusted, self.overrides)
        return McpTool(tool.name, dict(tool.input_schema), effect, hint)

    # Calls.

    async def call(self, call: ToolCall, idempotency_key: str | None = None) -> Observation:
        """Run one tool call. Text contents are joined with newlines; structured content is JSON-dumped
        when there is no text. Tool-level failures are ``error=True`` observations; see the class doc.
        A staged write's idempotency key goes to the server in the request's ``_meta`` under
        ``IDEMPOTENCY_META``, so a server that keeps its own record can refuse a repeat."""
        if call.name not in self.catalog:
            # Refused locally: a tool the catalog lacks has no decided effect, so it is never sent.
            offered = ", ".join(sorted(self.catalog)) or "no tools"
            return Observation(f"unknown tool {call.name!r} on MCP server {self.server} (it offers: {offered})",
                               error=True)
        client = self._live_client()
        try:
            meta = {IDEMPOTENCY_META: idempotency_key} if idempotency_key else None
            result = await self._until_lost(client.call_tool(call.name, call.arguments, meta=meta))
        except McpUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted into tool-level and transport failures below
            return self._failed(call.name, exc)
        return Observation(_render(result), error=result.is_error)

    def _failed(self, name: str, exc: Exception) -> Observation:
        """A tool-level failure as an error observation; raises McpUnavailable when the server is gone."""
        if isinstance(exc, MCPError) and exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
            return Observation(f"{name} failed: {exc.message}", error=True)
        if isinstance(exc, ValidationError | RuntimeError) and self._client is not None:
            # The SDK raises these for a result that breaks the protocol or the tool's own output schema.
            return Observation(f"{name} returned an invalid result: {_error_line(exc)}", error=True)
        raise self._unavailable(f"{name}: {_error_line(exc)}") from exc

    def _live_client(self) -> Client:
        if self._client is None:
            raise self._unavailable(self._lost or "not connected (call start() first)")
        return self._client

    async def _until_lost(self, request: Any) -> CallToolResult:
        """Await ``request`` unless the owner task ends first, so a dead connection fails fast, never hangs."""
        owner = self._owner
        task = asyncio.ensure_future(request)
        if owner is None:
            task.cancel()
            raise self._unavailable("closed")
        try:
            await asyncio.wait({task, owner}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            return task.result()
        raise self._unavailable(self._lost or "connection closed during the call")

    def _unavailable(self, detail: str) -> McpUnavailable:
        if self.name is None:
            return McpUnavailable(f"MCP server {self.server} unavailable: {detail}")
        log.warning("MCP server %s (tool source %r) unavailable: %s", self.server, self.name, detail)
        for secret in sorted({self.server, self.url or "", *(self.command or [])}, key=len, reverse=True):
            if len(secret) >= 4 or "/" in secret:
                detail = detail.replace(secret, "<server>")
        return McpUnavailable(f"tool source {self.name!r} unavailable: {detail}")


def _render(result: CallToolResult) -> str:
    texts = [_block_text(block) for block in result.content]
    text = "\n".join(texts)
    if not text and result.structured_content is not None:
        return json.dumps(result.structured_content, sort_keys=True, default=str)
    return text


def _block_text(block: ContentBlock) -> str:
    if block.type == "text":
        return block.text
    # Non-text blocks (images, audio, resources) cannot reach a text policy; say that they were there.
    return f"[{block.type} content omitted]"


def _error_line(exc: BaseException) -> str:
    """The innermost useful message of ``exc`` on one line; task-group failures arrive wrapped in groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    detail = " ".join(str(exc).split()) or "no details"
    return f"{type(exc).__name__}: {detail}"
