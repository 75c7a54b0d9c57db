"""MCP servers that crash and come back, against the real test bank server (specagent_ray.testing.mcp_server).

The hostile side is the server: its process is killed (SIGKILL) while idle, with a read in flight and
with a write in flight, and it comes back with another catalog. The server journals every tool call it
receives to a file that outlives the process (``--journal``) and holds calls while a file exists
(``--hold``), so a test knows a call is in flight before it kills, and counts executions across
restarts on the tool side, never on the client's word.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specagent_ray.ports import free_port
from specagent_ray.protocol.types import Effect, Observation, Task, ToolCall
from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.core.config import AppConfig, McpSource
from specagent_ray.serve.core.handles import Local
from specagent_ray.serve.sessions.runner import SessionTools
from specagent_ray.serve.sessions.session import Session
from specagent_ray.serve.toolhost.sources import ToolSources
from specagent_ray.serve.toolhost.tool_host import ToolHost
from specagent_ray.storage import LocalStore
from specagent_ray.tools.mcp import McpToolbox, McpUnavailable

SERVER = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
R, W = Effect.READ, Effect.WRITE


class Bank:
    """The stdio bank server's command line and the files it shares with the test."""

    def __init__(self, where: Path):
        self.journal, self.hold, self.v2 = where / "journal.jsonl", where / "hold", where / "v2"
        self.command = [*SERVER, "--journal", str(self.journal), "--hold", str(self.hold), "--v2-if", str(self.v2)]

    def calls(self, name: str | None = None) -> list[dict]:
        lines = self.journal.read_text().splitlines() if self.journal.exists() else []
        return [c for c in map(json.loads, lines) if name is None or c["name"] == name]

    async def arrived(self, name: str, count: int) -> dict:
        """The ``count``-th call of ``name`` the server received, once it has (it is held there)."""
        deadline = time.monotonic() + 15
        while len(calls := self.calls(name)) < count:
            assert time.monotonic() < deadline, f"call {count} of {name} never reached the server"
            await asyncio.sleep(0.01)
        return calls[count - 1]

    def kill(self, call: dict) -> None:
        """SIGKILL the process that received ``call``: no goodbye on the pipe, as in a crash."""
        os.kill(call["pid"], signal.SIGKILL)


@pytest.fixture
def bank(tmp_path: Path) -> Bank:
    return Bank(tmp_path)


def balance(account: str) -> ToolCall:
    return ToolCall("get_balance", {"account": account})


def transfer(source: str, target: str, amount: int) -> ToolCall:
    return ToolCall("transfer", {"source": source, "target": target, "amount": amount})


def leaks(text: str) -> list[str]:
    """Server configuration a client-visible text must not carry."""
    return [s for s in (sys.executable, "specagent_ray.testing", "--journal", "127.0.0.1") if s in text]


async def close(host: ToolHost) -> None:
    for box in host._mcp.values():  # stdio: stops the servers this host started
        await box.close()


