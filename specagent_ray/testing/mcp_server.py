"""A small real MCP server for tests: a toy bank with annotated, unannotated and failing tools.

Run it over stdio (the default) or streamable HTTP on ``127.0.0.1:PORT/mcp``::

    python -m specagent_ray.testing.mcp_server
    python -m specagent_ray.testing.mcp_server --http PORT
    python -m specagent_ray.testing.mcp_server --page-size 2   # tools/list in pages of two

State lives in memory and dies with the process. ``transfer_count`` reports how many times
``transfer`` ran, so a test can count writes on the tool side instead of trusting the client.

For tests that kill the server and start it again (the state above dies with it):

- ``--journal PATH`` appends one JSON line per tool call, as it begins: ``{"pid", "name", "arguments",
  "key"}`` (``key``: the call's idempotency key, or null). The file outlives the process, so a test
  counts the executions of a write across restarts;
- ``--hold PATH`` makes every tool call, once journaled, wait while PATH exists: a call stays in flight
  until the test removes the file (or kills the process);
- ``--v2-if PATH``: when PATH exists as the server starts, it serves another catalog: ``fail`` is gone,
  and ``get_balance`` has lost its read-only annotation.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import anyio
from mcp.server.context import (
    CallNext,
    HandlerResult,
    ServerMiddleware,
    ServerRequestContext,
)
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ListToolsResult, ToolAnnotations

from ..tools.mcp import IDEMPOTENCY_META  # the _meta entry McpToolbox sends with a staged write

READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)
RATES = {"EUR": 0.92, "GBP": 0.79, "JPY": 151.3}


def build_server(page_size: int | None = None, journal: Path | None = None, hold: Path | None = None,
                 v2: bool = False) -> MCPServer:
    """A fresh server with its own balances and transfer counter; ``page_size`` paginates tools/list;
    ``journal``, ``hold`` and ``v2`` are the module doc's ``--journal``, ``--hold`` and ``--v2-if``."""
    # WARNING keeps per-call INFO lines off stderr; in stdio mode nothing may ever go to stdout.
    mcp = MCPServer("specagent-test-bank", log_level="WARNING")
    if page_size is not None:
        mcp.middleware.append(paginate_tools(page_size))
    if journal is not None or hold is not None:
        mcp.middleware.append(journal_calls(journal, hold))
    balances = {"alice": 100, "bob": 50}
    transfers = 0

    @mcp.tool(annotations=None if v2 else READ_ONLY)
    def get_balance(account: str) -> int:
        """The balance of an account."""
        if account not in balances:
            raise ToolError(f"no such account: {account}")
        return balances[account]

    @mcp.tool(annotations=DESTRUCTIVE)
    def transfer(source: str, target: str, amount: int, ctx: Context) -> str:
        """Move ``amount`` from ``source`` to ``target``."""
        nonlocal transfers
        transfers += 1  # counted even when refused: the tool ran, which is what a write test checks
        for account in (source, target):
            if account not in balances:
                raise ToolError(f"no such account: {account}")
        if amount <= 0 or balances[source] < amount:
            raise ToolError(f"cannot transfer {amount} from {source}")
        balances[source] -= amount
        balances[target] += amount
        key = (ctx.request_context.meta or {}).get(IDEMPOTENCY_META)  # echoed, so a test sees it arrive
        return f"moved {amount} from {source} to {target}" + (f" (idempotency key {key})" if key else "")

    @mcp.tool()
    def lookup_rate(currency: str) -> float:
        """USD exchange rate of a currency. Deliberately unannotated."""
        if currency not in RATES:
            raise ToolError(f"unknown currency: {currency}")
        return RATES[currency]

    def fail(reason: str) -> str:
        """Always fails with ``reason`` as a tool error (isError), never a protocol error."""
        raise ToolError(reason)

    if not v2:
        mcp.tool(annotations=READ_ONLY)(fail)

    @mcp.tool(annotations=READ_ONLY)
    def transfer_count() -> int:
        """How many times ``transfer`` has run in this process."""
        return transfers

    return mcp


def paginate_tools(page_size: int) -> ServerMiddleware[Any]:
    """Middleware that serves tools/list in pages; the cursor is the index of the page's first tool."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/list":
            return result
        if isinstance(result, ListToolsResult):  # handlers may answer with a model; the runner hands back dicts
            result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        assert isinstance(result, dict)
        start = int((ctx.params or {}).get("cursor") or 0)
        end = start + page_size
        page = {**result, "tools": result["tools"][start:end]}
        page.pop("nextCursor", None)
        if end < len(result["tools"]):
            page["nextCursor"] = str(end)
        return page

    return middleware


def journal_calls(journal: Path | None, hold: Path | None) -> ServerMiddleware[Any]:
    """Middleware that journals each tools/call as it begins, then holds it while ``hold`` exists."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call":
            params = ctx.params or {}
            if journal is not None:
                entry = {"pid": os.getpid(), "name": params.get("name"), "arguments": params.get("arguments"),
                         "key": (params.get("_meta") or {}).get(IDEMPOTENCY_META)}
                with journal.open("a") as out:  # one short append per line: lines never interleave
                    out.write(json.dumps(entry) + "\n")
            while hold is not None and hold.exists():
                await anyio.sleep(0.01)
        return await call_next(ctx)

    return middleware


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--page-size", type=int, help="list tools in pages of this size")
    parser.add_argument("--journal", type=Path, help="append one JSON line per tool call to this file")
    parser.add_argument("--hold", type=Path, help="tool calls wait while this file exists")
    parser.add_argument("--v2-if", type=Path, metavar="PATH", help="serve the second catalog if PATH exists")
    args = parser.parse_args(argv)
    server = build_server(args.page_size, args.journal, args.hold, args.v2_if is not None and args.v2_if.exists())
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http, streamable_http_path="/mcp")


if __name__ == "__main__":
    main()
