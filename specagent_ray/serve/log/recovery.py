"""Replaying the session log after a restart: every session whose records can be read is handed to a
restore callback (the coordinator's ``resume.resume``); one whose records cannot be read or restored is reported, with the reason, and not
served, while the others are."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .records import Created, parse
from .session_log import SessionLog

log = logging.getLogger(__name__)
Restore = Callable[[str, list[dict[str, Any]]], Awaitable[None]]  # rebuilds one session from its records


class Recovery:
    """What replay found: the sessions that could not be restored (the newest ``retain``, with their
    reasons), the log's unreadable lines, and how many unfinished sessions were resumed."""

    def __init__(self, retain: int):
        self.retain = retain
        self.broken: dict[str, str] = {}
        self.problems = 0
        self.resumed = 0
        self._started: asyncio.Task[None] | None = None

    async def start(self, session_log: SessionLog, warm: Callable[[], Awaitable[None]], restore: Restore,
                    drop: Callable[[str], None]) -> None:
        """``warm()`` (the tool sources), then ``replay``, on the first call only; every call, concurrent ones
        too, returns once that is done, or raises its error. A caller that went on while the log was still to
        be replayed could create a session that the replay then resumes beside the session's own runner."""
        if self._started is None:
            async def first() -> None:
                await warm()
                await self.replay(session_log, restore, drop)
            self._started = asyncio.get_running_loop().create_task(first())
        await asyncio.shield(self._started)  # a cancelled caller does not cancel the start others wait on

    async def replay(self, session_log: SessionLog, restore: Restore, drop: Callable[[str], None]) -> None:
        """Take the log's lease, read it, and ``restore`` each readable session; a session whose
        restore fails is ``drop``ped and reported. One bad session never stops the others."""
        replay = await session_log.open()
        self.problems = len(replay.problems)
        for sid, reason in replay.broken.items():
            self.report(sid, reason)
        for sid, records in replay.sessions.items():
            if sid in self.broken:
                continue
            try:
                await restore(sid, records)
            except Exception as exc:  # noqa: BLE001 - one bad session must not stop the others
                log.exception("could not restore session %s", sid)
                drop(sid)
                self.report(sid, f"restore failed: {type(exc).__name__}: {exc}")

    def report(self, sid: str, reason: str) -> None:
        self.broken[sid] = reason
        while len(self.broken) > self.retain:
            self.broken.pop(next(iter(self.broken)))


def created_record(sid: str, records: Sequence[dict[str, Any]]) -> Created:
    """A session's first record, which must be its ``created``."""
    created = parse(records[0]) if records else None
    if not isinstance(created, Created):
        raise ValueError(f"session {sid}: its log does not start with 'created'")
    return created
