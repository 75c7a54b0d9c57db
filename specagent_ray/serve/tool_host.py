"""The tool host: where server-side tools run, apart from the coordinator.

It holds each session's private tau2 environment and one MCP connection per MCP source, so a
coordinator restart loses no tool state. Staged writes carry an idempotency key: a key executes at
most once, and a repeated key (a coordinator resuming an intent it logged before it crashed) gets the
first execution's observation back. ``write_executions`` counts real executions per key, on the tool
side, which is what the at-most-once tests read.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..protocol.types import Observation, ToolCall
from .config import McpSource, Tau2Source, ToolSource
from .handles import lane_of


class UnknownSource(ValueError):
    """A tool source name the server was not configured with."""


class ToolHost:
    """Guarantees: a keyed call runs at most once per key, also when the same key arrives again
    while the first is still running; unkeyed calls (reads) run every time."""

    def __init__(self, sources: Mapping[str, ToolSource]):
        self.sources = dict(sources)
        self._envs: dict[tuple[str, str], Any] = {}
        self._mcp: dict[str, Any] = {}
        self._mcp_lock = asyncio.Lock()
        self._done: dict[str, asyncio.Future] = {}
        self.write_executions: Counter[str] = Counter()

    def _source(self, name: str) -> ToolSource:
        if name not in self.sources:
            raise UnknownSource(f"unknown tool source {name!r}; configured: {', '.join(sorted(self.sources))}")
        return self.sources[name]

    async def describe(self, source: str) -> dict[str, dict[str, Any]]:
        """``{tool: {"parameters": schema, "effect": "read"|"write"}}`` for an MCP source."""
        spec = self._source(source)
        if not isinstance(spec, McpSource):
            raise UnknownSource(f"tool source {source!r} is {spec.kind}, not mcp")
        box = await self._toolbox(source, spec)
        return {t.name: {"parameters": t.parameters, "effect": t.effect.value} for t in box.catalog.values()}

    async def execute(self, source: str, session_id: str, call: ToolCall, key: str | None = None) -> Observation:
        if key is None:
            return await self._run(source, session_id, call)
        first = self._done.get(key)
        if first is not None:
            return await asyncio.shield(first)  # already ran (or is running): its observation, never a rerun
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._done[key] = future
        self.write_executions[key] += 1
        try:
            result = await self._run(source, session_id, call)
        except BaseException as exc:
            # The outcome is unknown (it may have had an effect): the key stays spent, and asking
            # again reports the failure instead of running the write a second time.
            future.set_result(Observation(f"Error: write outcome unknown: {type(exc).__name__}: {exc}", error=True))
            raise
        future.set_result(result)
        return result

    async def _run(self, source: str, session_id: str, call: ToolCall) -> Observation:
        spec = self._source(source)
        if isinstance(spec, Tau2Source):
            return await self._tau2(source, spec, session_id).execute(call)
        if isinstance(spec, McpSource):
            box = await self._toolbox(source, spec)
            return await box.call(call)
        raise UnknownSource(f"tool source {source!r} runs on the client, not on the tool host")

    def _tau2(self, name: str, spec: Tau2Source, session_id: str) -> Any:
        from ..tools.tau2 import Tau2Domain, Tau2Tools

        env = self._envs.get((name, session_id))
        if env is None:
            env = self._envs[(name, session_id)] = Tau2Tools(Tau2Domain.load(spec.domain))
        return env

    async def _toolbox(self, name: str, spec: McpSource) -> Any:
        async with self._mcp_lock:
            box = self._mcp.get(name)
            if box is None:
                from ..tools.mcp import McpToolbox

                box = McpToolbox(command=spec.command, url=spec.url, trusted=spec.trusted,
                                 overrides=dict(spec.overrides))
                await box.start()
                self._mcp[name] = box
            return box

    def close_session(self, session_id: str) -> None:
        for key in [k for k in self._envs if k[1] == session_id]:
            del self._envs[key]

    def stats(self) -> dict[str, Any]:
        return {"write_executions": dict(self.write_executions), "environments": len(self._envs)}


class ShardedToolHost:
    """Several tool hosts as one. Guarantees: every call of one session goes to the same shard (by a
    stable hash of its id, the same after a coordinator restart), so its tau2 environment and the
    idempotency record of its writes live in one place. ``shards`` are handles (see handles.py)."""

    def __init__(self, shards: Sequence[Any]):
        if not shards:
            raise ValueError("at least one tool host")
        self.shards = list(shards)

    def shard(self, session_id: str) -> Any:
        return self.shards[lane_of(session_id, len(self.shards))]

    async def execute(self, source: str, session_id: str, call: ToolCall, key: str | None = None) -> Observation:
        return await self.shard(session_id).execute(source, session_id, call, key)

    async def describe(self, source: str) -> dict[str, dict[str, Any]]:
        return await self.shards[0].describe(source)

    async def close_session(self, session_id: str) -> None:
        await self.shard(session_id).close_session(session_id)
