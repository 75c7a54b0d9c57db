"""Admission: which sessions may start now, whose they are, and which create a retry repeats.

Guarantees:
- running + admitting sessions never exceed ``max_sessions``, nor one tenant's ``tenant_max_sessions``:
  a slot is taken synchronously, before the create's first await, so a burst cannot overrun either;
- while the session log is paused (its lease unconfirmed for longer than a create would wait for its
  record, ``ack_timeout_s``), no session starts: 503 with Retry-After at once, the answer the create would
  get after ``ack_timeout_s``; a running session's write waits for the log, and new work would only queue
  behind it;
- a create carrying an ``Idempotency-Key`` its tenant already used answers with that first session (or
  409 while it is still being created, or if the body differs); it never starts a second session.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..core.config import CoordinatorConfig
from ..core.errors import Conflict, Overloaded, ServiceUnavailable

LOCAL = "local"  # the owner of sessions created in-process (tests, the bench); tenants are "key-<hash>"


class Admission:
    def __init__(self, cfg: CoordinatorConfig, queued: Callable[[], int],
                 limits: Callable[[str], int | None] = lambda owner: None,
                 paused: Callable[[float], str | None] = lambda grace_s: None):
        self.cfg = cfg
        self.queued = queued
        self.paused = paused  # why the session log cannot store now (``SessionLog.paused``): back-pressure
        self.limits = limits  # a named tenant's own max_sessions (serve/core/tenants.py), else tenant_max_sessions
        self.running: dict[str, str] = {}  # session id -> owner
        self._per_owner: Counter[str] = Counter()  # running + admitting, by owner
        self._admitting = 0
        self._finished: deque[str] = deque()  # finished sessions in memory, the oldest first
        self._keys: dict[tuple[str, str], str | None] = {}  # (owner, Idempotency-Key) -> session (None: creating)

    def __len__(self) -> int:
        return len(self.running)

    @contextmanager
    def slot(self, owner: str, key: str | None = None) -> Iterator[Callable[[str], None]]:
        """Hold a slot for one create while it awaits; the caller calls the yielded ``started(sid)`` once
        its session exists. Raises ``Overloaded`` (429) past a limit; the slot is freed either way."""
        self._check(owner)
        if key is not None:
            self._keys[(owner, key)] = None
        self._admitting += 1
        self._per_owner[owner] += 1
        sid: str | None = None

        def started(session_id: str) -> None:
            nonlocal sid
            sid = session_id
            self.started(session_id, owner, key)

        try:
            yield started
        finally:
            self._admitting -= 1
            self._per_owner[owner] -= 1
            if key is not None and sid is None:
                del self._keys[(owner, key)]  # nothing was created: the key may be used again

    def _check(self, owner: str) -> None:
        c = self.cfg
        total = len(self.running) + self._admitting
        if total >= c.max_sessions:
            raise Overloaded(f"{total} sessions running, the limit is {c.max_sessions}", c.retry_after_s)
        limit = self.limits(owner) or c.tenant_max_sessions
        if limit is not None and owner != LOCAL and self._per_owner[owner] >= limit:
            raise Overloaded(f"this tenant has {self._per_owner[owner]} sessions running, its limit is {limit}",
                             c.retry_after_s)
        if self.queued() >= c.queue_limit:
            raise Overloaded(f"{self.queued()} engine requests queued, the limit is {c.queue_limit}", c.retry_after_s)
        if (why := self.paused(c.ack_timeout_s)) is not None:  # work it could not store in time: running
            # sessions' writes wait for the log meanwhile; the answer a create would get after ack_timeout_s
            raise ServiceUnavailable(f"{why}; new sessions wait until it is")

    def started(self, sid: str, owner: str, key: str | None = None) -> None:
        """A session runs (created now, or restored from the log)."""
        self.running[sid] = owner
        self._per_owner[owner] += 1
        if key is not None:
            self._keys[(owner, key)] = sid

    def ended(self, sid: str) -> None:
        owner = self.running.pop(sid, None)
        if owner is not None:
            self._per_owner[owner] -= 1
            if not self._per_owner[owner]:
                del self._per_owner[owner]

    def first(self, owner: str, key: str | None) -> str | None:
        """The session an earlier create with this key started, if any (409 while it is being created)."""
        if key is None or (owner, key) not in self._keys:
            return None
        sid = self._keys[(owner, key)]
        if sid is None:
            raise Conflict("a create with this Idempotency-Key is still in progress; retry it shortly")
        return sid

    def forget(self, sid: str, owner: str, key: str | None) -> None:
        """The session left memory: its key is no longer answered from here."""
        if key is not None and self._keys.get((owner, key)) == sid:
            del self._keys[(owner, key)]

    def retire(self, sessions: dict[str, Any], sid: str) -> None:
        """Session ``sid`` finished: keep the newest ``retain_finished`` finished ``sessions`` in memory
        and drop the older ones (their records stay in the log), with their create keys."""
        self.ended(sid)
        self._finished.append(sid)
        while len(self._finished) > self.cfg.retain_finished:
            old = sessions.pop(self._finished.popleft(), None)
            if old is not None:
                self.forget(old.id, old.owner, old.idempotency_key)
