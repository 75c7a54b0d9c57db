"""The tool host: where server-side tools run, apart from the coordinator.

It holds each session's private tau2 environment and one MCP connection per MCP source, so a
coordinator restart loses no tool state. Staged writes carry an idempotency key and the lease epoch of
the coordinator that sends them. A key executes at most once, also across tool host restarts and shard
changes: its claim is stored durably before the write runs (idempotency.py). A repeated key (a
coordinator resuming an intent it logged before it crashed) gets the first execution's observation back;
a write from an epoch older than the newest seen is refused. ``write_executions`` counts real executions
per key, on the tool side, which is what the at-most-once tests read.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ...protocol.types import Observation, ToolCall
from ...storage.base import Store
from ..core.batcher import Batcher
from ..core.config import BfclSource, McpSource, Tau2Source, ToolSource, unavailable_sources
from ..core.handles import lane_of
from ..core.ids import shard_of
from ..log.idempotency import IdempotencyRecords, KeyReused, StaleEpoch, call_digest, unknown_outcome

log = logging.getLogger(__name__)


class ToolHostClient(Protocol):
    """How the coordinator reaches the tool host: a ``ShardedToolHost``, or one host through a handle
    (``handles.Local`` or ``handles.Served``)."""

    async def describe(self, source: str) -> dict[str, dict[str, Any]]: ...

    async def execute(self, source: str, session_id: str, call: ToolCall, key: str | None = None,
                      epoch: int | None = None, task_id: str | None = None, side: str = "agent") -> Observation: ...

    async def close_session(self, session_id: str) -> None: ...


class UnknownSource(ValueError):
    """A tool source name the server was not configured with."""


class ToolHost:
    """Guarantees: a keyed call runs at most once per key, also when the same key arrives again while
    the first is still running, and (with a ``store``) across restarts of this host and changes of the
    shard count; a key reused for another call is refused; a write whose epoch is older than the newest
    seen is refused; unkeyed calls (reads) run every time. Without a store the record is in memory only.
    A keyed MCP call whose server is lost is never sent again: it answers an error observation, which says
    the outcome is unknown if the call had left (see ``McpToolbox``)."""

    def __init__(self, sources: Mapping[str, ToolSource], store: Store | None = None):
        self.sources = dict(sources)
        self.unavailable = unavailable_sources(self.sources)  # name -> what is missing, in one line
        self._envs: dict[tuple[str, str], Any] = {}
        self._mcp: dict[str, Any] = {}
        self._mcp_lock = asyncio.Lock()
        self._done: dict[str, tuple[str, asyncio.Future]] = {}  # key -> (call digest, its observation)
        self._started: set[str] = set()  # keys whose write this host began: never begun again
        self.records = IdempotencyRecords(store) if store is not None else None
        self.newest_epoch: dict[int | None, int] = {}  # per coordinator shard (its own log and lease): the newest
        self.write_executions: Counter[str] = Counter()

    def _source(self, name: str) -> ToolSource:
        if name not in self.sources:
            raise UnknownSource(f"unknown tool source {name!r}; configured: {', '.join(sorted(self.sources))}")
        if name in self.unavailable:
            raise UnknownSource(self.unavailable[name])
        return self.sources[name]

    async def describe(self, source: str) -> dict[str, dict[str, Any]]:
        """``{tool: {"parameters": schema, "effect": "read"|"write", "tier": "read"|"write"|"critical"}}`` for an
        MCP source (the tier from the server's annotations if trusted, and the source's overrides)."""
        spec = self._source(source)
        if not isinstance(spec, McpSource):
            raise UnknownSource(f"tool source {source!r} is {spec.kind}, not mcp")
        box = await self._toolbox(source, spec)
        return {t.name: {"parameters": t.parameters, "effect": t.effect.value, "tier": t.tier.value}
                for t in box.catalog.values()}

    async def execute(self, source: str, session_id: str, call: ToolCall, key: str | None = None,
                      epoch: int | None = None, task_id: str | None = None, side: str = "agent") -> Observation:
        """Run one call. ``task_id`` names the tau2 task whose initial state a new environment starts in;
        ``side="user"`` runs one of the user's own tools (dual-control domains), never the agent's."""
        if key is None:
            return await self._run(source, session_id, call, None, task_id, side)
        self._check_epoch(key, epoch)
        digest = call_digest(call)
        first = self._done.get(key)
        if first is not None:
            if first[0] != digest:
                raise KeyReused(f"idempotency key {key} was first used for another call; refused")
            return await asyncio.shield(first[1])  # already ran (or is running): its observation, never a rerun
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._done[key] = (digest, future)
        try:
            prior = await self._claim(key, digest)
        except BaseException:
            del self._done[key]  # nothing ran; the next try asks the store again
            future.cancel()
            raise
        if prior is not None:
            future.set_result(prior)
            return prior
        self._started.add(key)
        self.write_executions[key] += 1
        try:
            result = await self._run(source, session_id, call, key, task_id, side)
        except BaseException as exc:
            # The outcome is unknown (it may have had an effect): the key stays spent, and asking
            # again reports the failure instead of running the write a second time.
            future.set_result(unknown_outcome(key, f"{type(exc).__name__}: {exc}"))
            raise
        future.set_result(result)
        if self.records is not None:  # durable before the write is acknowledged
            await asyncio.to_thread(self.records.finish, key, digest, result)
        return result

    def _check_epoch(self, key: str, epoch: int | None) -> None:
        """Refuse a write from a lease epoch older than the newest seen from the same coordinator shard: each
        shard has its own session log and lease, so their epochs are not comparable (a restarted shard 0 at
        epoch 2 says nothing of shard 1 at epoch 1)."""
        if epoch is None:
            return
        shard = shard_of(key.split(":", 1)[0])  # a write's key is "<session id>:w<n>", its session's shard first
        if epoch < self.newest_epoch.get(shard, 0):
            raise StaleEpoch(f"write {key} comes from lease epoch {epoch}, older than epoch "
                             f"{self.newest_epoch[shard]} already seen here from its shard: its coordinator was "
                             "displaced; refused")
        self.newest_epoch[shard] = epoch

    async def _claim(self, key: str, digest: str) -> Observation | None:
        if key in self._started:
            return unknown_outcome(key, "this tool host began it before")
        if self.records is None:
            return None
        return await asyncio.to_thread(self.records.claim, key, digest)

    async def _run(self, source: str, session_id: str, call: ToolCall, key: str | None = None,
                   task_id: str | None = None, side: str = "agent") -> Observation:
        spec = self._source(source)
        if isinstance(spec, Tau2Source):
            tools = self._tau2(source, spec, session_id, task_id)
            if side == "user":
                done = tools.execute_user(call)
                return Observation(done.content, error=done.error)
            return await tools.execute(call)
        if side == "user":
            raise UnknownSource(f"tool source {source!r} has no user-side tools")
        if isinstance(spec, BfclSource):
            return await self._bfcl(source, spec, session_id, task_id).execute(call)
        if isinstance(spec, McpSource):
            return await self._mcp_call(source, spec, call, key)
        raise UnknownSource(f"tool source {source!r} runs on the client, not on the tool host")

    def _tau2(self, name: str, spec: Tau2Source, session_id: str, task_id: str | None) -> Any:
        from ...tools.tau2 import Tau2Domain, Tau2Tools

        env = self._envs.get((name, session_id))
        if env is None:
            domain = Tau2Domain.load(spec.domain)
            task = domain.tasks.get(task_id) if task_id is not None else None  # its initial state
            env = self._envs[(name, session_id)] = Tau2Tools(domain, task=task)
        return env

    def _bfcl(self, name: str, spec: BfclSource, session_id: str, task_id: str | None) -> Any:
        from ...tools.bfcl import BfclTools, load_cases

        env = self._envs.get((name, session_id))
        if env is None:
            cases = load_cases(spec.category)
            if task_id not in cases:
                raise UnknownSource(f"tool source {name!r} has no BFCL case {task_id!r}")
            env = self._envs[(name, session_id)] = BfclTools(cases[task_id])
        return env

    async def _mcp_call(self, source: str, spec: McpSource, call: ToolCall, key: str | None) -> Observation:
        """A keyed call (a staged write) whose server is lost answers an error observation instead of
        raising, so that it becomes the key's one result: the session records it, and a repeat of the key
        gets it back. It says the outcome is unknown once the call has left, and that nothing ran before."""
        from ...tools.mcp import McpOutcomeUnknown, McpUnavailable

        try:
            box = await self._toolbox(source, spec)
            return await box.call(call, key)  # the key travels in the request's _meta
        except McpUnavailable as exc:
            if key is None:
                raise  # unkeyed: the caller sees the failure (the protocol makes it an error observation)
            if isinstance(exc, McpOutcomeUnknown):
                return unknown_outcome(key, str(exc))
            return Observation(f"Error: write not run ({exc}); key {key} is not run again", error=True)

    async def _toolbox(self, name: str, spec: McpSource) -> Any:
        async with self._mcp_lock:
            box = self._mcp.get(name)
            if box is None:
                from ...tools.mcp import McpToolbox

                box = McpToolbox(command=spec.command, url=spec.url, trusted=spec.trusted,
                                 overrides=dict(spec.overrides), name=name)
                await box.start()
                self._mcp[name] = box
            return box

    def warm(self) -> None:
        """Load the tau2 sources' domains (their pristine DBs) and the BFCL sources' cases now rather than
        on a session's first call. A source whose package or command is missing is skipped with one
        warning line: the host starts without it, and a call naming it is refused."""
        for name, spec in self.sources.items():
            if name in self.unavailable:
                log.warning("%s", self.unavailable[name])
            elif isinstance(spec, Tau2Source):
                from ...tools.tau2 import Tau2Domain

                Tau2Domain.load(spec.domain).new_environment()
            elif isinstance(spec, BfclSource):
                from ...tools.bfcl import load_cases

                load_cases(spec.category)

    async def execute_many(self, reads: Sequence[tuple[str, str, ToolCall, str | None]]
                           ) -> list[Observation | BaseException]:
        """Unkeyed calls (reads) of many sessions at once, ``(source, session_id, call, task_id)`` each:
        one answer per call, in order, an exception in place of an observation failing only its own call."""
        runs = (self._run(source, sid, call, None, task_id) for source, sid, call, task_id in reads)
        return await asyncio.gather(*runs, return_exceptions=True)

    def close_sessions(self, session_ids: Sequence[str]) -> list[None]:
        for sid in session_ids:
            self.close_session(sid)
        return [None] * len(session_ids)

    def close_session(self, session_id: str) -> None:
        for key in [k for k in self._envs if k[1] == session_id]:
            del self._envs[key]
        for key in [k for k in self._done if k.startswith(session_id + ":")]:  # the store keeps them
            del self._done[key]

    def stats(self) -> dict[str, Any]:
        return {"write_executions": dict(self.write_executions), "environments": len(self._envs)}


class ShardedToolHost:
    """Several tool hosts as one. Guarantees: every call of one session goes to the same shard (by a
    stable hash of its id, the same after a coordinator restart), so its tau2 environment and the
    idempotency record of its writes live in one place. ``shards`` are handles (see handles.py).

    Reads and session closes from many sessions leave for a shard together, one handle call per batch
    (a handle call costs the coordinator more CPU than a tau2 read costs the tool host); a batch leaves
    as soon as the previous one has left, so a lone read waits for nothing. Keyed calls (writes) go one
    at a time, as before: their at-most-once path stays the single-call one."""

    def __init__(self, shards: Sequence[Any], max_batch: int = 64):
        if not shards:
            raise ValueError("at least one tool host")
        self.shards = list(shards)
        self._reads = [Batcher(shard.execute_many, 0.0, max_batch) for shard in self.shards]
        self._closes = [Batcher(shard.close_sessions, 0.0, max_batch) for shard in self.shards]

    def _lane(self, session_id: str) -> int:
        return lane_of(session_id, len(self.shards))

    def shard(self, session_id: str) -> Any:
        return self.shards[self._lane(session_id)]

    async def execute(self, source: str, session_id: str, call: ToolCall, key: str | None = None,
                      epoch: int | None = None, task_id: str | None = None, side: str = "agent") -> Observation:
        if key is None and side == "agent":
            return await self._reads[self._lane(session_id)]((source, session_id, call, task_id))
        return await self.shard(session_id).execute(source, session_id, call, key, epoch, task_id, side)

    async def describe(self, source: str) -> dict[str, dict[str, Any]]:
        return await self.shards[0].describe(source)

    async def close_session(self, session_id: str) -> None:
        await self._closes[self._lane(session_id)](session_id)
