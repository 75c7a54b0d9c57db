"""The durable session log: what a restarted coordinator resumes from.

Records are appended in memory and written in segments (group commit): one ``Store.put`` holds every
record appended since the previous one, so a thousand sessions cost one atomic write per flush, not a
thousand. ``durable()`` waits until everything appended so far is stored; the coordinator awaits it
before a staged write executes (the intent) and before it shows a commit to clients.

Segment keys are ``log/<12-digit number>.jsonl``; replay reads them in order.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from typing import Any

from ..storage.base import Store

SEGMENT = re.compile(r"^log/(\d{12})\.jsonl$")


class SessionLog:
    """Guarantees: records are stored in append order; a record seen by ``replay`` was appended before
    every record after it; ``durable()`` returns only once every record appended before the call is in
    the store. A failed write is retried by the next flush (nothing appended is dropped)."""

    def __init__(self, store: Store):
        self.store = store
        self._pending: list[dict[str, Any]] = []
        self._next = self._last_segment() + 1
        self._lock = asyncio.Lock()
        self.flushes = 0

    def _last_segment(self) -> int:
        numbers = [int(m.group(1)) for k in self.store.list("log/") if (m := SEGMENT.match(k))]
        return max(numbers, default=0)

    def append(self, session_id: str, record: dict[str, Any]) -> None:
        self._pending.append({"sid": session_id, **record})

    async def durable(self) -> None:
        """Flush: every record appended before this call is stored when it returns."""
        async with self._lock:  # one writer; waiters behind it find their records already written
            if not self._pending:
                return
            batch, self._pending = self._pending, []
            data = "".join(json.dumps(r, separators=(",", ":"), default=str) + "\n" for r in batch).encode()
            key = f"log/{self._next:012d}.jsonl"
            try:
                await asyncio.to_thread(self.store.put, key, data)
            except BaseException:
                self._pending[:0] = batch  # keep order; the next flush retries them
                raise
            self._next += 1
            self.flushes += 1

    def replay(self) -> dict[str, list[dict[str, Any]]]:
        """Every stored record, grouped by session, in append order."""
        sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for key in sorted(k for k in self.store.list("log/") if SEGMENT.match(k)):
            for line in self.store.get(key).decode().splitlines():
                if line:
                    record = json.loads(line)
                    sessions[record.pop("sid")].append(record)
        return dict(sessions)
