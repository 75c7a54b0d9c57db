"""McpToolbox against the real test bank server (specagent_ray.testing.mcp_server), over stdio and HTTP.

Decision tested here: a call to a tool the catalog does not list is refused locally with an
``Observation(error=True)`` naming the tool; it never reaches the server and never raises.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from specagent_ray.ports import free_port
from specagent_ray.protocol.types import Effect, ToolCall
from specagent_ray.tools.mcp import McpTool, McpToolbox, McpUnavailable, effect_of

SERVER = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
TOOLS = {"get_balance", "transfer", "lookup_rate", "fail", "transfer_count"}
R, W = Effect.READ, Effect.WRITE


def start_http_server() -> tuple[subprocess.Popen[bytes], str]:
    """The bank server on a free port; returns once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen([*SERVER, "--http", str(port)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("MCP test server did not start") from None
            time.sleep(0.05)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """One HTTP server for the module: its state is shared, so tests that write check deltas."""
    proc, url = start_http_server()
    yield url
    proc.kill()
    proc.wait()


async def count(toolbox: McpToolbox) -> int:
    """Transfers run so far, as the server counts them."""
    obs = await toolbox.call(ToolCall("transfer_count", {}))
    assert not obs.error
    return int(obs.content)


def transfer(source: str, target: str, amount: int) -> ToolCall:
    return ToolCall("transfer", {"source": source, "target": target, "amount": amount})


@pytest.mark.parametrize("name, hint, trusted, overrides, expected", [
    ("t", True, True, {}, R),
    ("t", True, False, {}, W),  # an untrusted server's hints never make a READ
    ("t", False, True, {}, W),
    ("t", None, True, {}, W),  # unannotated
    ("t", None, False, {"t": "read"}, R),  # an override wins over no trust and no hint
    ("t", True, True, {"t": "write"}, W),  # ... and over a trusted read-only hint
    ("t", True, True, {"other": "write"}, R),  # overrides of other tools do not leak
])
def test_effect_of(name, hint, trusted, overrides, expected):
    assert effect_of(name, hint, trusted, overrides) is expected


async def test_stdio_lists_and_calls_tools():
    async with McpToolbox(command=SERVER, trusted=True) as toolbox:
        assert set(toolbox.catalog) == TOOLS
        balance = toolbox.catalog["get_balance"]
        assert balance == McpTool("get_balance", balance.parameters, R, True)
        assert balance.parameters["type"] == "object" and "account" in balance.parameters["properties"]
        assert (await toolbox.call(ToolCall("get_balance", {"account": "alice"}))).content == "100"
        moved = await toolbox.call(transfer("alice", "bob", 30))
        assert not moved.error and "moved 30" in moved.content
        assert (await toolbox.call(ToolCall("get_balance", {"account": "bob"}))).content == "80"
        assert await count(toolbox) == 1


async def test_catalog_follows_pagination_cursors():
    async with McpToolbox(command=[*SERVER, "--page-size", "2"], trusted=True) as toolbox:
        assert set(toolbox.catalog) == TOOLS  # three pages: 2 + 2 + 1
        assert toolbox.catalog["transfer_count"].effect is R


async def test_http_lists_and_calls_tools(http_url):
    async with McpToolbox(url=http_url, trusted=True) as toolbox:
        assert set(toolbox.catalog) == TOOLS
        before = await count(toolbox)
        rate = await toolbox.call(ToolCall("lookup_rate", {"currency": "EUR"}))
        assert not rate.error and rate.content == "0.92"
        assert not (await toolbox.call(transfer("alice", "bob", 1))).error
        assert not (await toolbox.call(transfer("bob", "alice", 1))).error
        assert await count(toolbox) == before + 2


@pytest.mark.parametrize("trusted, overrides, expected", [
    (False, {}, {"get_balance": W, "transfer_count": W, "fail": W, "transfer": W, "lookup_rate": W}),
    (True, {}, {"get_balance": R, "transfer_count": R, "fail": R, "transfer": W, "lookup_rate": W}),
    (True, {"lookup_rate": "read", "get_balance": "write"},
     {"get_balance": W, "transfer_count": R, "fail": R, "transfer": W, "lookup_rate": R}),
    (False, {"lookup_rate": "read"},
     {"get_balance": W, "transfer_count": W, "fail": W, "transfer": W, "lookup_rate": R}),
])
async def test_catalog_effects(http_url, trusted, overrides, expected):
    async with McpToolbox(url=http_url, trusted=trusted, overrides=overrides) as toolbox:
        assert {name: tool.effect for name, tool in toolbox.catalog.items()} == expected
        # The raw hint is kept whatever the decision, so a caller can see why a tool was classified.
        assert toolbox.catalog["get_balance"].read_only_hint is True
        assert toolbox.catalog["lookup_rate"].read_only_hint is None


async def test_tool_errors_are_observations_and_the_toolbox_keeps_working():
    async with McpToolbox(command=SERVER) as toolbox:
        failed = await toolbox.call(ToolCall("fail", {"reason": "card declined"}))
        assert failed.error and "card declined" in failed.content
        refused = await toolbox.call(transfer("alice", "bob", 10_000))
        assert refused.error and "cannot transfer" in refused.content
        bad_args = await toolbox.call(ToolCall("get_balance", {}))
        assert bad_args.error and "get_balance" in bad_args.content
        unknown = await toolbox.call(ToolCall("drain_account", {"account": "alice"}))
        assert unknown.error and "drain_account" in unknown.content and "get_balance" in unknown.content
        ok = await toolbox.call(ToolCall("get_balance", {"account": "alice"}))
        assert not ok.error and ok.content == "100"
        assert await count(toolbox) == 1  # only the refused transfer ran; the unknown tool never reached it


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_twenty_concurrent_calls(transport, request):
    where = {"command": SERVER} if transport == "stdio" else {"url": request.getfixturevalue("http_url")}
    async with McpToolbox(**where, trusted=True) as toolbox:
        before = await count(toolbox)
        # Ten each way: every transfer succeeds whatever the interleaving, and the balances end unchanged.
        calls = [transfer("alice", "bob", 1) if i % 2 else transfer("bob", "alice", 1) for i in range(20)]
        observations = await asyncio.gather(*(toolbox.call(c) for c in calls))
        assert [o.error for o in observations] == [False] * 20
        assert await count(toolbox) == before + 20
        balances = [await toolbox.call(ToolCall("get_balance", {"account": a})) for a in ("alice", "bob")]
        assert sum(int(o.content) for o in balances) == 150  # no transfer was lost or applied twice


async def test_a_missing_executable_is_unavailable_quickly():
    started = time.monotonic()
    with pytest.raises(McpUnavailable, match="no-such-mcp-server") as caught:
        await McpToolbox(command=["no-such-mcp-server", "--flag"]).start()
    assert time.monotonic() - started < 5
    assert "\n" not in str(caught.value)


async def test_a_server_that_exits_at_once_is_unavailable():
    with pytest.raises(McpUnavailable, match="unavailable"):
        await McpToolbox(command=[sys.executable, "-c", "pass"], timeout_s=5).start()


async def test_a_server_that_never_answers_times_out():
    silent = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.monotonic()
    with pytest.raises(McpUnavailable, match="no answer within 1s"):
        await McpToolbox(command=silent, timeout_s=1).start()
    assert time.monotonic() - started < 10  # the timeout plus the SDK's bounded stdin-close/kill shutdown


async def test_a_refused_url_is_unavailable():
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(McpUnavailable, match=url.replace(".", r"\.")) as caught:
        await McpToolbox(url=url, timeout_s=5).start()
    assert "\n" not in str(caught.value)


async def test_a_server_lost_mid_session_raises_unavailable_without_hanging():
    proc, url = start_http_server()
    try:
        async with McpToolbox(url=url, timeout_s=10) as toolbox:
            await count(toolbox)
            proc.kill()
            proc.wait()
            with pytest.raises(McpUnavailable, match="transfer_count"):
                await asyncio.wait_for(count(toolbox), 5)
    finally:
        proc.kill()
        proc.wait()


async def test_calls_before_start_and_after_close_are_unavailable(http_url):
    toolbox = McpToolbox(url=http_url)
    await toolbox.start()
    await toolbox.close()
    await toolbox.close()  # idempotent
    with pytest.raises(McpUnavailable, match="not connected"):
        await toolbox.call(ToolCall("transfer_count", {}))


@pytest.mark.parametrize("kwargs", [
    {},
    {"command": SERVER, "url": "http://127.0.0.1:1/mcp"},
    {"command": []},
    {"command": SERVER, "overrides": {"transfer": "maybe"}},
])
def test_bad_configuration_is_rejected_at_construction(kwargs):
    with pytest.raises(ValueError):
        McpToolbox(**kwargs)


async def test_a_staged_write_sends_its_idempotency_key_in_meta_and_runs_once(http_url, tmp_path):
    """Through the tool host: the key reaches the MCP server in ``_meta`` (it echoes it), and a repeat of
    the key, even on a new tool host over the same store, returns the first result without a second run."""
    from specagent_ray.serve.core.config import McpSource
    from specagent_ray.serve.toolhost.tool_host import ToolHost
    from specagent_ray.storage import LocalStore

    store, sources = LocalStore(tmp_path), {"bank": McpSource(url=http_url, trusted=True)}
    async with McpToolbox(url=http_url, trusted=True) as toolbox:
        before = await count(toolbox)
        first = await ToolHost(sources, store).execute("bank", "s1", transfer("alice", "bob", 1), "s1:w0", 1)
        assert "(idempotency key s1:w0)" in first.content and not first.error
        again = await ToolHost(sources, store).execute("bank", "s1", transfer("alice", "bob", 1), "s1:w0", 1)
        assert again == first and await count(toolbox) == before + 1
        plain = await ToolHost(sources, store).execute("bank", "s1", transfer("alice", "bob", 1))
        assert "idempotency key" not in plain.content  # reads and unkeyed calls carry no key
