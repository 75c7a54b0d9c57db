"""How one served session runs: the adapters that connect the protocol's tools and user to the tool
host or the client, and ``SessionRunner``, which assembles a session's parts and runs its method to
the end.

Guarantees: a write's intent is durable before the write runs (and after the client's approval, where
the request asks for one: a denied write never runs), and it runs under one idempotency key
(also when a restarted coordinator finishes it); a user-side tool call runs under
``Session.user_call_key``; however the method ends (done, cancelled, timed out, an engine or any
other failure), the session's ``final`` record says how, and no exception escapes; a session whose
``final`` record is not stored has not ended (its coordinator was fenced or crashed): its tool
environments stay open for the coordinator that resumes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import cached_property
from typing import Any

from ...models.backend import BackendError
from ...models.structured import MessageFormat
from ...models.tau2_user import GREETING
from ...protocol.baselines import METHODS
from ...protocol.interfaces import EngineUnavailable, Verifier
from ...protocol.runtime import Parts, SpecConfig
from ...protocol.types import Effect, History, Observation, Task, Tier, ToolCall, Unavailable, UserToolCall
from ..core.api import Approval, CreateSession
from ..core.catalog import Catalog
from ..core.config import AppConfig, ClientSource
from ..engines.engine_client import EngineClient
from ..log.records import AgentMessage, Final, Opening, ToolResultRecord, UserMessageRecord
from ..log.session_log import SessionLog
from ..log.wire import observation_dict
from ..toolhost.tool_host import ToolHostClient
from .block_sizes import BlockSizes, engine_load, mid_replicas, replicas
from .patience import end_stored, intent_stored, tool_host_call
from .session import IdleTimeout, Session
from .turns import approved

log = logging.getLogger(__name__)
CHAIN_METHODS = ("specagent",)  # the methods a mid engine reviews for (specagent-exact's judge is the strong one's)


Execute = Callable[[ToolCall, "str | None"], Awaitable[Observation]]


class SessionTools:
    """The protocol's ``ToolAdapter`` for one session. Writes get an intent (made durable before they
    run) and an idempotency key; every observation is recorded as a ``tool_result`` event. Where the session
    has an ``output_format``, a message to the user is valid only if it follows it (``MessageRules``)."""

    def __init__(self, session: Session, catalog: Catalog, run: Execute, durable: Callable[[], Awaitable[None]]):
        self.session = session
        self.catalog = catalog
        self._run = run
        self._durable = durable
        self._asking = asyncio.Lock()  # a parallel action's writes ask their approvals one at a time

    @cached_property
    def _format(self) -> MessageFormat | None:
        return MessageFormat.of(self.session.request.output_format)

    def classify(self, call: ToolCall) -> Effect:
        return self.catalog.classify(call)  # WRITE for any call above READ: its tier's rules included

    def tier(self, call: ToolCall) -> Tier:
        """The call's risk tier from the session's Catalog (a ``TieredTools``)."""
        return self.catalog.tier(call)

    def validate(self, call: ToolCall) -> str | None:
        return self.catalog.validator.check(call)

    def validate_message(self, text: str) -> str | None:
        """None if ``text`` may reach the user: any text, or JSON its output format accepts."""
        return None if self._format is None else self._format.check(text)

    async def execute(self, call: ToolCall) -> Observation:
        if self.classify(call) is Effect.WRITE:
            approval = approval_rule(self.session.request, self.catalog.routes.get(call.name))
            if approval is not None and approval.needed(call.name, self.tier(call).value):
                async with self._asking:  # each request in a turn of its own: one answer ends one wait
                    ok, reason = await approved(self.session, call)  # after the verifier's acceptance, never instead
                if not ok:
                    return Observation(f"The user denied this call{': ' + reason if reason else '.'}", error=True)
            key = self.session.intent(call)
            with self.session.waiting_for_log():
                await self._durable()  # the intent is stored before the write can have any effect
            obs = await self.run_keyed(call, key)
        else:
            with self.session.outside():
                obs = await self._run(call, None)
        self.session.record(ToolResultRecord(name=call.name, observation=observation_dict(obs)))
        return obs

    async def finish_intents(self) -> None:
        """Writes whose intent was logged but whose step was not committed before a restart: run them
        under their own key (the tool host answers a spent key with its first result) and commit."""
        s = self.session
        for intent in s.unresolved_intents():
            call = ToolCall(intent.call.name, intent.call.arguments)
            s.resolved(intent, s.results.get(intent.key) or await self.run_keyed(call, intent.key))

    async def run_keyed(self, call: ToolCall, key: str) -> Observation:
        with self.session.outside():
            obs = await self._run(call, key)
        self.session.result(key, obs)
        return obs


def approval_rule(request: CreateSession, source: str | None) -> Approval | None:
    """The approval rule of the source a tool comes from: the session's own, or one of ``more_sources``'."""
    if source is None:
        return request.approval
    return next(u.approval for u in request.more_sources if u.tool_source == source)


class ClientUser:
    """The user is the client: an agent message is published, and the session waits for the reply
    the client posts. A reply with ``stop`` ends the conversation."""

    def __init__(self, session: Session):
        self.session = session

    async def reply(self, text: str) -> Observation:
        s = self.session
        s.flush_calls()
        s.record(AgentMessage(text=text))
        s.status = "waiting_user"
        try:
            with s.outside():
                answer, stop = await s.from_client(s.inbox.get(), "user message")
        finally:
            if s.status == "waiting_user":
                s.status = "running"
        return Observation(answer, user_stop=stop)


class TimedUser:
    """Any protocol ``User`` whose time counts as outside the coordinator, with the exchange recorded."""

    def __init__(self, session: Session, user: Any):
        self.session, self.user = session, user

    async def reply(self, text: str) -> Observation:
        self.session.record(AgentMessage(text=text))
        with self.session.outside():
            obs = await self.user.reply(text)
        self.session.record(UserMessageRecord(text=obs.content, stop=obs.user_stop))
        return obs


def user_for(s: Session, engines: Any, env: Mapping[str, str], run_user: Any = None) -> Any:
    """Who answers as the session's user: the client, the scripted tau2 customer (sim engines; in a
    dual-control domain it runs its own tools with ``run_user``), or tau2's LLM user simulator on the
    profile's user (or verifier) endpoint."""
    if s.request.user == "client":
        return ClientUser(s)
    if s.request.user == "simulated":
        from ...tasks import benchmark

        return TimedUser(s, benchmark(s.domain).scripted_user(s.task, s.steps, run_user))
    from ...models.backend import ChatEndpoint
    from ...models.tau2_user import Tau2User

    who = engines.user or engines.verifier
    key = env.get(who.api_key_env, "EMPTY") if who.api_key_env else "EMPTY"
    return TimedUser(s, Tau2User(s.task.context, ChatEndpoint(who.url, who.model, key), engines.user_max_tokens))


