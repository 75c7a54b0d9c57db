"""The coordinator: owns every session's state machine and schedules their blocks.

Sessions are asyncio tasks running the protocol's own methods (Algorithm 1 and the baselines), wired to shared engine
clients that batch verify requests across sessions (``engine_client.py``) and to the tool host. Admission control
keeps running sessions and queued engine requests bounded: past either limit, ``Overloaded`` (429 with Retry-After).

Durability: every record goes to the session log (group commit) before clients see it; a staged write's intent is
durable before the write runs; create, messages and tool results are answered once stored. A restarted coordinator
takes the log's lease (a displaced one is fenced: it appends and executes nothing), replays the log and resumes each
unfinished session (``resume.py``; the tool host's idempotency records keep a logged write at most once). A session
whose records cannot be read is reported; the rest are served. A GPU meter gets every engine call (``meter_spans.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ...protocol.types import Observation, Task
from ...storage.base import Store
from ..core.api import CreateSession, ToolResult, UserMessage
from ..core.config import AppConfig
from ..core.errors import Conflict, NotFound, ServiceUnavailable
from ..engines.engine_client import EngineClient
from ..log.group_commit import GroupCommit
from ..log.lease import Lease
from ..log.records import Created, Deleted, Final, ProtocolEvent, Record, TurnMeta
from ..log.recovery import Recovery
from ..log.session_log import SessionLog
from ..toolhost.sources import ToolSources
from ..toolhost.tool_host import ToolHostClient
from .admission import LOCAL, Admission
from .conversation_records import Conversations
from .event_polls import events_many
from .meter_spans import MeterLink
from .reports import Metrics, shard_stats, shard_usage, trajectory_report
from .resume import resume
from .runner import SessionRunner
from .session import FINISHED, Session, summary
from .shards import session_id
from .turns import ApprovalPost, TurnPost, answer_approval, take_turn

log = logging.getLogger(__name__)


class Coordinator:
    """Guarantees: a session's committed steps are in the log before clients see them; a staged write
    runs at most once (intent before, result after, one idempotency key); a failed engine or tool never
    crashes the coordinator, it fails (or re-drafts) one session with a reason. ``wall``: its lease's clock."""

    def __init__(self, cfg: AppConfig, engines: EngineClient, tool_host: ToolHostClient, store: Store,
                 env: Mapping[str, str] | None = None, clock: Callable[[], float] = time.perf_counter,
                 shard: int = 0, wall: Callable[[], float] = time.time, meter: Any = None):
        self.cfg, self.shard = cfg, shard  # its index among the coordinator shards; session ids name it (shards.py)
        self.engines, self.tool_host, c = engines, tool_host, cfg.coordinator
        self.log = SessionLog(store, Lease(store, c.lease_s, c.lease_skew_s, wall=wall), compact_min=c.compact_min)
        self.log.on_fenced = self._fence
        self.fenced: str | None = None
        self.recovery = Recovery(c.retain_finished)
        self.env, self.clock = dict(os.environ if env is None else env), clock
        self.sessions: dict[str, Session] = {}
        self.sources = ToolSources(cfg, tool_host)
        self.admission = Admission(c, self.engines.queued, self.sources.rules.max_sessions, self.log.paused)
        self.metrics, self.commits = Metrics(), GroupCommit(self.log, c.ack_timeout_s, clock)
        self.on_event: Callable[[Session, ProtocolEvent], None] = lambda s, event: None  # Algorithm 1's events
        self.runner = SessionRunner(cfg, engines, tool_host, self.log, self.env, clock, lambda: len(self.admission),
                                    self.commits.stored)
        self.conversations = Conversations(shard, self.log.append, self.commits.stored, self._serving, wall)
        self.create_conversation, self.conversation = self.conversations.create, self.conversations.call  # its API
        self.events_many = partial(events_many, self)  # the events of every stream a gateway follows, in one call
        self.stats = partial(shard_stats, self)  # sessions by status, batch sizes, overheads, the log's health
        self.usage = partial(shard_usage, self)  # (tenant, since): by tenant and day, from this shard's log
        self.meter = MeterLink(meter, cfg.meter.push_s, wall) if meter and cfg.meter else None  # GPU meter

    # -- life -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Take the session log's lease, replay the log and resume every unfinished session, once: every call
        returns when that is done (``Recovery.start``). A session whose records cannot be read or restored is
        reported (``stats()``, the log) and not served."""
        self.commits.start()  # a no-op after the first call
        await self.recovery.start(self.log, self.sources.warm, partial(resume, self), self._drop)

    def _drop(self, sid: str) -> None:
        self.admission.ended(sid)
        if (s := self.sessions.pop(sid, None)) is not None and s.runner is not None:
            s.runner.cancel()

    def _fence(self, reason: str) -> None:
        """Another coordinator holds the log's lease: stop every session here, append and execute nothing."""
        if self.fenced is not None:
            return
        self.fenced = reason
        log.error("coordinator fenced, it stops serving: %s", reason)
        for s in self.sessions.values():
            if s.runner is not None and not s.runner.done():
                s.runner.cancel()

    def _append(self, sid: str, record: Record, data: dict[str, Any]) -> None:
        self.commits.append(self.sessions[sid], data)
        self.metrics.count(record)
        if isinstance(record, ProtocolEvent):
            self.on_event(self.sessions[sid], record)

    # -- API --------------------------------------------------------------------------------------------

    async def create(self, req: CreateSession, owner: str = LOCAL, idempotency_key: str | None = None,
                     turn: TurnMeta | None = None) -> dict[str, Any]:
        """Start a session owned by ``owner``. Answers only once its ``created`` record is stored; if the
        log cannot store it in time the session is ended unstarted and the answer is 503. A create that
        repeats an ``idempotency_key`` of the same owner answers with the first session."""
        self._serving()
        first = self.admission.first(owner, idempotency_key)
        if first is not None:
            s = self._get(first, owner)
            if s.request != req:
                raise Conflict("this Idempotency-Key was used for a different request")
            return summary(s)
        with self.admission.slot(owner, idempotency_key) as started:  # taken before the first await
            source = self.sources.check(req, owner)
            task = await self.sources.task(req, source)
            catalog = await self.sources.catalog(req, source)
            session = self._session(session_id(self.shard, secrets.token_hex(8)), req, task, owner, idempotency_key)
            started(session.id)
        session.record(Created(request=req, opening=task.instruction, owner=owner, idempotency_key=idempotency_key,
                               turn=turn, tools=catalog.listing() if turn else None))
        try:
            await self.commits.stored()
        except ServiceUnavailable:
            session.status, session.error = "failed", "not started: the session log did not store it in time"
            session.record(Final(status=session.status, error=session.error))
            await self._finished_session(session, close_tools=False)
            raise
        finally:  # also when the request is cancelled: its record is queued, so the session exists
            if session.status not in FINISHED:
                session.runner = asyncio.get_running_loop().create_task(self._run(session, catalog))
        return summary(session)

    async def post_message(self, sid: str, msg: UserMessage, owner: str = LOCAL,
                           idempotency_key: str | None = None) -> dict[str, Any]:
        """Queue the user's message; answers once it is stored (503: queued, not yet stored). A post that
        repeats an ``idempotency_key`` answers as the first did and queues nothing."""
        s = self._get(sid, owner)
        if not s.repeated_message(idempotency_key, msg.text, msg.stop):
            self._live(sid, owner).post_message(msg.text, msg.stop, idempotency_key, self.cfg.coordinator.inbox_limit)
        await self.commits.stored()
        return summary(s)

    async def post_tool_result(self, sid: str, res: ToolResult, owner: str = LOCAL) -> dict[str, Any]:
        """Deliver a client tool's result; answers once it is stored (503: delivered, not yet stored)."""
        (s := self._live(sid, owner)).deliver_tool_result(res.call_id, Observation(res.content, error=res.error))
        await self.commits.stored()
        return summary(s)

    async def respond(self, sid: str, post: TurnPost, owner: str = LOCAL, idempotency_key: str | None = None,
                      wait_s: float = 0.0) -> dict[str, Any]:
        """The next turn (``turns.py``), answered once stored with its number and where its records begin
        (and, ``wait_s``, its records once the agent's turn ended); a repeat records nothing."""
        s = self._get(sid, owner)
        n = take_turn(s, post, idempotency_key, self.cfg.coordinator.inbox_limit)  # 409 if s ended, unless a repeat
        await self.commits.stored()
        turn = await s.wait_events(s.turns.starts[n], wait_s, whole_turn=True) if wait_s else {}
        return {**summary(s), "turn": n, "start": s.turns.starts[n], **turn}

    async def post_approval(self, sid: str, post: ApprovalPost, owner: str = LOCAL) -> dict[str, Any]:
        """The client's answer to an approval request; a repeat of the same answer changes nothing."""
        answer_approval(s := self._live(sid, owner), post)
        await self.commits.stored()
        return summary(s)

    async def delete(self, sid: str, owner: str = LOCAL) -> dict[str, Any]:
        """Cancel the session if it runs and hide it from its owner too (its records stay in the log)."""
        await (s := self._get(sid, owner)).cancel()
        s.record(Deleted())
        s.deleted = True
        await self.commits.stored()
        return summary(s)

    async def events(self, sid: str, after: int = 0, wait_s: float = 15.0, owner: str = LOCAL,
                     whole_turn: bool = False) -> dict[str, Any]:
        return await self._get(sid, owner).wait_events(after, wait_s, whole_turn)

    async def cancel(self, sid: str, owner: str = LOCAL) -> dict[str, Any]:
        await (s := self._get(sid, owner)).cancel()
        return summary(s)

    async def trajectory(self, sid: str, grade: bool = False, owner: str = LOCAL) -> dict[str, Any]:
        s = self._get(sid, owner)
        gradable = grade and s.reward is None and s.status == "done" and s.domain
        ungraded = await self.sources.graded(s) if gradable else None
        measured = await self.meter.measured(sid) if self.meter else None
        return {**trajectory_report(s, self.cfg, measured), **({"grade_error": ungraded} if ungraded else {})}

    # -- checks -----------------------------------------------------------------------------------------

    def _serving(self) -> None:
        if self.fenced is not None:
            raise ServiceUnavailable(f"this coordinator was fenced and serves no more: {self.fenced}")

    def _get(self, sid: str, owner: str) -> Session:
        """The session, if ``owner`` owns it; another tenant's session is answered as one that does not exist."""
        self._serving()
        s = self.sessions.get(sid)
        if s is not None and s.owner == owner and not s.deleted:
            return s
        broken = self.recovery.broken.get(sid)
        if s is None and broken is not None and owner == LOCAL:  # whose it was is unknown: operators only
            raise NotFound(f"session {sid!r} could not be restored from the session log: {broken}")
        raise NotFound(f"no session {sid!r} (finished sessions are kept for the last "
                       f"{self.cfg.coordinator.retain_finished})")

    def _live(self, sid: str, owner: str) -> Session:
        (s := self._get(sid, owner)).takes_input()
        return s

    # -- sessions -----------------------------------------------------------------------------------------

    def _session(self, sid: str, req: CreateSession, task: Task, owner: str, key: str | None) -> Session:
        s = Session(sid, req, task, self._append, self.clock, domain=self.sources.domain_of(req),
                    epoch=self.log.epoch, overheads=self.metrics.overheads, log_waits=self.metrics.log_waits,
                    owner=owner, idempotency_key=key, idle_timeout_s=self.cfg.coordinator.idle_timeout_s)
        s.ledger.on_record = self.meter.hook(owner, sid) if self.meter else None
        self.sessions[sid] = s
        return s

    async def _finished_session(self, s: Session, close_tools: bool = True) -> None:
        """Account a session's end, free its tools, forget the oldest past ``retain_finished`` (not its records)."""
        self.admission.retire(self.sessions, s.id)
        self.metrics.finish(s)
        if not close_tools:
            return
        try:
            await self.tool_host.close_session(s.id)
        except Exception:  # noqa: BLE001 - a leaked environment is not worth failing a finished session
            log.warning("could not close session %s's tool environments", s.id, exc_info=True)

    async def _run(self, s: Session, catalog: Any) -> None:
        ended = await self.runner.run(s, catalog)  # False: its end is not stored, and its successor resumes it
        await self._finished_session(s, close_tools=ended)  # in the same tool environments: they stay open
