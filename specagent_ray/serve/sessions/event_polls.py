"""Many sessions' events in one call: what the gateway's event streams poll (``gateway/event_hub.py``).

One ``events`` long-poll per session costs the coordinator a Ray call per moment a session has news,
most of a committed step's CPU. ``events_many`` answers every stream a gateway replica serves from one
shard at once, so the calls follow the gateway's poll interval instead of the sessions' steps.

Guarantees: each answer is the one ``Coordinator.events`` would give for that reader at that moment
(the same events from ``after`` on, the same ``done``, the same 404 for a session its owner cannot
see), so a stream fed by it sees each event once and in order; nothing is consumed on this side (the
reader keeps its cursor), so an answer lost on the way costs a repeat, never an event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from ..core.errors import ApiError
from .session import Session

Want = tuple[str, int, str]  # a session id, the reader's cursor (events seen), the reader's tenant


class Polled(Protocol):
    """The coordinator as ``events_many`` sees it."""

    @property
    def commits(self) -> Any: ...  # its group commit: ``published`` is set after each flush

    def _get(self, sid: str, owner: str) -> Session: ...


async def events_many(c: Polled, wants: Sequence[Want], wait_s: float) -> dict[int, Any]:
    """For each ``wants[i]`` with something to read, its ``events`` answer under ``i``; an error (the
    session is unknown to its owner) as the ``ApiError`` itself. Waits up to ``wait_s`` while nobody
    has anything; answers at once where somebody does. A fenced coordinator raises, as ``events`` does."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        published = c.commits.published  # taken before looking: a flush in between still wakes us
        out: dict[int, Any] = {}
        for i, (sid, after, owner) in enumerate(wants):
            try:
                s = c._get(sid, owner)
            except ApiError as exc:
                out[i] = exc
                continue
            if s.has_news(after):
                out[i] = s.events_after(after)
        left = deadline - asyncio.get_running_loop().time()
        if out or left <= 0:
            return out
        try:
            async with asyncio.timeout(left):
                await published.wait()
        except TimeoutError:
            return {}
