"""How the coordinator reaches the engines, and where verify requests are batched.

Both engine kinds give each session a weak policy, a strong policy and a verifier that are the
protocol's own interfaces, and, where the profile has a mid engine, the three-tier chain's mid verifier
(``mid``; ``protocol/review.py``):
- ``SimEngineClient``: simulated engine replicas (Serve deployments) answer whole batches per call;
  drafts, strong steps and verifies are each batched, per lane (mid verifies on the mid replicas' lanes).
- ``OpenAIEngineClient``: Ray Serve LLM (or any OpenAI-compatible endpoint). Verify requests gathered
  in one window are sent together, so vLLM schedules their prefills in the same engine steps.

A session keeps its lane (hash of its id) for life, and every call carries ``x-session-id`` (HTTP) or
``session_id`` (Serve handle), which a session-aware router would use to keep it on one replica, where
its prefix stays cached. The profiles do not turn such a router on yet (docs/serving.md says why); for
model engines, Ray Serve LLM's prefix-aware router plays that part.

Every call gets a priority from ``ProgramPriority`` (``serve/engines/priority.py``): a session waiting on a staged
write first, drafts later, least attained strong service first, with a bounded wait for all. The
batchers order by it; with ``send_priority`` the engines (vLLM's priority scheduler) do too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from ...models.backend import BackendError, ChatBackend
from ...models.llm import LLMPolicy, LLMVerifier, PromptTrail
from ...models.prompts import DEFAULT_ROLE, PromptConfig
from ...models.structured import MessageFormat
from ...protocol.interfaces import EngineUnavailable, MalformedOutput, Policy, Verifier
from ...protocol.types import History, Proposal, Review, Step
from ...telemetry.tracing import traceparent_headers
from ..core.api import CreateSession
from ..core.batcher import Batcher
from ..core.catalog import Catalog
from ..core.config import CoordinatorConfig, OpenAIEngines, SimEngines
from ..core.handles import lane_of
from ..core.views import SessionView
from .prefill_ahead import PrefillAhead
from .priority import ProgramPriority
from .batch_wire import SimRequest, packed, unpacked


async def attempts(what: str, n: int, timeout_s: float, call: Callable[[], Awaitable[Any]]) -> Any:
    """``call`` up to n times; malformed output is an answer and is not retried here. What still fails
    becomes ``EngineUnavailable`` naming the engine and the last error."""
    last: BaseException | None = None
    for _ in range(n):
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: it can swallow a cancel (3.11)
                return await call()
        except (MalformedOutput, BackendError) as exc:
            if isinstance(exc, EngineUnavailable):
                last = exc  # an endpoint that may come back: try again
                continue
            raise  # an answer (malformed) or a refusal that asking again cannot fix
        except TimeoutError:
            last = TimeoutError(f"no answer in {timeout_s:g}s")
        except Exception as exc:  # noqa: BLE001 - replica death, HTTP errors: infrastructure
            last = exc
    raise EngineUnavailable(f"{what} failed {n}x: {type(last).__name__}: {str(last).splitlines()[0][:300] if str(last) else ''}")


class EngineClient(Protocol):
    """What the coordinator needs of its engines: each session's models, and the batchers' queues. A client
    may also offer ``mid(session, catalog, parallel) -> Verifier | None``, the session's mid verifier (the
    three-tier chain; None where its engines have no mid); one without it (``models/scripted_plan.py``'s) has none."""

    def models(self, session: SessionView, catalog: Catalog, parallel: bool = False
               ) -> tuple[Policy, Policy, Verifier]:
        """The session's weak policy, strong policy and verifier; ``parallel``: the session runs with
        parallel calls (``SpecConfig.parallel_calls``), so its models may propose several per action."""
        ...

    def queued(self) -> int: ...

    def batchers(self) -> dict[str, list[Batcher]]: ...

    @property
    def priority(self) -> ProgramPriority: ...


class _Remote:
    """Calls of one session's model that go through ``attempts`` and count as time outside the coordinator."""

    def __init__(self, session: SessionView, what: str, tries: int, timeout_s: float):
        self.session, self.what, self.tries, self.timeout_s = session, what, tries, timeout_s

    async def _call(self, call: Callable[[], Awaitable[Any]]) -> Any:
        with self.session.outside():
            return await attempts(self.what, self.tries, self.timeout_s, call)


class RemotePolicy(_Remote):
    """The protocol's ``Policy`` on an engine: ``propose(history, draft, feedback)``."""

    def __init__(self, session: SessionView, what: str, tries: int, timeout_s: float,
                 propose: Callable[[History, Sequence[Step], str | None], Awaitable[Proposal]]):
        super().__init__(session, what, tries, timeout_s)
        self._propose = propose

    async def propose(self, history: History, draft: Sequence[Step] = (), feedback: str | None = None) -> Proposal:
        return await self._call(lambda: self._propose(history, draft, feedback))


class RemoteVerifier(_Remote):
    """The protocol's ``Verifier`` on an engine: ``verify(history, block)``, judged by ``criterion``.
    It is a ``JudgeWithCriteria``: ``by_exact_match()`` is the same engine asked to accept only its own
    exact steps, so a served exact-match ablation changes the criterion only, as the bench's does."""

    def __init__(self, session: SessionView, what: str, tries: int, timeout_s: float,
                 judge: Callable[[History, Sequence[Step], str], Awaitable[Review]], criterion: str = "semantic"):
        super().__init__(session, what, tries, timeout_s)
        self._judge, self.criterion = judge, criterion

    async def verify(self, history: History, block: Sequence[Step]) -> Review:
        return await self._call(lambda: self._judge(history, block, self.criterion))

    def by_exact_match(self) -> RemoteVerifier:
        return RemoteVerifier(self.session, self.what, self.tries, self.timeout_s, self._judge, "exact")

    def for_critical(self) -> RemoteVerifier:
        """The engine's critical second look (``CriticalJudge``): criterion ``critical``."""
        return RemoteVerifier(self.session, self.what, self.tries, self.timeout_s, self._judge, "critical")


class SimEngineClient:
    """Simulated drafter, verifier and (with ``mid_replicas``) mid replicas (Serve deployments or
    ``handles.Local``). Each lane has its own batchers: drafts on the drafter lanes; strong steps and verifies
    on the verifier lanes; mid verifies on the mid lanes."""

    def __init__(self, drafter: Any, verifier: Any, engines: SimEngines, coord: CoordinatorConfig,
                 mid: Any = None):
        self.coord = coord
        self.priority = ProgramPriority(coord.priority)
        window_s, most = coord.batch_window_ms / 1000, coord.max_batch
        self.lanes = engines.verifier_replicas
        self.draft_lanes = engines.drafter_replicas

        def lanes(handle: Any, method: str, n: int) -> list[Batcher]:
            return [Batcher(self._submit(handle, method, i), window_s, most) for i in range(n)]

        self.drafts = lanes(drafter, "propose_batch", self.draft_lanes)
        self.strong_steps = lanes(verifier, "propose_batch", self.lanes)
        self.verifies = lanes(verifier, "verify_batch", self.lanes)
        if (mid is None) != (engines.mid_replicas == 0):
            raise ValueError(f"a mid engine handle needs mid_replicas > 0 and back (mid_replicas is "
                             f"{engines.mid_replicas}, handle {'given' if mid is not None else 'missing'})")
        self.mid_lanes = engines.mid_replicas
        self.mids = lanes(mid, "verify_batch", self.mid_lanes) if mid is not None else []

    @staticmethod
    def _submit(handle: Any, method: str, lane: int) -> Callable[[Sequence[SimRequest]], Awaitable[list]]:
        call = getattr(handle.routed(f"lane-{lane}"), method)

        async def submit(requests: Sequence[SimRequest]) -> list:
            return unpacked(await call(packed(requests)))  # bytes both ways across Ray (batch_wire.packed)
        return submit

    def queued(self) -> int:
        return sum(len(b) for b in (*self.drafts, *self.strong_steps, *self.verifies, *self.mids))

    def batchers(self) -> dict[str, list[Batcher]]:
        return {"draft": self.drafts, "strong": self.strong_steps, "verify": self.verifies,
                **({"mid": self.mids} if self.mids else {})}

    @staticmethod
    def _request(session: SessionView, parallel: bool) -> Callable[..., SimRequest]:
        def req(history: History, draft: Sequence[Step] = (), feedback: str | None = None,
                criterion: str = "semantic") -> SimRequest:
            return SimRequest(session.id, session.domain, session.task.id, session.request.trial, history.steps,
                              tuple(draft), feedback, criterion, parallel)
        return req

    def mid(self, session: SessionView, catalog: Catalog, parallel: bool = False) -> Verifier | None:
        """A mid verifier on the session's mid lane, tried and prioritized as the strong verifier is."""
        if not self.mids:
            return None
        c, p, sid, req = self.coord, self.priority, session.id, self._request(session, parallel)
        lane = self.mids[lane_of(sid, self.mid_lanes)]
        return RemoteVerifier(session, "mid verifier", c.verify_attempts, c.verify_timeout_s, lambda h, b, crit: p.run(
            sid, p.verify_kind(sid, b), lambda n: lane(req(h, b, criterion=crit), n()), "mid"))

    def models(self, session: SessionView, catalog: Catalog, parallel: bool = False
               ) -> tuple[Policy, Policy, Verifier]:
        """The session's simulated models. Sampling is not theirs to honour (they replay gold actions through
        an error model); an output format they cannot write: such a session fails at once, saying so."""
        if getattr(session.request, "output_format", None) is not None:
            raise BackendError("output_format needs model or scripted engines: simulated engines replay "
                               "benchmark messages, which no client schema describes")
        draft_lane, verifier_lane = lane_of(session.id, self.draft_lanes), lane_of(session.id, self.lanes)
        req = self._request(session, parallel)
        c, p, sid = self.coord, self.priority, session.id
        weak = RemotePolicy(session, "drafter", 1, c.verify_timeout_s, lambda h, d, f: p.run(
            sid, p.draft_kind(sid), lambda n: self.drafts[draft_lane](req(h, d, f), n())))
        strong = RemotePolicy(session, "strong engine", c.verify_attempts, c.verify_timeout_s, lambda h, d, f: p.run(
            sid, p.strong_kind(sid), lambda n: self.strong_steps[verifier_lane](req(h, d, f), n())))
        verifier = RemoteVerifier(session, "verifier", c.verify_attempts, c.verify_timeout_s, lambda h, b, crit: p.run(
            sid, p.verify_kind(sid, b),
            lambda n: self.verifies[verifier_lane](req(h, b, criterion=crit), n())))
        return weak, strong, verifier


class OpenAIEngineClient:
    """Engines behind OpenAI-compatible endpoints; verify requests of one window go out together."""

    def __init__(self, engines: OpenAIEngines, coord: CoordinatorConfig, env: dict[str, str], shards: int = 1):
        self.cfg, self.coord = engines, coord

        def backend(e) -> ChatBackend:
            key = env.get(e.api_key_env, "") if e.api_key_env else "EMPTY"
            return ChatBackend(e.url, key or "EMPTY", model=e.model, timeout_s=engines.timeout_s,
                               max_retries=engines.max_retries, strict=engines.strict_schema)

        self.drafter, self.verifier = backend(engines.drafter), backend(engines.verifier)
        self.verify_batch = Batcher(self._together, coord.batch_window_ms / 1000, coord.max_batch)
        # the chain's mid verifier: its own endpoint and its own batches (``mid``)
        self.mid_backend = backend(engines.mid) if engines.mid is not None else None
        self.mid_batch = Batcher(self._together, coord.batch_window_ms / 1000, coord.max_batch) \
            if engines.mid is not None else None
        self.priority = ProgramPriority(coord.priority)
        # each coordinator shard sees its share of the verifier's traffic, so it may count on that share of its KV
        kv = engines.verifier_kv_tokens // shards if engines.verifier_kv_tokens else None
        self.ahead = PrefillAhead(self.verifier, self.priority, engines.verifier.send_priority, time.perf_counter,
                                  engines.prefill_trust_s, kv_tokens=kv) if engines.prefill_ahead else None

    @staticmethod
    async def _together(items: Sequence[tuple[LLMVerifier, History, Sequence[Step], Any]]) -> list:
        return await asyncio.gather(*(v.verify(h, b, n) for v, h, b, n in items), return_exceptions=True)

    def queued(self) -> int:
        return len(self.verify_batch) + (len(self.mid_batch) if self.mid_batch is not None else 0)

    def batchers(self) -> dict[str, list[Batcher]]:
        return {"verify": [self.verify_batch], **({"mid": [self.mid_batch]} if self.mid_batch is not None else {})}

    def _prompt(self, session: SessionView, catalog: Catalog, parallel: bool) -> tuple[PromptConfig, Any, dict]:
        """The session's prompt config (its output format's schema included), its request headers and the
        verdicts' keyword arguments (greedy, the profile's max_tokens; ``agent_sampling`` for the agent's own text)."""
        policy = catalog.policy[: self.cfg.policy_chars] if self.cfg.policy_chars else catalog.policy
        request = session.request
        role = {"agent_role": agent_role(request)} if request.instructions or request.context else {}
        form = MessageFormat.of(getattr(request, "output_format", None))
        prompt = PromptConfig(policy=policy, observation_chars=self.cfg.observation_chars, parallel_calls=parallel,
                              message_schema=dict(form.schema) if form else None, **role)
        headers = lambda: {**traceparent_headers(), "x-session-id": session.id}
        return prompt, headers, {"max_tokens": self.cfg.max_tokens, "temperature": 0.0, "headers": headers}

    def mid(self, session: SessionView, catalog: Catalog, parallel: bool = False) -> Verifier | None:
        """The mid verifier on the ``mid`` endpoint (None without one), batched in its own window. Its verdicts
        carry the model's own confidence (``PromptConfig.confidence``); one it does not give in 0..1 escalates."""
        if self.mid_backend is None or self.mid_batch is None or self.cfg.mid is None:
            return None
        prompt, _, kw = self._prompt(session, catalog, parallel)
        prompt = prompt.model_copy(update={"confidence": True})
        judge = LLMVerifier(self.mid_backend, prompt, catalog.schemas, trail=PromptTrail(), **kw)
        judges = {"semantic": judge, "exact": judge.by_exact_match(), "critical": judge.for_critical()}
        c, p, sid, batch = self.coord, self.priority, session.id, self.mid_batch
        send = (lambda n: n) if self.cfg.mid.send_priority else (lambda n: None)
        return RemoteVerifier(session, "mid verifier", c.verify_attempts, c.verify_timeout_s, lambda h, b, crit: p.run(
            sid, p.verify_kind(sid, b), lambda n: batch((judges[crit], h, b, send(n)), n()), "mid"))

    def models(self, session: SessionView, catalog: Catalog, parallel: bool = False
               ) -> tuple[Policy, Policy, Verifier]:
        prompt, headers, kw = self._prompt(session, catalog, parallel)
        on_verifier = PromptTrail()  # the strong steps, verifies and prefills of this session share an engine
        own = agent_sampling(kw, getattr(session.request, "sampling", None))  # drafts, strong steps, repairs
        weak_llm = LLMPolicy(self.drafter, prompt, catalog.schemas, trail=PromptTrail(), **own)
        strong_llm = LLMPolicy(self.verifier, prompt, catalog.schemas, trail=on_verifier, **own)
        verifier_llm = LLMVerifier(self.verifier, prompt, catalog.schemas, trail=on_verifier, **kw)
        c, p, sid = self.coord, self.priority, session.id
        # the verify batcher orders by n() either way; an engine only where it runs vLLM's priority scheduler
        weak_n = (lambda n: n) if self.cfg.drafter.send_priority else (lambda n: None)
        send = (lambda n: n) if self.cfg.verifier.send_priority else (lambda n: None)
        sent = self.ahead.sent if self.ahead else (lambda sid, steps: None)
        judges = {"semantic": verifier_llm, "exact": verifier_llm.by_exact_match(),
                  "critical": verifier_llm.for_critical()}

        def draft(h: History, d: Sequence[Step], f: str | None) -> Awaitable[Proposal]:
            if self.ahead and not d and f is None:  # a block starts: the verifier computes H meanwhile
                self.ahead.start(session, verifier_llm.prompts, h, headers, on_verifier)
            return p.run(sid, p.draft_kind(sid), lambda n: weak_llm.propose(h, d, f, weak_n(n)))

        def strong_step(h: History, d: Sequence[Step], f: str | None) -> Awaitable[Proposal]:
            sent(sid, h.steps + tuple(d))
            return p.run(sid, p.strong_kind(sid), lambda n: strong_llm.propose(h, d, f, send(n)))

        async def verify(h: History, b: Sequence[Step], crit: str) -> Review:
            if self.ahead:
                await self.ahead.settled(sid)  # H is being computed: sent alongside, the verify would redo it
            sent(sid, h.steps + tuple(b))
            return await p.run(sid, p.verify_kind(sid, b),
                               lambda n: self.verify_batch((judges[crit], h, b, send(n)), n()))

        weak = RemotePolicy(session, "drafter", 1, c.verify_timeout_s, draft)
        strong = RemotePolicy(session, "strong engine", c.verify_attempts, c.verify_timeout_s, strong_step)
        verifier = RemoteVerifier(session, "verifier", c.verify_attempts, c.verify_timeout_s, verify)
        return weak, strong, verifier


def agent_sampling(greedy: dict[str, Any], sampling: Any) -> dict[str, Any]:
    """The keyword arguments of the models that write the agent's own text (drafts, strong steps, repairs,
    the final message): the client's temperature and top_p where it set them, and its max_output_tokens
    where that is below the profile's max_tokens. Verdicts keep ``greedy``: a verdict is a judgement, not
    the agent's text, and sampling it would make acceptance a coin toss."""
    if sampling is None:
        return greedy
    out = dict(greedy)
    if sampling.temperature is not None:
        out["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        out["top_p"] = sampling.top_p
    if sampling.max_output_tokens is not None:
        out["max_tokens"] = min(greedy["max_tokens"], sampling.max_output_tokens)
    return out


def agent_role(request: CreateSession) -> str:
    """The system prompt's first paragraph: the instructions (the profile's default role if none), then
    the conversation replayed before the session, if any."""
    role = request.instructions or DEFAULT_ROLE
    return f"{role}\n\n{request.context}" if request.context else role