def serve_http(port: int) -> subprocess.Popen[bytes]:
    """The bank server over HTTP on ``port``; returns once it accepts connections."""
    proc = subprocess.Popen([*SERVER, "--http", str(port)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("MCP test server did not start") from None
            time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


async def test_a_read_cut_off_by_a_crash_is_sent_once_more_to_the_restarted_server_and_later_calls_run(bank):
    async with McpToolbox(command=bank.command, trusted=True, name="bank") as toolbox:
        assert "moved 30" in (await toolbox.call(transfer("alice", "bob", 30))).content
        assert (await toolbox.call(balance("alice"))).content == "70"
        bank.hold.touch()
        read = asyncio.create_task(toolbox.call(balance("bob")))
        cut = await bank.arrived("get_balance", 2)
        bank.kill(cut)
        bank.hold.unlink()
        assert await asyncio.wait_for(read, 10) == Observation("50")  # a new process: the old state died with it
        resent = await bank.arrived("get_balance", 3)
        assert resent["arguments"] == {"account": "bob"} and resent["pid"] != cut["pid"]
        assert len(bank.calls("get_balance")) == 3 and toolbox.reconnects == 1
        assert "moved 5" in (await toolbox.call(transfer("bob", "alice", 5), "k1")).content
        assert (await toolbox.call(balance("alice"))).content == "105"
        assert {c["pid"] for c in bank.calls()[3:]} == {resent["pid"]}  # later calls: the new server, no restart


async def test_a_read_is_sent_at_most_twice_and_an_unkeyed_write_once(bank):
    async with McpToolbox(command=bank.command, trusted=True, name="bank") as toolbox:
        bank.hold.touch()
        read = asyncio.create_task(toolbox.call(balance("bob")))
        bank.kill(await bank.arrived("get_balance", 1))
        bank.kill(await bank.arrived("get_balance", 2))  # the one retry dies too
        with pytest.raises(McpUnavailable, match="tool source 'bank' unavailable: get_balance") as caught:
            await asyncio.wait_for(read, 10)
        assert leaks(str(caught.value)) == []
        # A write called without a key (none the tool host would send) is never sent twice.
        write = asyncio.create_task(toolbox.call(transfer("alice", "bob", 1)))
        bank.kill(await bank.arrived("transfer", 1))
        with pytest.raises(McpUnavailable, match="transfer"):
            await asyncio.wait_for(write, 10)
        bank.hold.unlink()
        assert (await toolbox.call(balance("bob"))).content == "50"  # the next call finds a server again
        assert len(bank.calls("get_balance")) == 3 and len(bank.calls("transfer")) == 1


async def test_a_write_cut_off_by_a_crash_is_never_sent_again_and_its_session_is_told_the_outcome_is_unknown(
        bank, tmp_path):
    """Through the session's tools and the tool host: the at-most-once path the coordinator really takes."""
    store, sources = LocalStore(tmp_path / "store"), {"bank": McpSource(command=bank.command, trusted=True)}
    host = ToolHost(sources, store)
    described = await host.describe("bank")
    catalog = Catalog({n: t["parameters"] for n, t in described.items()},
                      {n: Effect(t["effect"]) for n, t in described.items()})
    session = Session("s1", CreateSession(tool_source="bank", message="hi"), Task("adhoc", "hi"), log=lambda *_: None)

    async def durable() -> None:
        pass

    tools = SessionTools(session, catalog, lambda call, key: host.execute("bank", "s1", call, key, 1), durable)
    try:
        assert (await tools.execute(balance("alice"))).content == "100"
        bank.hold.touch()
        write = asyncio.create_task(tools.execute(transfer("alice", "bob", 30)))
        cut = await bank.arrived("transfer", 1)
        assert cut["key"] == "s1:w0"
        bank.kill(cut)
        bank.hold.unlink()
        told = await asyncio.wait_for(write, 10)
        assert told.error and "write outcome unknown" in told.content and "s1:w0" in told.content
        assert leaks(told.content) == []
        assert session.results["s1:w0"] == told  # recorded as the write's result, and as a tool_result event
        assert [r["observation"]["content"] for r in session.unpublished if r["t"] == "tool_result"][-1] == told.content
        # Asked again, here or on a restarted tool host over the same store: the same answer, never a second send.
        assert await host.execute("bank", "s1", transfer("alice", "bob", 30), "s1:w0", 1) == told
        assert await ToolHost(sources, store).execute("bank", "s1", transfer("alice", "bob", 30), "s1:w0", 1) == told
        assert host.write_executions["s1:w0"] == 1
        # Later calls are served by the restarted server: a read, and a new write under its own key.
        assert (await tools.execute(balance("alice"))).content == "100"
        moved = await tools.execute(transfer("alice", "bob", 5))
        assert not moved.error and "(idempotency key s1:w1)" in moved.content
        assert [c["key"] for c in bank.calls("transfer")] == ["s1:w0", "s1:w1"]
    finally:
        await close(host)


async def test_a_write_after_the_server_died_idle_goes_once_to_the_restarted_server(bank):
    host = ToolHost({"bank": McpSource(command=bank.command, trusted=True)})
    try:
        await host.execute("bank", "s1", balance("alice"))
        first = bank.calls()[-1]
        bank.kill(first)
        moved = await host.execute("bank", "s1", transfer("alice", "bob", 5), "s1:w0", 1)
        assert not moved.error and "moved 5" in moved.content  # its connection was checked before it left
        [sent] = bank.calls("transfer")
        assert sent["key"] == "s1:w0" and sent["pid"] != first["pid"]
    finally:
        await close(host)


async def test_a_write_whose_server_cannot_be_reached_is_answered_not_run_and_its_key_keeps_that_answer(tmp_path):
    store, sources = LocalStore(tmp_path), {"bank": McpSource(command=[sys.executable, "-c", "pass"])}
    host = ToolHost(sources, store)
    told = await host.execute("bank", "s1", transfer("alice", "bob", 1), "s1:w0", 1)
    assert told.error and "write not run" in told.content and "tool source 'bank'" in told.content
    assert leaks(told.content) == []
    assert await ToolHost(sources, store).execute("bank", "s1", transfer("alice", "bob", 1), "s1:w0", 1) == told


async def test_a_server_back_with_other_tools_is_logged_and_changes_no_running_session(bank, caplog):
    cfg = AppConfig(tool_sources={"bank": McpSource(command=bank.command, trusted=True)})
    host = ToolHost(cfg.tool_sources)
    sources, req = ToolSources(cfg, Local(host)), CreateSession(tool_source="bank", message="hi")
    try:
        running = await sources.catalog(req, cfg.tool_sources["bank"])
        assert running.effect("get_balance") is R and "fail" in running.schemas
        assert await sources.catalog(req, cfg.tool_sources["bank"]) is running  # nothing changed: the same one
        await host.execute("bank", "s1", balance("alice"))
        bank.v2.touch()  # the next process serves v2: fail is gone, get_balance is no longer read-only
        bank.kill(bank.calls()[-1])
        with caplog.at_level(logging.WARNING, logger="specagent_ray.tools.mcp"):
            # The running session still classifies get_balance as a READ and calls it without a key.
            refused = await host.execute("bank", "s1", balance("alice"))
        assert refused.error and "get_balance" in refused.content and "write" in refused.content
        changes = [r.getMessage() for r in caplog.records if "other tools" in r.getMessage()]
        assert len(changes) == 1 and "removed fail" in changes[0] and "changed get_balance" in changes[0]
        assert "transfer" not in changes[0]
        gone = await host.execute("bank", "s1", ToolCall("fail", {"reason": "x"}))
        assert gone.error and "unknown tool 'fail' on tool source 'bank'" in gone.content and leaks(gone.content) == []
        assert len(bank.calls("get_balance")) == 1 and bank.calls("fail") == []  # neither refusal was sent
        assert running.effect("get_balance") is R and "fail" in running.schemas  # the running session's own
        fresh = await sources.catalog(req, cfg.tool_sources["bank"])
        assert fresh.effect("get_balance") is W and "fail" not in fresh.schemas  # new sessions get the new tools
        assert (await host.execute("bank", "s2", balance("alice"), "s2:w0", 1)).content == "100"  # keyed: runs
    finally:
        await close(host)


async def test_an_http_server_restarted_on_its_port_gets_a_new_session_and_the_read_recovers():
    port = free_port()
    proc, delays, restarted = serve_http(port), [], []

    async def sleep(seconds: float) -> None:  # the backoff's wait: the server comes back during it
        delays.append(seconds)
        restarted.append(await asyncio.to_thread(serve_http, port))

    try:
        async with McpToolbox(url=f"http://127.0.0.1:{port}/mcp", trusted=True, sleep=sleep) as toolbox:
            assert (await toolbox.call(balance("alice"))).content == "100"
            assert "moved 10" in (await toolbox.call(transfer("alice", "bob", 10), "k1")).content
            stop(proc)
            assert (await asyncio.wait_for(toolbox.call(balance("alice")), 30)).content == "100"  # new state
            assert len(restarted) == 1 and 0 < delays[0] <= 0.1 and toolbox.reconnects == 1
            assert "moved 1" in (await toolbox.call(transfer("alice", "bob", 1), "k2")).content
    finally:
        for p in [proc, *restarted]:
            stop(p)


async def test_reconnection_backs_off_doubling_to_a_bound_and_a_call_gives_up_in_bounded_time():
    port, now, delays = free_port(), [0.0], []
    proc = serve_http(port)

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        now[0] += seconds

    try:
        async with McpToolbox(url=f"http://127.0.0.1:{port}/mcp", trusted=True, name="bank", backoff_s=0.1,
                              max_backoff_s=0.8, reconnect_s=3.0, clock=lambda: now[0], sleep=sleep) as toolbox:
            assert (await toolbox.call(balance("alice"))).content == "100"
            stop(proc)
            with pytest.raises(McpUnavailable, match="tool source 'bank' unavailable") as caught:
                await toolbox.call(balance("alice"))
            assert leaks(str(caught.value)) == []
            # Attempts at 0, 0.1, 0.3, 0.7, 1.5, 2.3; the next (3.1) is past the call's 3 s.
            assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 0.8])
            delays.clear()
            with pytest.raises(McpUnavailable):  # a later call does not start over: the bound holds
                await toolbox.call(balance("alice"))
            assert delays == pytest.approx([0.8, 0.8, 0.8])
            proc = serve_http(port)
            delays.clear()
            assert (await toolbox.call(balance("alice"))).content == "100"
            assert delays == pytest.approx([0.8]) and toolbox.reconnects == 1
            stop(proc)
            delays.clear()
            with pytest.raises(McpUnavailable):  # a success reset the backoff
                await toolbox.call(balance("alice"))
            assert delays[:2] == pytest.approx([0.1, 0.2])
    finally:
        stop(proc)
