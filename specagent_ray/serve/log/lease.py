"""The session log's lease: which coordinator may append to the log and execute writes.

One object, ``lease.json``, holds ``{epoch, holder, renewed_at, period_s, released}``. A coordinator
takes the lease by raising the epoch with a compare-and-swap, so every epoch has exactly one holder, and
renews it every ``retry_s`` with another compare-and-swap on its own version. A newcomer always wins
(a restarted replica, the green cluster of a blue/green upgrade): the holder it displaced learns at its
next renewal that the version moved on and is fenced for good.

Time: a holder acts only while ``valid()``, that is within ``renew_deadline_s`` of starting its last
confirmed renewal, measured on its own monotonic clock. A newcomer waits until the displaced holder's
last ``renewed_at`` plus ``period_s`` plus ``skew_s`` has passed on its wall clock before it reads the
log. So the two never act at once, provided the hosts' wall clocks differ by less than ``skew_s`` (the
assumption every lease makes; NTP keeps it in milliseconds); the renew deadline, shorter than the
period, adds a margin of a third of the period on top.

The ratios are Kubernetes leader election's (a 15 s lease, a 10 s renew deadline, a 2 s retry): the
deadline is 2/3 of the period and a renewal is tried every 2/15 of it, so five renewals in a row can
fail or be slow before the holder pauses. A pause is not a failure: a write's intent waits for the
next confirmed renewal (``serve/log/group_commit.py``).
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ...storage.base import NotFound, PreconditionFailed, Store, StoreError

log = logging.getLogger(__name__)
KEY = "lease.json"


class Fenced(RuntimeError):
    """This coordinator's lease was taken over: it never appends or executes a write again."""


class LeaseUnconfirmed(StoreError):
    """The lease could not be renewed within its renew deadline (the store did not answer in time).
    Nothing may be appended or executed until a renewal succeeds; a store error, so callers retry."""

RENEW_DEADLINE = 2 / 3  # of the period: Kubernetes leader election's 10 s of 15 s
RETRY = 2 / 15  # of the period: its 2 s of 15 s


@dataclass(frozen=True)
class LeaseRecord:
    epoch: int
    holder: str
    renewed_at: float  # the holder's wall clock when it started the renewal
    period_s: float
    released: bool = False

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> LeaseRecord:
        return cls(**json.loads(data))


class Lease:
    """Guarantees: epochs only grow and each has one holder; ``acquire`` returns how long to wait before
    acting; a holder displaced by a newer epoch is ``lost`` at its next renewal and never acts again;
    ``valid()`` is False once ``renew_deadline_s`` passed without a confirmed renewal (the store slow or
    unreachable), and True again after a renewal succeeds if nobody took the lease meanwhile."""

    def __init__(self, store: Store, period_s: float = 15.0, skew_s: float = 0.5, holder: str | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        if period_s <= 0:
            raise ValueError(f"lease period must be > 0, got {period_s}")
        self.store, self.period_s, self.skew_s = store, period_s, skew_s
        self.renew_deadline_s, self.retry_s = period_s * RENEW_DEADLINE, period_s * RETRY
        self.holder = holder or f"{socket.gethostname()}-{secrets.token_hex(4)}"
        self.clock, self.wall = clock, wall
        self.epoch = 0
        self.lost: str | None = None
        self._version: str | None = None
        self._valid_until = float("-inf")

    def acquire(self, attempts: int = 50) -> float:
        """Take the next epoch. Returns the seconds to wait before reading the log (the displaced holder's
        remaining period). Raises ``StoreError`` if the store keeps refusing."""
        for _ in range(attempts):
            started, at = self.clock(), self.wall()
            try:
                data, version = self.store.read(KEY)
            except NotFound:
                mine = LeaseRecord(1, self.holder, at, self.period_s)
                try:
                    version = self.store.create(KEY, mine.encode())
                except PreconditionFailed:
                    continue  # another newcomer created it first: read it and go one above
                self._took(mine, version, started)
                return 0.0
            old = LeaseRecord.decode(data)
            mine = LeaseRecord(old.epoch + 1, self.holder, at, self.period_s)
            try:
                new_version = self.store.swap(KEY, mine.encode(), version)
            except PreconditionFailed:
                continue
            self._took(mine, new_version, started)
            if old.released:
                return 0.0
            return max(0.0, old.renewed_at + old.period_s + self.skew_s - self.wall())
        raise StoreError(f"could not take the lease {KEY!r} in {self.store} after {attempts} attempts")

    def _took(self, record: LeaseRecord, version: str, started: float) -> None:
        self.epoch, self._version, self.lost = record.epoch, version, None
        self._valid_until = started + self.renew_deadline_s
        log.info("took the session log lease: epoch %d (%s)", record.epoch, record.holder)

    def renew(self) -> bool:
        """One renewal. False if the store did not answer (still ``valid()`` until the period ends);
        raises ``Fenced`` once another holder has taken the lease."""
        self.check_not_lost()
        started = self.clock()
        mine = LeaseRecord(self.epoch, self.holder, self.wall(), self.period_s)
        try:
            self._version = self.store.swap(KEY, mine.encode(), self._version or "")
        except PreconditionFailed:
            self.lost = f"epoch {self.epoch} was taken over ({self._taker()})"
            raise Fenced(self.lost) from None
        except StoreError as exc:
            log.warning("could not renew the session log lease (epoch %d): %s", self.epoch, exc)
            return False
        self._valid_until = started + self.renew_deadline_s
        return True

    def _taker(self) -> str:
        try:
            now = LeaseRecord.decode(self.store.get(KEY))
            return f"now epoch {now.epoch}, held by {now.holder}"
        except (StoreError, ValueError, TypeError):
            return "the lease could not be read"

    def valid(self) -> bool:
        return self.lost is None and self.clock() < self._valid_until

    def overdue_s(self) -> float:
        """How long this holder has been past its renew deadline without a confirmed renewal (0 if not)."""
        return max(0.0, self.clock() - self._valid_until)

    def check_not_lost(self) -> None:
        if self.lost is not None:
            raise Fenced(f"session log lease lost: {self.lost}")

    def check(self) -> None:
        """Raise ``Fenced`` (for good) or ``LeaseUnconfirmed`` (until a renewal) unless this holder may act now."""
        self.check_not_lost()
        if not self.valid():
            raise LeaseUnconfirmed(f"session log lease (epoch {self.epoch}) not confirmed within "
                                   f"{self.renew_deadline_s:g} s")

    def release(self) -> None:
        """Hand the lease back so that a successor need not wait (a clean shutdown)."""
        if self.lost is not None or self._version is None:
            return
        mine = LeaseRecord(self.epoch, self.holder, self.wall(), self.period_s, released=True)
        try:
            self.store.swap(KEY, mine.encode(), self._version)
        except StoreError:
            return
        self.lost = "released"
