"""Resuming one session of a coordinator from its records after a restart (``Recovery`` replays the log
and calls this for each session it read): the session is rebuilt (``Session.restore``) and, unless it
ended, runs on from its last committed step; a conversation's records rebuild that conversation."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from ...protocol.types import Task
from ..core.config import AppConfig
from ..log.records import Resumed
from ..log.recovery import Recovery, created_record
from ..toolhost.sources import ToolSources
from .admission import Admission
from .conversation_records import Conversations, is_conversation
from .session import FINISHED, Session


class Resumable(Protocol):
    """What ``resume`` needs of a coordinator (``coordinator.Coordinator`` is one), passed in so that the
    coordinator imports this module and not the other way."""

    cfg: AppConfig
    sources: ToolSources
    admission: Admission
    conversations: Conversations
    recovery: Recovery
    metrics: Any
    sessions: Mapping[str, Session]

    def _session(self, sid: str, req: Any, task: Task, owner: str, key: str | None) -> Session: ...

    async def _finished_session(self, s: Session, close_tools: bool = True) -> None: ...

    async def _run(self, s: Session, catalog: Any) -> None: ...


async def resume(c: Resumable, sid: str, records: list[dict[str, Any]]) -> None:
    """Rebuild one session of coordinator ``c`` from its records (``Session.restore``) and resume it
    unless it ended; a conversation's records rebuild that conversation."""
    if is_conversation(sid):
        c.conversations.restore(sid, records)
        return
    created = created_record(sid, records)
    req = created.request
    source = c.cfg.tool_sources.get(req.tool_source)
    if source is None:
        raise ValueError(f"session {sid}: tool source {req.tool_source!r} is no longer configured")
    task = await c.sources.task(req, source)
    s = c._session(sid, req, Task(task.id, created.opening, task.context), created.owner, created.idempotency_key)
    c.admission.started(sid, created.owner, created.idempotency_key)
    s.restore(records)
    c.metrics.committed_steps += len(s.steps)
    if s.status in FINISHED:
        await c._finished_session(s, close_tools=False)  # closed when it finished
        return
    s.record(Resumed(committed_steps=len(s.steps)))
    c.recovery.resumed += 1
    s.runner = asyncio.get_running_loop().create_task(c._run(s, await c.sources.catalog(req, source)))