class SessionRunner:
    """Assembles each session's parts (the shared engine clients, its tools on the tool host or the
    client, its user) and runs the session's method from its committed history to the end."""

    def __init__(self, cfg: AppConfig, engines: EngineClient, tool_host: ToolHostClient, log: SessionLog,
                 env: Mapping[str, str], clock: Callable[[], float], running: Callable[[], int] = lambda: 0,
                 durable: Callable[[], Awaitable[None]] | None = None):
        self.cfg, self.engines, self.tool_host, self.log, self.env, self.clock = cfg, engines, tool_host, log, env, clock
        self.durable = durable or log.durable  # the coordinator's group commit (``intent_stored`` waits on it)
        reps = replicas(cfg.speculation, cfg.engines)
        self.block_sizes = BlockSizes(cfg.speculation, cfg.hardware, cfg.defaults.k,
                                      engine_load(engines.priority, running, cfg.coordinators, reps), reps,
                                      mid_replicas(cfg.speculation, cfg.engines))

    async def intent_stored(self) -> None:
        """A write's intent, stored: a paused log delays the write, never fails it (``patience.py``)."""
        await intent_stored(self.durable, lambda: self.log.lease.lost is not None, self.clock,
                            self.cfg.coordinator.intent_wait_s)

    def parallel_calls(self, s: Session) -> bool:
        """Whether ``s`` runs with parallel calls: its own ``parallel_calls``, else the profile's default."""
        return self.cfg.defaults.parallel_calls if s.request.parallel_calls is None else s.request.parallel_calls

    def parts(self, s: Session, catalog: Catalog) -> Parts:
        weak, strong, verifier = self.engines.models(s, catalog, parallel=self.parallel_calls(s))

        async def run(call: ToolCall, key: str | None):
            """A call goes to the source its tool comes from: the client, or the tool host."""
            name = catalog.routes.get(call.name, s.request.tool_source)
            if isinstance(self.cfg.tool_sources[name], ClientSource):
                return await s.client_call(call, key or s.read_call_id(call))
            epoch = self.log.epoch if key is not None else None  # writes carry the lease epoch
            return await tool_host_call(lambda: self.tool_host.execute(name, s.id, call, key, epoch, s.request.task_id),
                                        self.clock, self.cfg.coordinator.tool_retry_s)
        tools = SessionTools(s, catalog, run, self.intent_stored)
        user = user_for(s, self.cfg.engines, self.env, self._user_side(s))
        return Parts(weak, strong, verifier, tools, user, s.ledger, clock=self.clock, journal=s,
                     block_size=self.block_sizes.for_session(), mid=self.mid(s, catalog))

    def mid(self, s: Session, catalog: Catalog) -> Verifier | None:
        """The session's mid verifier (the three-tier chain): the engine client's, for a chain method; None
        where the engines have none (an engine client without ``mid``, ``models/scripted_plan.py``'s, has none)."""
        mid = getattr(self.engines, "mid", None)
        if mid is None or (s.request.method or self.cfg.defaults.method) not in CHAIN_METHODS:
            return None
        return mid(s, catalog, parallel=self.parallel_calls(s))

    def _user_side(self, s: Session):
        """The scripted user's own tools (dual-control domains) run on the tool host under
        ``Session.user_call_key``, so that no user call runs twice (also after a restart)."""
        async def run(call: ToolCall) -> UserToolCall:
            obs = await tool_host_call(lambda: self.tool_host.execute(
                s.request.tool_source, s.id, call, s.user_call_key(call), self.log.epoch, s.request.task_id, "user"),
                self.clock, self.cfg.coordinator.tool_retry_s)
            return UserToolCall(call, obs.content, obs.error)
        return run

    async def run(self, s: Session, catalog: Catalog) -> bool:
        """Run the session's method to its end and record the ``final`` record; never raises. True once that
        record is stored: only then may the session's tool environments be closed (``end_stored``)."""
        try:
            parts = self.parts(s, catalog)
            if s.request.user == "tau2" and not s.task.instruction:
                with s.outside():
                    opening = await parts.user.user.reply(GREETING)  # type: ignore[attr-defined]
                s.task = Task(s.task.id, opening.content, s.task.context)
                s.record(Opening(text=opening.content))
            await parts.tools.finish_intents()  # type: ignore[attr-defined]
            spec = SpecConfig(k=s.request.k or self.cfg.defaults.k,
                              max_steps=s.request.max_steps or self.cfg.defaults.max_steps,
                              review_messages=s.request.review_messages, parallel_calls=self.parallel_calls(s),
                              chain=self.cfg.chain.rule(), critical=self.cfg.critical.check())
            start = History(s.task, tuple(s.steps)) if s.steps else None
            method = METHODS[s.request.method or self.cfg.defaults.method]
            trajectory = await method(s.task, parts, spec, start)
            s.status, s.termination = "done", trajectory.termination.value
        except IdleTimeout as exc:
            s.status, s.error = "timed_out", str(exc)
        except asyncio.CancelledError:
            if not s.cancelled:  # its coordinator is stopping (shut down, fenced, replaced): the session has
                return False  # not ended, and the next coordinator resumes it where its log ends
            s.status, s.termination = "cancelled", "cancelled"
        except EngineUnavailable as exc:
            s.status, s.error = "failed", f"engine unavailable: {exc}"
        except Unavailable as exc:  # the log or a tool host past its patience: the reason, never an observation
            s.status, s.error = "failed", f"unavailable: {exc}"
        except BackendError as exc:
            s.status, s.error = "failed", f"engine error: {exc}"
        except Exception as exc:
            log.exception("session %s failed", s.id)  # the details stay here: they may name server config
            s.status, s.error = "failed", f"internal error: {type(exc).__name__} (logged on the server)"
        s.record(Final(status=s.status, termination=s.termination, error=s.error))  # type: ignore[arg-type]
        return await self.end_stored()

    async def end_stored(self) -> bool:
        """Whether the session's ``final`` record got stored (``patience.end_stored``), that is whether the
        session ended. One whose end is not in the log (this coordinator was fenced or crashed, or the log did
        not take it in time) is resumed by the next coordinator in the same tool environments: they stay open."""
        try:
            return await end_stored(self.durable, lambda: self.log.lease.lost is not None, self.clock,
                                    self.cfg.coordinator.intent_wait_s)
        except asyncio.CancelledError:  # stopped while waiting: its end may never be stored, so it did not end
            return False  # (and the coordinator still accounts the session's end here: nothing more awaits)
