"""A small real MCP server for tests: a toy bank with annotated, unannotated and failing tools.

Run it over stdio (the default) or streamable HTTP on ``127.0.0.1:PORT/mcp``::

    python -m specagent_ray.testing.mcp_server
    python -m specagent_ray.testing.mcp_server --http PORT
    python -m specagent_ray.testing.mcp_server --page-size 2   # tools/list in pages of two

State lives in memory and dies with the process. ``transfer_count`` reports how many times
``transfer`` ran, so a test can count writes on the tool side instead of trusting the client.
"""

from __future__ import annotations

import argparse
from typing import Any

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


def build_server(page_size: int | None = None) -> MCPServer:
    """A fresh server with its own balances and transfer counter; ``page_size`` paginates tools/list."""
    # WARNING keeps per-call INFO lines off stderr; in stdio mode nothing may ever go to stdout.
    mcp = MCPServer("specagent-test-bank", log_level="WARNING")
    if page_size is not None:
        mcp.middleware.append(paginate_tools(page_size))
    balances = {"alice": 100, "bob": 50}
    transfers = 0

    @mcp.tool(annotations=READ_ONLY)
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

    @mcp.tool(annotations=READ_ONLY)
    def fail(reason: str) -> str:
        """Always fails with ``reason`` as a tool error (isError), never a protocol error."""
        raise ToolError(reason)

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--page-size", type=int, help="list tools in pages of this size")
    args = parser.parse_args(argv)
    server = build_server(args.page_size)
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http, streamable_http_path="/mcp")


if __name__ == "__main__":
    main()
