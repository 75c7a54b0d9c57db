"""Tools served by an MCP server, over stdio or streamable HTTP, through the ``mcp`` SDK (2.x).

Tiers (and so effects) come from the server's annotations only when the server is trusted
(tools/tiers.py ``tier_from_annotations``): the MCP spec says annotations from untrusted servers are
hints that must not drive decisions, and a wrongly READ tool would run before review. An untrusted
server's tools, and unknown ones, are WRITE; the operator's overrides always win.

Servers crash and come back: a dropped connection is reopened, with a bounded backoff, and the tools are
listed again. ``McpToolbox`` says what that means for the calls in flight, and for a write above all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

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

from ..protocol.types import Effect, Observation, Tier, ToolCall
from .mcp_session import Lost, McpConnection, error_line
from .tiers import hints_of, tool_tier

log = logging.getLogger(__name__)
IDEMPOTENCY_META = "specagent/idempotency-key"  # a _meta key (MCP: "prefix/name" outside the reserved prefixes)

# A paginating server that never stops sending cursors must not hang start().
_MAX_TOOL_PAGES = 1000
T = TypeVar("T")


class McpUnavailable(RuntimeError):
    """The MCP server could not be reached or stopped answering. The message is one line naming the server."""


class McpOutcomeUnknown(McpUnavailable):
    """A call with an idempotency key was sent, and its connection was lost (or no answer came in time)
    before its result: it may have had its effect. The toolbox never sends it again."""


def effect_of(name: str, read_only_hint: bool | None, trusted: bool, overrides: Mapping[str, str]) -> Effect:
    """Per-tool override ("read"/"write"/"critical") always wins; else READ only if the server is trusted
    AND read_only_hint is True; else WRITE (unknown/unannotated tools are WRITE)."""
    return tool_tier(name, (read_only_hint, None, None, None), trusted, overrides).effect


@dataclass(frozen=True)
class McpTool:
    """One tool as the server listed it: its four annotation hints as listed, and the tier and effect
    this toolbox decided for it, which agree (``tier`` defaults to the effect's)."""

    name: str
    parameters: dict[str, Any]  # the tool's inputSchema (JSON schema object)
    effect: Effect
    read_only_hint: bool | None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None
    tier: Tier | None = None

    def __post_init__(self) -> None:
        if self.tier is None:
            object.__setattr__(self, "tier", Tier.of(self.effect))
        elif self.tier.effect is not self.effect:
            raise ValueError(f"tool {self.name!r}: tier {self.tier.value} and effect {self.effect.value} disagree")


class McpToolbox:
    """A connection to one MCP server, over stdio (``command``) or streamable HTTP (``url``), reopened
    when it drops.

    Guarantees:

    - after :meth:`start`, ``catalog`` lists every tool the server offers (all pages), each with the
      effect :func:`effect_of` decides;
    - :meth:`call` never raises for a tool-level failure: ``isError`` results, protocol errors the
      server returns for a call (bad arguments, say) and calls to tools missing from ``catalog`` all
      become ``Observation(error=True)`` whose content names the tool;
    - transport failures (cannot spawn or connect, connection lost, no answer within ``timeout_s``)
      raise :class:`McpUnavailable` with a one-line message naming the server, or, when the toolbox has a
      ``name`` (a served tool source), naming only that: the command line and URL never leave the server,
      neither in exceptions nor in observations;
    - the connection stays open between calls, and any number of asyncio tasks may call concurrently;
    - between :meth:`start` and :meth:`close`, a connection that dropped is reopened by the next call that
      needs it (stdio: a new server process), one reopening at a time. An attempt that follows a failed
      one waits ``backoff_s``, doubling up to ``max_backoff_s`` (a success resets it); a call gives up
      with McpUnavailable when its next attempt would begin more than ``reconnect_s`` after it asked.
      The tools are listed again into ``catalog``, and a change is logged in one warning line; whoever
      copied the old catalog keeps it (the coordinator gives the new one to new sessions only);
    - a call without an idempotency key, to a tool ``catalog`` says is READ, whose connection dropped
      is sent once more after the reopening, never more. A call that timed out is not sent again, and
      does not reopen the connection (a slow tool is no dead server);
    - a call with an idempotency key is sent at most once. It first checks its connection (one page of
      tools/list), so a server that died while idle is reopened before the call leaves; once it has left,
      a lost connection or no answer within ``timeout_s`` raises :class:`McpOutcomeUnknown`;
    - a call without an idempotency key to a tool that an earlier catalog listed as READ and the current
      one as WRITE is refused, never sent: its caller still classifies it from the catalog it began
      with, and would run a write unreviewed.
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
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
        reconnect_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if (command is None) == (url is None) or command == []:
            raise ValueError("McpToolbox needs exactly one of command=[...] (stdio) or url=... (streamable HTTP)")
        if not 0 < backoff_s <= max_backoff_s:
            raise ValueError(f"need 0 < backoff_s <= max_backoff_s, not {backoff_s} and {max_backoff_s}")
        self.overrides = dict(overrides or {})
        for tool, value in self.overrides.items():
            if value not in ("read", "write", "critical"):
                raise ValueError(f"override for tool {tool!r} must be 'read', 'write' or 'critical', not {value!r}")
        self.command, self.url, self.trusted, self.timeout_s = command, url, trusted, timeout_s
        self.backoff_s, self.max_backoff_s, self.reconnect_s = backoff_s, max_backoff_s, reconnect_s
        self._clock, self._sleep = clock, sleep
        self.server = url if url is not None else shlex.join(command or [])
        self.name = name
        self.label = f"tool source {name!r}" if name is not None else f"MCP server {self.server}"
        self.catalog: dict[str, McpTool] = {}
        self.reconnects = 0  # connections opened after the first
        self._conn: McpConnection | None = None
        self._open = False  # between start() and close(): a dropped connection is reopened
        self._reopening = asyncio.Lock()
        self._failures = 0  # failed attempts since the last connection was opened
        self._retry_at = -math.inf  # no attempt before this clock() time
        self._lost = ""  # why the last connection ended, or why the last attempt failed
        self._were_read: set[str] = set()  # tools some catalog of this toolbox listed as READ

    # Lifecycle.

    async def start(self) -> None:
        """Connect, negotiate, and list the tools into ``catalog``; raises McpUnavailable on failure."""
        if self._open or self._conn is not None:
            raise RuntimeError(f"McpToolbox for {self.server} is already started")
        try:
            self._conn, catalog = await self._connect()
        except Lost as exc:
            raise self._unavailable(str(exc)) from None
        self._adopt(catalog)
        self._open = True

    async def close(self) -> None:
        """Close the connection (stdio: the server process is stopped); nothing reopens it. Safe twice."""
        self._open = False
        conn, self._conn, self._lost = self._conn, None, ""
        if conn is not None:
            await conn.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def _connect(self) -> tuple[McpConnection, dict[str, McpTool]]:
        conn = McpConnection(self._new_client(), self.server)
        try:
            return conn, await conn.open(self._list_catalog, self.timeout_s)
        except Lost as exc:
            self._lost = str(exc)
            raise

    async def _connection(self) -> McpConnection:
        """The live connection, reopened first if it dropped (see the class doc); raises McpUnavailable."""
        conn = self._conn
        if self._open and conn is not None and conn.alive:
            return conn
        deadline = self._clock() + self.reconnect_s
        async with self._reopening:
            conn = self._conn
            if self._open and conn is not None and conn.alive:
                return conn  # another call reopened it while this one waited
            if conn is not None:
                self._conn, self._lost = None, conn.lost or self._lost or "connection lost"
                log.warning("MCP server %s (tool source %r) lost its connection (%s); reconnecting",
                            self.server, self.name, self._lost)
                await conn.close()  # stdio: the old process is stopped, if it still runs
            while self._open and max(self._clock(), self._retry_at) <= deadline:
                conn = await self._attempt()
                if conn is not None:
                    return conn
            if not self._open:
                raise self._unavailable("not connected (start() not called, or closed)")
            raise self._unavailable(f"{self._lost}; not reconnected yet (attempt {self._failures + 1} "
                                    f"in {max(self._retry_at - self._clock(), 0.0):.1f}s)")

    async def _attempt(self) -> McpConnection | None:
        """One reconnection attempt, after the backoff's wait: the new connection, or None if it failed."""
        wait = self._retry_at - self._clock()
        if wait > 0:
            await self._sleep(wait)
            if not self._open:
                return None
        try:
            conn, catalog = await self._connect()
        except Lost as exc:
            self._failures += 1
            delay = min(self.backoff_s * 2 ** (self._failures - 1), self.max_backoff_s)
            self._retry_at = self._clock() + delay
            log.warning("MCP server %s (tool source %r): reconnection attempt %d failed (%s); next in %.1fs",
                        self.server, self.name, self._failures, exc, delay)
            return None
        if not self._open:  # closed while this attempt connected: leave no server running
            await conn.close()
            return None
        self._conn, self._failures, self._retry_at = conn, 0, -math.inf
        self.reconnects += 1
        self._adopt(catalog)
        log.info("MCP server %s (tool source %r) reconnected", self.server, self.name)
        return conn

    def _adopt(self, catalog: dict[str, McpTool]) -> None:
        old, self.catalog = self.catalog, catalog
        self._were_read |= {name for name, tool in catalog.items() if tool.effect is Effect.READ}
        changed = sorted(name for name in old.keys() | catalog.keys() if old.get(name) != catalog.get(name))
        if old and changed:
            kinds = {"removed": [n for n in changed if n not in catalog], "added": [n for n in changed if n not in old],
                     "changed": [n for n in changed if n in old and n in catalog]}
            log.warning("MCP server %s (tool source %r) came back with other tools: %s; sessions that began "
                        "before keep the tools they began with", self.server, self.name,
                        "; ".join(f"{kind} {', '.join(names)}" for kind, names in kinds.items() if names))

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
        hints = hints_of(tool.annotations)
        tier = tool_tier(tool.name, hints, self.trusted, self.overrides)
        return McpTool(tool.name, dict(tool.input_schema), tier.effect, *hints, tier=tier)

    # Calls.

    async def call(self, call: ToolCall, idempotency_key: str | None = None) -> Observation:
        """Run one tool call. Text contents are joined with newlines; structured content is JSON-dumped
        when there is no text. Tool-level failures are ``error=True`` observations; see the class doc.
        A staged write's idempotency key goes to the server in the request's ``_meta`` under
        ``IDEMPOTENCY_META``, so a server that keeps its own record can refuse a repeat."""
        conn = await self._connection()
        if idempotency_key is not None:
            return await self._call_once(conn, call, idempotency_key)
        refused = self._refused(call, None)
        if refused is not None:
            return refused
        try:
            return await self._send(conn, call, None)
        except _Dropped as exc:
            tool = self.catalog.get(call.name)
            if exc.timed_out or tool is None or tool.effect is not Effect.READ:
                raise self._unavailable(f"{call.name}: {exc}") from None
            log.warning("MCP server %s (tool source %r): read %s lost its connection (%s); sending it once more "
                        "after reconnecting", self.server, self.name, call.name, exc)
        conn = await self._connection()
        refused = self._refused(call, None)  # the server may have come back with other tools
        if refused is not None:
            return refused
        try:
            return await self._send(conn, call, None)
        except _Dropped as exc:
            raise self._unavailable(f"{call.name}: {exc} (retried once; not again)") from None

    async def _call_once(self, conn: McpConnection, call: ToolCall, key: str) -> Observation:
        """A keyed call: checked connection, then sent at most once (see the class doc)."""
        try:
            await self._request(conn, lambda client: client.list_tools())
        except _Dropped as exc:
            if exc.timed_out:
                raise self._unavailable(f"{call.name}: not sent: checking the connection: {exc}") from None
            conn = await self._connection()
        except (MCPError, ValidationError, RuntimeError):
            pass  # an answer, if an odd one: the connection is up
        refused = self._refused(call, key)
        if refused is not None:
            return refused
        try:
            return await self._send(conn, call, {IDEMPOTENCY_META: key})
        except _Dropped as exc:
            raise self._unavailable(f"{call.name}: {exc}", McpOutcomeUnknown) from None

    def _refused(self, call: ToolCall, key: str | None) -> Observation | None:
        """Calls never sent (see the class doc): to a tool the catalog lacks, which has no decided effect,
        and unkeyed calls of a tool that was READ and is WRITE now."""
        tool = self.catalog.get(call.name)
        if tool is None:
            offered = ", ".join(sorted(self.catalog)) or "no tools"
            return Observation(f"unknown tool {call.name!r} on {self.label} (it offers: {offered})", error=True)
        if key is None and tool.effect is Effect.WRITE and call.name in self._were_read:
            return Observation(f"{call.name} on {self.label} became a write when its server came back; "
                               "refused here: sessions that began before treat it as a read", error=True)
        return None

    async def _send(self, conn: McpConnection, call: ToolCall, meta: dict[str, Any] | None) -> Observation:
        try:
            result = await self._request(conn, lambda client: client.call_tool(call.name, call.arguments, meta=meta))
        except MCPError as exc:
            return Observation(f"{call.name} failed: {exc.message}", error=True)
        except (ValidationError, RuntimeError) as exc:
            return Observation(f"{call.name} returned an invalid result: {error_line(exc)}", error=True)
        return Observation(_render(result), error=result.is_error)

    async def _request(self, conn: McpConnection, send: Callable[[Client], Awaitable[T]]) -> T:
        """One request on ``conn``. Raises _Dropped when the connection is lost (and marks it so) or the
        request timed out; the server's own errors and invalid results pass through."""
        client = conn.client
        if client is None or conn.dropped:
            raise _Dropped(conn.lost or "connection lost")
        try:
            return await conn.request(send(client))
        except MCPError as exc:
            if exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                raise
            failure = exc
        except (ValidationError, RuntimeError) as exc:
            if conn.client is not None:  # the SDK raises these for a result that breaks the protocol
                raise
            failure = exc
        except Exception as exc:  # noqa: BLE001 - Lost, and whatever the transport raises when it breaks
            failure = exc
        timed_out = isinstance(failure, MCPError) and failure.code == REQUEST_TIMEOUT
        detail = str(failure) if isinstance(failure, Lost) else error_line(failure)
        if not timed_out:
            conn.dropped, conn.lost = True, conn.lost or detail
        raise _Dropped(detail, timed_out)

    def _unavailable(self, detail: str, kind: type[McpUnavailable] = McpUnavailable) -> McpUnavailable:
        if self.name is None:
            return kind(f"MCP server {self.server} unavailable: {detail}")
        log.warning("MCP server %s (tool source %r) unavailable: %s", self.server, self.name, detail)
        for secret in sorted({self.server, self.url or "", *(self.command or [])}, key=len, reverse=True):
            if len(secret) >= 4 or "/" in secret:
                detail = detail.replace(secret, "<server>")
        return kind(f"tool source {self.name!r} unavailable: {detail}")


class _Dropped(Exception):
    """A request's connection was lost, or (``timed_out``) no answer came within the toolbox's timeout."""

    def __init__(self, detail: str, timed_out: bool = False) -> None:
        super().__init__(detail)
        self.timed_out = timed_out


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
