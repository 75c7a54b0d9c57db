"""The coordinator: owns every session's state machine and schedules their blocks.

Sessions are asyncio tasks running the protocol's own methods (Algorithm 1 and the baselines), wired to
shared engine clients that batch verify requests across sessions (``engine_client.py``) and to the tool
host. Admission control keeps the number of running sessions and queued engine requests bounded: past
either limit a new session or message gets ``Overloaded`` (HTTP 429 with Retry-After).

Durability: every record goes to the session log (group commit) before it is shown to clients; a staged
write's intent is durable before the write runs; create, messages and tool results are answered only once
their records are stored. A restarted coordinator takes the log's lease (a displaced one is fenced: it
stops appending and executing), replays the log, finishes any write whose intent it logged (the tool
host's durable idempotency records make that at-most-once), and resumes each unfinished session from its
committed history. A session whose records cannot be read is reported and skipped; the rest are served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from ..models.backend import BackendError
from ..protocol.baselines import METHODS
from ..protocol.interfaces import EngineUnavailable
from ..protocol.runtime import Parts, SpecConfig
from ..protocol.types import History, Task, ToolCall, UserToolCall
from ..storage.base import Store, StoreError
from .api import CreateSession, ToolResult, UserMessage
from .config import AppConfig, ClientSource
from .admission import LOCAL, Admission
from .errors import BadRequest, Conflict, NotFound, Overloaded, ServiceUnavailable, unwrap
from .lease import Fenced, Lease
from .records import Created, Final, Opening, Record, Resumed, UserMessageRecord, parse
from .reports import Metrics, merged, percentiles, resource_report, usage_by_role
from .session import (
    FINISHED,
    Catalog,
    IdleTimeout,
    Session,
    SessionTools,
    summary,
    user_for,
)
from .session_log import SessionLog
from .shards import session_id
from .sources import ToolSources
from .wire import step_dict

log = logging.getLogger(__name__)
GREETING = "Hi! How can I help you today?"  # tau2's default first agent message


class Coordinator:
    """Guarantees: a session's committed steps are in the log before clients see them; a staged write
    runs at most once (intent before, result after, one idempotency key); a failed engine or tool never
    crashes the coordinator, it fails (or re-drafts) one session with a reason."""

    def __init__(self, cfg: AppConfig, engines: Any, tool_host: Any, store: Store,
                 env: Mapping[str, str] | None = None, clock: Callable[[], float] = time.perf_counter,
                 shard: int = 0):
        self.cfg = cfg
        self.shard = shard  # its index among the coordinator shards; session ids name it (shards.py)
        self.engines = engines
        self.tool_host = tool_host
        c = cfg.coordinator
        self.log = SessionLog(store, Lease(store, c.lease_s, c.lease_skew_s), compact_min=c.compact_min)
        self.log.on_fenced = self._fence
        self.fenced: str | None = None
        self.broken: dict[str, str] = {}  # sessions the log could not restore, with the reason
        self.log_problems = 0
        self.env = dict(os.environ if env is None else env)
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.admission = Admission(c, self.engines.queued)
        self._finished: deque[str] = deque()  # in order of finishing; the oldest are dropped first
        self.metrics = Metrics()
        self.sources = ToolSources(cfg, tool_host)
        self._dirty: set[Session] = set()
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task | None = None
        self.resumed = 0
        self.on_fallback: Callable[[str], None] = lambda kind: None

    # -- life -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Take the session log's lease, replay the log and resume every unfinished session. A session
        whose records cannot be read or restored is reported (``stats()``, the log) and not served."""
        if self._flusher is not None:
            return
        self._flusher = asyncio.get_running_loop().create_task(self._flush_forever())
        await self.sources.warm()
        replay = await self.log.open()
        self.log_problems = len(replay.problems)
        for sid, reason in replay.broken.items():
            self._broken(sid, reason)
        for sid, records in replay.sessions.items():
            if sid in self.broken:
                continue
            try:
                await self._restore(sid, records)
            except Exception as exc:  # noqa: BLE001 - one bad session must not stop the others
                log.exception("could not restore session %s", sid)
                self._drop(sid)
                self._broken(sid, f"restore failed: {type(exc).__name__}: {exc}")

    def _broken(self, sid: str, reason: str) -> None:
        self.broken[sid] = reason
        while len(self.broken) > self.cfg.coordinator.retain_finished:
            self.broken.pop(next(iter(self.broken)))

    def _drop(self, sid: str) -> None:
        s = self.sessions.pop(sid, None)
        self.admission.ended(sid)
        if s is not None and s.runner is not None:
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

    def _append(self, sid: str, record: Record, data: dict[str, Any]) -> None:
        self.log.append(sid, data)
        self._dirty.add(self.sessions[sid])
        self._wake.set()
        self.metrics.count(record)
        if record.t == "verifier_fallback":
            self.on_fallback("verifier")

    # -- API --------------------------------------------------------------------------------------------

    async def create(self, req: CreateSession, owner: str = LOCAL, idempotency_key: str | None = None
                     ) -> dict[str, Any]:
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
            source = self.sources.check(req)
            task = await self.sources.task(req, source)
            catalog = await self.sources.catalog(req, source)
            session = self._session(session_id(self.shard, secrets.token_hex(8)), req, task, owner, idempotency_key)
            started(session.id)
        session.record(Created(request=req, opening=task.instruction, owner=owner, idempotency_key=idempotency_key))
        try:
            await self._stored()
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
        if idempotency_key is not None and idempotency_key in s.message_keys:
            if s.message_keys[idempotency_key] != (msg.text, msg.stop):
                raise Conflict("this Idempotency-Key was used for a different message")
            await self._stored()
            return summary(s)
        s = self._live(sid, owner)
        if s.request.user != "client":
            raise Conflict(f"session {sid}'s user is {s.request.user!r}; only client-user sessions take messages")
        limit = self.cfg.coordinator.inbox_limit
        if s.inbox.qsize() >= limit:
            raise Overloaded(f"session {sid} holds {limit} unanswered messages, its limit", 1)
        s.record(UserMessageRecord(text=msg.text, stop=msg.stop, idempotency_key=idempotency_key))
        if idempotency_key is not None:
            s.message_keys[idempotency_key] = (msg.text, msg.stop)
        s.inbox.put_nowait((msg.text, msg.stop))
        await self._stored()
        return summary(s)

    async def post_tool_result(self, sid: str, res: ToolResult, owner: str = LOCAL) -> dict[str, Any]:
        """Deliver a client tool's result; answers once it is stored (503: delivered, not yet stored)."""
        from ..protocol.types import Observation

        s = self._live(sid, owner)
        s.deliver_tool_result(res.call_id, Observation(res.content, error=res.error))
        await self._stored()
        return summary(s)

    async def _stored(self) -> None:
        """Return once every record appended so far is stored. 503 when the log cannot store them
        within ``ack_timeout_s`` (they stay queued: the flusher keeps trying) or this coordinator is fenced."""
        deadline = self.clock() + self.cfg.coordinator.ack_timeout_s
        while True:
            try:
                return await self.log.durable()
            except Fenced as exc:
                raise ServiceUnavailable(f"this coordinator was fenced: {exc}") from None
            except StoreError as exc:
                if self.clock() >= deadline:
                    raise ServiceUnavailable(f"not acknowledged: the session log did not store it within "
                                             f"{self.cfg.coordinator.ack_timeout_s} s ({exc}); it stays "
                                             "queued, and the event stream shows it once stored") from None
                await asyncio.sleep(0.2)

    async def events(self, sid: str, after: int = 0, wait_s: float = 15.0, owner: str = LOCAL) -> dict[str, Any]:
        s = self._get(sid, owner)
        if after < 0:
            raise BadRequest(f"after must be >= 0, got {after}")
        events = await s.wait_events(after, wait_s)
        done = bool(s.events) and s.events[-1]["t"] == "final" and after + len(events) >= len(s.events)
        return {"events": events, "status": s.status, "done": done}

    async def cancel(self, sid: str, owner: str = LOCAL) -> dict[str, Any]:
        s = self._get(sid, owner)
        if s.runner is not None and not s.runner.done():
            s.runner.cancel()
            try:
                await s.runner
            except BaseException:  # noqa: BLE001 - the runner records its own end
                pass
        return summary(s)

    async def trajectory(self, sid: str, grade: bool = False, owner: str = LOCAL) -> dict[str, Any]:
        s = self._get(sid, owner)
        gradable = grade and s.reward is None and s.status == "done" and s.domain
        ungraded = await self.sources.graded(s) if gradable else None
        return {**summary(s), **({"grade_error": ungraded} if ungraded else {}),
                "method": s.request.method or self.cfg.defaults.method,
                "task_id": s.task.id, "opening": s.task.instruction, "reward": s.reward,
                "steps": [step_dict(x) for x in s.steps], "usage": usage_by_role(s.ledger),
                "resources": resource_report(s.ledger, self.cfg.hardware)}

    def stats(self) -> dict[str, Any]:
        m = self.metrics
        batches = {name: merged(b.sizes for b in group) for name, group in self.engines.batchers().items()}
        return {"engines": self.cfg.engines.kind, "shard": self.shard,
                "sessions": {"running": len(self.admission), **m.finished},
                "in_memory": len(self.sessions),
                "committed_steps": m.committed_steps, "overhead_s": percentiles(m.overheads),
                "intent_log_wait_s": percentiles(m.log_waits), "batch_sizes": batches,
                "queued": self.engines.queued(), "log_flushes": self.log.flushes, "resumed": self.resumed,
                "log": {"epoch": self.log.epoch, "flushes": self.log.flushes, "compactions": self.log.compactions,
                        "fenced": self.fenced, "problems": self.log_problems, "broken_sessions": dict(self.broken)},
                "fallbacks": m.fallbacks, "redrafts": m.redrafts,
                # CPU time of the coordinator's whole process (all threads, Ray's included) since it started
                "process_cpu_s": round(time.process_time() - m.cpu_at_start, 3)}

    # -- checks -----------------------------------------------------------------------------------------

    def _serving(self) -> None:
        if self.fenced is not None:
            raise ServiceUnavailable(f"this coordinator was fenced and serves no more: {self.fenced}")

    def _get(self, sid: str, owner: str) -> Session:
        """The session, if ``owner`` owns it; another tenant's session is answered as one that does not exist."""
        self._serving()
        s = self.sessions.get(sid)
        if s is not None and s.owner == owner:
            return s
        if s is None and sid in self.broken and owner == LOCAL:  # whose it was is unknown: operators only
            raise NotFound(f"session {sid!r} could not be restored from the session log: {self.broken[sid]}")
        raise NotFound(f"no session {sid!r} (finished sessions are kept for the last "
                       f"{self.cfg.coordinator.retain_finished})")

    def _live(self, sid: str, owner: str) -> Session:
        s = self._get(sid, owner)
        if s.status in FINISHED:
            raise Conflict(f"session {sid} is {s.status}; it takes no more input")
        return s

    # -- sessions -----------------------------------------------------------------------------------------

    def _session(self, sid: str, req: CreateSession, task: Task, owner: str, key: str | None) -> Session:
        s = Session(sid, req, task, self._append, self.clock, domain=self.sources.domain_of(req),
                    epoch=self.log.epoch, overheads=self.metrics.overheads, log_waits=self.metrics.log_waits,
                    owner=owner, idempotency_key=key, idle_timeout_s=self.cfg.coordinator.idle_timeout_s)
        self.sessions[sid] = s
        return s

    async def _finished_session(self, s: Session, close_tools: bool = True) -> None:
        """Account a session's end, free its tool environment, and drop the oldest finished sessions
        past ``retain_finished`` from memory (their records stay in the log)."""
        self.admission.ended(s.id)
        self.metrics.finished[s.status] = self.metrics.finished.get(s.status, 0) + 1
        self._finished.append(s.id)
        while len(self._finished) > self.cfg.coordinator.retain_finished:
            old = self.sessions.pop(self._finished.popleft(), None)
            if old is not None:
                self.admission.forget(old.id, old.owner, old.idempotency_key)
        if not close_tools:
            return
        try:
            await self.tool_host.close_session(s.id)
        except Exception:  # noqa: BLE001 - a leaked environment is not worth failing a finished session
            log.warning("could not close session %s's tool environments", s.id, exc_info=True)

    def _parts(self, s: Session, catalog: Catalog) -> Parts:
        weak, strong, verifier = self.engines.models(s, catalog)
        source = self.cfg.tool_sources[s.request.tool_source]
        if isinstance(source, ClientSource):
            async def run(call: ToolCall, key: str | None):
                return await s.client_call(call, key or f"{s.id}:r{len(s.events) + len(s.unpublished)}")
        else:
            async def run(call: ToolCall, key: str | None):
                epoch = self.log.epoch if key is not None else None  # writes carry the lease epoch
                try:
                    return await self.tool_host.execute(s.request.tool_source, s.id, call, key, epoch,
                                                        s.request.task_id)
                except Exception as exc:  # noqa: BLE001 - the tool host's own error, without Ray's traceback
                    raise unwrap(exc) from None
        tools = SessionTools(s, catalog, run, self.log.durable)
        user = user_for(s, self.cfg.engines, self.env, self._user_side(s))
        return Parts(weak, strong, verifier, tools, user, s.ledger, clock=self.clock, journal=s)

    def _user_side(self, s: Session):
        """The scripted user's own tools (dual-control domains) run on the tool host under
        ``Session.user_call_key``, so that no user call runs twice (also after a restart)."""
        async def run(call: ToolCall) -> UserToolCall:
            obs = await self.tool_host.execute(s.request.tool_source, s.id, call, s.user_call_key(call),
                                               self.log.epoch, s.request.task_id, "user")
            return UserToolCall(call, obs.content, obs.error)
        return run

    async def _run(self, s: Session, catalog: Catalog) -> None:
        try:
            parts = self._parts(s, catalog)
            if s.request.user == "tau2" and not s.task.instruction:
                with s.outside():
                    opening = await parts.user.user.reply(GREETING)  # type: ignore[attr-defined]
                s.task = Task(s.task.id, opening.content, s.task.context)
                s.record(Opening(text=opening.content))
            await parts.tools.finish_intents()  # type: ignore[attr-defined]
            spec = SpecConfig(k=s.request.k or self.cfg.defaults.k,
                              max_steps=s.request.max_steps or self.cfg.defaults.max_steps,
                              review_messages=s.request.review_messages)
            start = History(s.task, tuple(s.steps)) if s.steps else None
            method = METHODS[s.request.method or self.cfg.defaults.method]
            trajectory = await method(s.task, parts, spec, start)
            s.status, s.termination = "done", trajectory.termination.value
        except IdleTimeout as exc:
            s.status, s.error = "timed_out", str(exc)
        except asyncio.CancelledError:
            s.status, s.termination = "cancelled", "cancelled"
        except EngineUnavailable as exc:
            s.status, s.error = "failed", f"engine unavailable: {exc}"
        except BackendError as exc:
            s.status, s.error = "failed", f"engine error: {exc}"
        except Exception as exc:
            log.exception("session %s failed", s.id)  # the details stay here: they may name server config
            s.status, s.error = "failed", f"internal error: {type(exc).__name__} (logged on the server)"
        s.record(Final(status=s.status, termination=s.termination, error=s.error))  # type: ignore[arg-type]
        await self._finished_session(s)

    async def _restore(self, sid: str, records: list[dict[str, Any]]) -> None:
        """Rebuild one session from its records (``Session.restore``) and resume it unless it ended."""
        created = parse(records[0]) if records else None
        if not isinstance(created, Created):
            raise ValueError(f"session {sid}: its log does not start with 'created'")
        req = created.request
        source = self.cfg.tool_sources.get(req.tool_source)
        if source is None:
            raise ValueError(f"session {sid}: tool source {req.tool_source!r} is no longer configured")
        task = await self.sources.task(req, source)
        s = self._session(sid, req, Task(task.id, created.opening, task.context), created.owner,
                          created.idempotency_key)
        self.admission.started(sid, created.owner, created.idempotency_key)
        s.restore(records)
        self.metrics.committed_steps += len(s.steps)
        if s.status in FINISHED:
            await self._finished_session(s, close_tools=False)  # closed when it finished
            return
        s.record(Resumed(committed_steps=len(s.steps)))
        self.resumed += 1
        s.runner = asyncio.get_running_loop().create_task(self._run(s, await self.sources.catalog(req, source)))
