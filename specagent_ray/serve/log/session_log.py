"""The durable session log: what a restarted coordinator resumes from.

Records are appended in memory and written in segments (group commit): one conditional create holds every
record appended since the previous one, so a thousand sessions cost one write per flush, not a thousand.
``durable()`` waits until everything appended so far is stored; the coordinator awaits it before a staged
write executes (the intent) and before it shows a commit to clients.

Keys (epoch = the writer's lease epoch, see lease.py; seq = a position, never used twice):
- ``log/<epoch:08d>/<seq:012d>.jsonl``: a segment, one JSON record per line, each with ``sid`` and ``i``
  (the record's number in its epoch);
- ``snap/<epoch:08d>-<seq:012d>.json``: a snapshot, the stored records of every live session at that seq;
- ``archive/<epoch:08d>-<seq:012d>.jsonl``: records of the sessions that finished before that snapshot.

Replay reads the newest readable snapshot and the segments of its epoch after it, and nothing else: a
displaced writer's late segments (another epoch) and an unknown-outcome write that lands late (a position
before the snapshot) are never read. Every holder writes a snapshot before its first segment.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ...storage.base import NotFound, Store, StoreError
from .lease import Fenced, Lease

log = logging.getLogger(__name__)
SEGMENT = re.compile(r"^log/(?:(\d{8})/)?(\d{12})\.jsonl$")  # no epoch folder: written before leases (epoch 0)
SNAPSHOT = re.compile(r"^snap/(\d{8})-(\d{12})\.json$")
_SID = re.compile(rb'^\{"sid":"([0-9A-Za-z_.:-]{1,64})"')  # the session of a line too broken to parse
Record = dict[str, Any]


@dataclass
class Replay:
    """What a log holds: each session's records in append order, the sessions that cannot be restored
    (a record could not be read) with the reason, and every problem met, naming key and line."""

    sessions: dict[str, list[Record]] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    keys_read: int = 0

    def problem(self, where: str, reason: str, sid: str | None) -> None:
        text = f"{where}: {reason}"
        if sid is not None:
            self.broken.setdefault(sid, text)
        self.problems.append(text + (f" (session {sid})" if sid else " (no session named)"))
        log.error("session log: %s", self.problems[-1])


class SessionLog:
    """Guarantees: records are stored in append order and a stored key is never written again (every
    segment and snapshot is a conditional create at a fresh position, whatever became of the previous
    attempt); ``durable()`` returns only once every record appended before the call is stored, by a
    writer that held the lease throughout; a record in a retried batch that landed twice is replayed
    once; one unreadable record costs only its own session; replay reads one snapshot and the segments
    after it, so its cost follows the live sessions, not the log's history."""

    def __init__(self, store: Store, lease: Lease | None = None, compact_min: int = 20_000):
        self.store = store
        self.lease = lease or Lease(store)
        self.compact_min = compact_min  # records stored since the last snapshot before a compaction
        self.epoch = 0
        self.on_fenced: Callable[[str], None] = lambda reason: None
        self._pending: list[tuple[str, int, Record]] = []
        self._next = 0  # the next position in this epoch
        self._n = 0  # records appended in this epoch
        self._lock = asyncio.Lock()
        self._live: dict[str, list[Record]] = {}  # stored records of sessions not finished
        self._closed: dict[str, list[Record]] = {}  # finished since the last snapshot; archived by the next
        self._live_records = self._since_snapshot = 0
        self._renewer: asyncio.Task | None = None
        self._compactor: asyncio.Task | None = None
        self.flushes = self.compactions = 0

    # -- life -----------------------------------------------------------------------------------------

    async def open(self) -> Replay:
        """Take the lease, wait out the previous holder, replay, and store this epoch's first snapshot."""
        wait = await asyncio.to_thread(self.lease.acquire)
        self._renewer = asyncio.get_running_loop().create_task(self._renew_forever())
        if wait > 0:
            log.info("waiting %.1f s for the previous lease holder to stop", wait)
            await asyncio.sleep(wait)
        self.epoch = self.lease.epoch
        replay = await asyncio.to_thread(self.replay)
        for sid, records in replay.sessions.items():
            done = sid in replay.broken or any(r.get("t") == "final" for r in records)
            (self._closed if done else self._live)[sid] = list(records)
        self._live_records = sum(map(len, self._live.values()))
        while True:  # nothing may be appended before this epoch's snapshot is stored
            try:
                await self._compact_locked()
                break
            except StoreError as exc:
                log.warning("could not store the opening snapshot (%s); retrying", exc)
                await asyncio.sleep(0.5)
        return replay

    async def close(self) -> None:
        """Stop renewing and hand the lease back (a clean shutdown)."""
        if self._renewer is not None:
            self._renewer.cancel()
        await asyncio.to_thread(self.lease.release)

    async def _renew_forever(self) -> None:
        # a thread of its own: a renewal never queues behind the default pool's work (segment and snapshot
        # writes, replay, grading), which can hold every worker for seconds on a busy machine
        renewer = ThreadPoolExecutor(1, thread_name_prefix="lease-renew")
        loop = asyncio.get_running_loop()
        try:
            await self._renew_on(renewer, loop)
        finally:
            renewer.shutdown(wait=False)

    async def _renew_on(self, renewer: ThreadPoolExecutor, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            await asyncio.sleep(self.lease.retry_s)
            try:
                await loop.run_in_executor(renewer, self.lease.renew)
            except Fenced as exc:
                self.on_fenced(str(exc))
                return

    def _check_lease(self) -> None:
        try:
            self.lease.check()
        except Fenced as exc:
            self.on_fenced(str(exc))
            raise

    def paused(self, grace_s: float = 0.0) -> str | None:
        """Why this log cannot store records now, or None: its lease lost, or past its renew deadline for
        over ``grace_s`` without a confirmed renewal (a create waits that long for its record anyway, so
        a shorter lapse only slows it). New work is refused while it is paused (admission: 503 with Retry-After)."""
        if self.epoch == 0:
            return None  # not opened yet: a create waits for the opening anyway
        if self.lease.lost is not None:
            return f"the session log lease was lost ({self.lease.lost})"
        if self.lease.overdue_s() > grace_s:
            return (f"the session log lease is not confirmed (renew deadline {self.lease.renew_deadline_s:g} s, "
                    f"over {grace_s:g} s ago)")
        return None

    # -- appending --------------------------------------------------------------------------------

    def append(self, session_id: str, record: Record) -> None:
        self._pending.append((session_id, self._n, record))
        self._n += 1

    async def durable(self) -> None:
        """Flush: every record appended before this call is stored when it returns. Raises ``Fenced``
        once the lease is lost and ``StoreError`` (the batch is kept for the next flush) on a failure."""
        async with self._lock:  # one writer; waiters behind it find their records already written
            self._check_lease()
            if not self._pending:
                return
            batch, self._pending = self._pending, []
            key, self._next = self._key("log", self._next), self._next + 1  # never reused, whatever happens
            data = "".join(json.dumps({"sid": sid, "i": i, **r}, separators=(",", ":"), default=str) + "\n"
                           for sid, i, r in batch).encode()
            try:
                await asyncio.to_thread(self.store.create, key, data)
                self._check_lease()  # stored after the lease ran out: a successor may not have read it
            except BaseException:
                self._pending[:0] = batch  # keep order; the next flush stores them at a new position
                raise
            self.flushes += 1
            self._stored(batch)
        due = self._since_snapshot >= max(self.compact_min, 2 * self._live_records)
        if due and (self._compactor is None or self._compactor.done()):
            self._compactor = asyncio.get_running_loop().create_task(self._compact_quietly())

    def _key(self, kind: str, seq: int) -> str:
        return f"log/{self.epoch:08d}/{seq:012d}.jsonl" if kind == "log" else f"{kind}/{self.epoch:08d}-{seq:012d}"

    def _stored(self, batch: list[tuple[str, int, Record]]) -> None:
        for sid, _, record in batch:
            records = self._live.setdefault(sid, [])
            records.append(record)
            self._live_records += 1
            if record.get("t") == "final":
                self._closed[sid] = self._live.pop(sid)
                self._live_records -= len(records)
        self._since_snapshot += len(batch)

    # -- compaction -----------------------------------------------------------------------------

    async def _compact_quietly(self) -> None:
        try:
            await self.compact()
        except (StoreError, Fenced) as exc:  # the log stays as it was; the next flush tries again
            log.warning("session log compaction failed: %s", exc)

    async def compact(self) -> None:
        """Archive the sessions finished since the last snapshot, store a snapshot of the live ones, and
        delete every segment and snapshot it supersedes. A failure leaves the log as it was."""
        async with self._lock:
            await self._compact_locked()

    async def _compact_locked(self) -> None:
        self._check_lease()
        seq, self._next = self._next, self._next + 1
        closed, live = self._closed, {sid: list(records) for sid, records in self._live.items()}
        self._closed = {}
        try:
            await asyncio.to_thread(self._write_snapshot, seq, live, closed)
        except BaseException:
            self._closed = {**closed, **self._closed}
            raise
        self._since_snapshot = 0
        self.compactions += 1
        try:
            await asyncio.to_thread(self._delete_before, seq)
        except StoreError as exc:  # left for the next compaction; replay never reads them
            log.warning("could not delete superseded log segments: %s", exc)

    def _write_snapshot(self, seq: int, live: dict[str, list[Record]], closed: dict[str, list[Record]]) -> None:
        if closed:
            lines = (json.dumps({"sid": sid, **r}, separators=(",", ":"), default=str) + "\n"
                     for sid, records in closed.items() for r in records)
            self.store.create(self._key("archive", seq) + ".jsonl", "".join(lines).encode())
        doc = {"epoch": self.epoch, "seq": seq, "sessions": live}
        self.store.create(self._key("snap", seq) + ".json", json.dumps(doc, separators=(",", ":"), default=str).encode())

    def _delete_before(self, seq: int) -> None:
        mine = (self.epoch, seq)
        for key in self.store.list("log/") + self.store.list("snap/"):
            if (position := _position(key)) is not None and position < mine:
                self.store.delete(key)

    # -- replay ---------------------------------------------------------------------------------

    def replay(self) -> Replay:
        """The newest readable snapshot, then the segments of its epoch after it, grouped by session."""
        out = Replay()
        snapshots = sorted((p, k) for k in self.store.list("snap/") if (p := _position(k)) is not None)
        start = None
        for position, key in reversed(snapshots):
            out.keys_read += 1
            try:
                doc = json.loads(self.store.get(key))
                out.sessions = {sid: list(records) for sid, records in doc["sessions"].items()}
                start = position
                break
            except (NotFound, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
                out.problem(key, f"unreadable snapshot ({type(exc).__name__}: {exc}); trying an older one", None)
        segments = sorted((p, k) for k in self.store.list("log/") if (p := _position(k)) is not None)
        seen: set[tuple[int, int]] = set()
        for position, key in segments:
            if start is not None and (position[0] != start[0] or position <= start):
                continue
            out.keys_read += 1
            self._read_segment(key, position[0], out, seen)
        return out

    def all_sessions(self) -> list[list[Record]]:
        """Every session the log holds, finished ones included (the archives, then what ``replay`` reads),
        each once; for reports such as usage, never for restoring sessions. Unreadable lines are skipped."""
        out: dict[str, list[Record]] = {}
        for key in sorted(self.store.list("archive/")):
            archived = Replay()
            try:
                self._read_segment(key, -1, archived, set())
            except (NotFound, StoreError) as exc:
                log.warning("usage: archive %s unreadable: %s", key, exc)
                continue
            out.update(archived.sessions)
        for sid, records in self.replay().sessions.items():
            if len(records) >= len(out.get(sid, ())):  # a crash between archive and snapshot leaves both
                out[sid] = records
        return list(out.values())

    def _read_segment(self, key: str, epoch: int, out: Replay, seen: set[tuple[int, int]]) -> None:
        for line_no, raw in enumerate(self.store.get(key).split(b"\n"), 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
                sid, number = record.pop("sid"), record.pop("i", None)
                if not isinstance(sid, str) or not isinstance(record.get("t"), str):
                    raise ValueError("no session id or record kind")
            except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
                match = _SID.match(raw)
                out.problem(f"{key} line {line_no}", f"unreadable record ({type(exc).__name__}: {exc})",
                            match.group(1).decode() if match else None)
                continue
            if number is not None:
                if (epoch, number) in seen:
                    continue  # a retried batch that landed twice
                seen.add((epoch, number))
            out.sessions.setdefault(sid, []).append(record)


def _position(key: str) -> tuple[int, int] | None:
    """(epoch, seq) of a segment or snapshot key; None for any other key."""
    match = SEGMENT.match(key) or SNAPSHOT.match(key)
    if match is None:
        return None
    return int(match.group(1) or 0), int(match.group(2))
