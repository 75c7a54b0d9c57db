"""Group commit: sessions append records to the session log, and one flusher task stores them in
batches and then publishes each session's stored records to its event stream.

Guarantees: a record becomes a public event only once the log holds it; a failed flush loses nothing
(the records stay queued, in order, and the flusher tries again); once the log is fenced, nothing more
is stored or published. ``stored()`` answers a client only when everything appended before it is stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ...storage.base import StoreError
from ..core.errors import ServiceUnavailable
from .lease import Fenced
from .session_log import SessionLog

log = logging.getLogger(__name__)


class Journaled(Protocol):
    """A session as the group commit sees it (``session.Session`` is one): its id, the records it
    appended that are not yet public, and ``publish``, which makes stored records public in order."""

    id: str
    unpublished: list[dict[str, Any]]

    def publish(self, records: Sequence[dict[str, Any]]) -> None: ...


class GroupCommit:
    def __init__(self, session_log: SessionLog, ack_timeout_s: float, clock: Callable[[], float]):
        self.log, self.ack_timeout_s, self.clock = session_log, ack_timeout_s, clock
        self._dirty: set[Journaled] = set()
        self._wake = asyncio.Event()
        self.published = asyncio.Event()  # set, then replaced, after each flush's records are public
        self.flusher: asyncio.Task | None = None

    def start(self) -> None:
        """Start the flusher in the running loop; a no-op once it was started."""
        if self.flusher is None:
            self.flusher = asyncio.get_running_loop().create_task(self._flush_forever())

    def append(self, s: Journaled, data: dict[str, Any]) -> None:
        """Queue one of ``s``'s records for the next flush."""
        self.log.append(s.id, data)
        self._dirty.add(s)
        self._wake.set()

    async def stored(self) -> None:
        """Return once every record appended so far is stored. 503 when the log cannot store them
        within ``ack_timeout_s`` (they stay queued: the flusher keeps trying) or this coordinator is fenced."""
        deadline = self.clock() + self.ack_timeout_s
        while True:
            try:
                return await self.log.durable()
            except Fenced as exc:
                raise ServiceUnavailable(f"this coordinator was fenced: {exc}") from None
            except StoreError as exc:
                if self.clock() >= deadline:
                    raise ServiceUnavailable(f"not acknowledged: the session log did not store it within "
                                             f"{self.ack_timeout_s} s ({exc}); it stays "
                                             "queued, and the event stream shows it once stored") from None
                await asyncio.sleep(0.2)

    async def _flush_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            batches = [(s, s.unpublished) for s in dirty]
            for s in dirty:
                s.unpublished = []
            try:
                await self.log.durable()
            except Fenced:
                return
            except (Exception, asyncio.CancelledError) as exc:
                task = asyncio.current_task()
                if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                    raise  # the flusher itself is being stopped
                log.warning("session log write failed (%s); retrying", exc)
                for s, records in batches:
                    s.unpublished[:0] = records
                    self._dirty.add(s)
                self._wake.set()
                await asyncio.sleep(0.5)
                continue
            for s, records in batches:
                s.publish(records)
            self.published.set()  # wakes every reader of many sessions' events (sessions/event_polls.py)
            self.published = asyncio.Event()
