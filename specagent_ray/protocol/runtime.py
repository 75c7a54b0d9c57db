"""What every method shares: the parts it runs on, one run's mutable state, and the guarded
ways to call models and tools. The speculation loop and the baselines are written on top of this."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .interfaces import (
    BlockSize,
    CallRecord,
    EngineUnavailable,
    Journal,
    Ledger,
    MalformedOutput,
    MessageRules,
    NoJournal,
    NoSpans,
    Policy,
    Purpose,
    SpanHandle,
    Spans,
    TieredTools,
    ToolAdapter,
    User,
    Verifier,
)
from .review import ChainRule, CriticalCheck
from .types import (
    MAX_CALLS,
    Action,
    ActionKind,
    Author,
    Effect,
    Event,
    History,
    Observation,
    Proposal,
    Step,
    Task,
    Termination,
    Tier,
    ToolCall,
    Trajectory,
    Unavailable,
    Usage,
    Verdict,
)


@dataclass(frozen=True)
class SpecConfig:
    """Knobs of the protocol.

    k: the most steps drafted per block (the paper uses 6 for tau2, 8 for long workflows).
    max_steps: committed-step guard; a run that reaches it ends with ``Termination.MAX_STEPS``.
    review_messages: a message to the user always ends the block (the agent needs the reply, and a
        sent message cannot be taken back, so it must never sit in a droppable suffix). When False
        (default, as in the paper, where only state-changing calls are staged) it is sent at once and
        the block commits without review; the verifier sees it in H at the next review. When True it
        is staged like a write, so the user only ever reads reviewed text, at one strong call per
        message. See docs/protocol.md.
    escalate_below: AgentCollab's confidence threshold for handing a step to the strong model.
    parallel_calls: whether an action may hold several tool calls (at most ``max_calls``). Off, such an
        action is invalid: never executed, and the strong policy writes that step.
    critical: the second check a CRITICAL call needs after its verdict (protocol/review.py).
    chain: what a mid verifier, if ``Parts.mid`` is set, may settle without the strong one.
    """

    k: int = 6
    max_steps: int = 100
    review_messages: bool = False
    escalate_below: float = 0.65
    parallel_calls: bool = False
    max_calls: int = MAX_CALLS
    critical: CriticalCheck = CriticalCheck()
    chain: ChainRule = ChainRule()

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")


@dataclass
class Parts:
    """The pieces one run is made of. ``clock`` is injected so tests and benches control time;
    ``spans`` receives the run's structure (no-op unless telemetry is wired in); ``journal`` receives
    every event and commit (no-op unless a served session follows the run); ``block_size`` picks each
    block's K (None: always ``SpecConfig.k``); ``mid`` is the three-tier chain's mid verifier (None: the
    strong verifier reviews every block)."""

    weak: Policy
    strong: Policy
    verifier: Verifier
    tools: ToolAdapter
    user: User
    ledger: Ledger
    clock: Callable[[], float] = time.perf_counter
    spans: Spans = field(default_factory=NoSpans)
    journal: Journal = field(default_factory=NoJournal)
    block_size: BlockSize | None = None
    mid: Verifier | None = None


@dataclass
class Run:
    """One session's state: H, the event log, and how it ended. Methods never bypass ``execute_and_commit``.

    ``start`` resumes a served session from its durable committed history (H; empty by default)."""

    task: Task
    parts: Parts
    config: SpecConfig
    start: History | None = None
    history: History = field(init=False)
    events: list[Event] = field(default_factory=list)
    termination: Termination | None = None
    rounds: int = 0
    last_malformed: str = ""  # why the latest model output could not be used

    def __post_init__(self) -> None:
        self.history = self.start if self.start is not None else History(self.task)
        self._tiered = isinstance(self.parts.tools, TieredTools)
        self._message_rules = isinstance(self.parts.tools, MessageRules)

    # -- the run's life -------------------------------------------------------------------------

    def next_round(self) -> bool:
        """Start a round; False once the agent or user stopped or a guard tripped. The round count
        bounds runs that commit nothing (e.g. a strong policy that keeps emitting malformed output)."""
        if self.termination is not None:
            return False
        self.rounds += 1
        if len(self.history) >= self.config.max_steps or self.rounds > 2 * self.config.max_steps:
            self.termination = Termination.MAX_STEPS
            return False
        return True

    def room(self) -> int:
        return self.config.max_steps - len(self.history)

    def next_k(self) -> int:
        """The next block's draft cap: the controller's choice in 0..k, or k without one."""
        chooser = self.parts.block_size
        return self.config.k if chooser is None else max(0, min(self.config.k, chooser.next_k(self.history)))

    def drafted(self, block: Sequence[Step], staged: bool) -> None:
        """Tell the block-size controller, if any, what a block drafted."""
        if self.parts.block_size is not None:
            self.parts.block_size.drafted(block, staged)

    def reviewed(self, block: Sequence[Step], verdict: Verdict) -> None:
        """Tell the block-size controller, if any, how a reviewed block went: the accepted prefix, and whether
        a rejection needs a separate strong repair (no valid fused one)."""
        if self.parts.block_size is None:
            return
        j, repair = verdict.accepted_prefix, verdict.repair
        if verdict.partial:  # some staged calls were rejected: to the controller, the staged step was
            j -= 1
        separate = j < len(block) and (repair is None or self.invalid_reason(repair) is not None)
        self.parts.block_size.reviewed(block, j, separate)

    def trajectory(self) -> Trajectory:
        return Trajectory(self.history, self.termination or Termination.MAX_STEPS, self.events)

    def note(self, kind: str, detail: str = "", action: Action | None = None, author: Author | None = None) -> None:
        event = Event(kind, detail, action, author)  # type: ignore[arg-type]
        self.events.append(event)
        self.parts.journal.event(event)

    def commit(self, steps: Sequence[Step]) -> None:
        if not steps:
            return
        self.history = self.history.commit(tuple(steps))
        self.parts.journal.committed(steps)
        last = steps[-1]
        if last.action.kind is ActionKind.STOP:
            self.termination = Termination.AGENT_STOP
        elif last.observation is not None and last.observation.user_stop:
            self.termination = Termination.USER_STOP

    # -- guarded calls --------------------------------------------------------------------------

    def classify(self, action: Action) -> Effect:
        """A tool action is a WRITE if any of its calls is one by tier (a parallel action is staged whole)."""
        if action.kind is ActionKind.TOOL:
            return self.tier(action).effect
        if action.kind is ActionKind.MESSAGE and not self.config.review_messages:
            return Effect.READ  # sent without review; it still ends the block (see SpecConfig)
        return Effect.WRITE  # a stop ends the session: staged and reviewed

    def tier(self, action: Action) -> Tier:
        """The highest tier of a tool action's calls; a message or a stop has its effect's tier."""
        if action.kind is ActionKind.TOOL:
            return Tier.highest([self.call_tier(c) for c in action.calls])
        return Tier.of(self.classify(action))

    def call_tier(self, call: ToolCall) -> Tier:
        """The higher of what the adapter's ``classify`` and (if it knows tiers) its ``tier`` say: a tier
        table can raise a call (a side-effecting read is staged), never lower one."""
        base = Tier.of(self.parts.tools.classify(call))
        if not self._tiered:
            return base
        raised = self.parts.tools.tier(call)  # type: ignore[attr-defined]
        if not isinstance(raised, Tier):  # an adapter's answer that is no tier: fail closed
            return Tier.CRITICAL
        return raised if raised.rank > base.rank else base

    def invalid_reason(self, action: object) -> str | None:
        """The paper's ``valid()``, with the reason kept for the trajectory."""
        if not isinstance(action, Action):
            return f"not an action: {type(action).__name__}"
        if action.kind is ActionKind.TOOL:
            if action.call is None:
                return "tool action without a call"
            return self.parallel_reason(action) or next(
                (r for r in map(self.parts.tools.validate, action.calls) if r is not None), None)
        if action.kind is ActionKind.MESSAGE and not action.text.strip():
            return "empty message"
        if action.kind is ActionKind.MESSAGE and self._message_rules:
            return self.parts.tools.validate_message(action.text)  # type: ignore[attr-defined]
        return None

    def parallel_reason(self, action: Action) -> str | None:
        """Why an action's number or repetition of calls is refused, if it is."""
        calls = action.calls
        if len(calls) == 1:
            return None
        if not self.config.parallel_calls:
            return f"{len(calls)} tool calls in one action; this session takes one tool call per action"
        if len(calls) > self.config.max_calls:
            return f"{len(calls)} tool calls in one action; at most {self.config.max_calls}"
        if len({c.key() for c in calls}) < len(calls):
            return "the same tool call twice in one action"
        return None

    async def propose(
        self, role: Author, purpose: Purpose, draft: Sequence[Step] = (), feedback: str | None = None
    ) -> Proposal | None:
        """Ask a policy for the next action and record the call. None if its output was malformed."""
        policy = self.parts.weak if role == "weak" else self.parts.strong
        with self.model_span(role, purpose) as span:
            start = self.parts.clock()
            try:
                proposal = await policy.propose(self.history, draft, feedback)
            except MalformedOutput as exc:
                self.record(role, purpose, exc, start, span)  # a backend's exception may carry the usage spent
                self.last_malformed = f"{role} policy output was malformed: {exc}"
                self.note("malformed_output", self.last_malformed)
                span.set("error.type", "malformed_output")
                return None
            self.record(role, purpose, proposal, start, span)
            return proposal

    async def verify(self, block: Sequence[Step], verifier: Verifier | None = None) -> Verdict:
        """One strong call over H + block (by ``verifier``, default the run's). Malformed output is a full
        rejection, never trusted; an unavailable verifier is one too (no repair), so the strong policy writes
        the step instead."""
        with self.model_span("strong", "verify") as span:
            start = self.parts.clock()
            try:
                review = await (verifier or self.parts.verifier).verify(self.history, block)
            except MalformedOutput as exc:
                self.record("strong", "verify", exc, start, span)
                return Verdict(0, f"malformed verdict: {exc}")
            except EngineUnavailable as exc:
                self.note("verifier_fallback", str(exc))
                span.set("error.type", "engine_unavailable")
                return Verdict(0, f"verifier unavailable: {exc}")
            self.record("strong", "verify", review, start, span)
        verdict = review.verdict
        if not isinstance(verdict, Verdict):
            return Verdict(0, f"malformed verdict: {type(verdict).__name__}")
        staged = block[-1].action.calls if block and block[-1].staged else ()
        return verdict.checked(len(block), max(len(staged), 1))

    async def verify_mid(self, block: Sequence[Step]) -> tuple[Verdict, float] | str:
        """One mid-verifier call over H + block: its checked verdict and confidence, or why it cannot be used
        (malformed, unavailable): the chain escalates then, never accepts."""
        assert self.parts.mid is not None
        with self.model_span("mid", "verify") as span:
            start = self.parts.clock()
            try:
                review = await self.parts.mid.verify(self.history, block)
            except MalformedOutput as exc:
                self.record("mid", "verify", exc, start, span)
                return f"malformed mid verdict: {exc}"
            except EngineUnavailable as exc:
                span.set("error.type", "engine_unavailable")
                return f"mid verifier unavailable: {exc}"
            self.record("mid", "verify", review, start, span)
        verdict, confidence = review.verdict, getattr(review, "confidence", None)
        if not isinstance(verdict, Verdict):
            return f"malformed mid verdict: {type(verdict).__name__}"
        if confidence is None:
            return "the mid verifier reported no confidence"
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 <= confidence <= 1.0:
            return f"malformed mid verdict: confidence {confidence!r} is not in 0..1"
        staged = block[-1].action.calls if block and block[-1].staged else ()
        checked = verdict.checked(len(block), max(len(staged), 1))
        if checked.reason.startswith("malformed verdict"):  # ours, or the model's own words: escalate either way
            return f"mid: {checked.reason}"
        return checked, float(confidence)

    def span(self, name: str, **attributes: object):
        return self.parts.spans.span(name, attributes)

    def model_span(self, role: Author, purpose: Purpose):
        """A model call, named and attributed after the OpenTelemetry GenAI conventions."""
        return self.parts.spans.span(f"chat {purpose}", {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": role, "specagent.purpose": purpose})

    def record(self, role: Author, purpose: Purpose, reply: object, start: float, span: SpanHandle) -> None:
        usage = getattr(reply, "usage", None) or Usage()
        self.parts.ledger.record(CallRecord(role, purpose, usage, self.parts.clock() - start))
        span.set("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set("gen_ai.usage.output_tokens", usage.decode_tokens)
        span.set("specagent.cached_input_tokens", usage.cached_prompt_tokens)

    async def observe(self, action: Action) -> Observation:
        """Execute a valid, non-stop action. A tool that raises becomes an error observation. A parallel
        action's reads run together, then its writes (accepted already) together."""
        if action.more:
            return await self.observe_calls(action)
        if action.kind is ActionKind.TOOL:
            name, attributes = f"execute_tool {action.call.name}", {  # type: ignore[union-attr]
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": action.call.name}  # type: ignore[union-attr]
        else:
            name, attributes = "user_message", {}
        with self.parts.spans.span(name, attributes) as span:
            try:
                if action.kind is ActionKind.TOOL:
                    return await self.parts.tools.execute(action.call)  # type: ignore[arg-type]
                return await self.parts.user.reply(action.text)
            except Unavailable:  # the infrastructure's failure is never the tool's answer
                raise
            except Exception as exc:  # the tool's failure is data for the agent, not a crash of the run
                self.note("tool_error", f"{action.describe()}: {type(exc).__name__}: {exc}", action)
                span.set("error.type", type(exc).__name__)
                return Observation(f"Error: {type(exc).__name__}: {exc}", error=True)

    async def observe_calls(self, action: Action) -> Observation:
        """Each call of a parallel action as an action of its own: its reads together, then its writes together
        (the policy said they are independent; each write is still one keyed call, so a write never runs twice,
        and in a served session each write runs only once its own intent is durable)."""
        singles = [Action(ActionKind.TOOL, c) for c in action.calls]
        writes = [i for i, c in enumerate(action.calls) if self.call_tier(c).effect is Effect.WRITE]
        reads = [i for i in range(len(singles)) if i not in writes]
        parts: dict[int, Observation] = {}
        for group in (reads, writes):
            parts.update(zip(group, await asyncio.gather(*(self.observe(singles[i]) for i in group)), strict=True))
        return Observation.of_calls(action.calls, [parts[i] for i in range(len(singles))])

    async def execute_and_commit(self, action: Action | None, author: Author) -> bool:
        """Validate, execute and commit one step. The single path by which any action has effect.

        Callers guarantee the safety rule: a weak action reaches here as a WRITE only after an
        accepting verdict. Invalid actions are recorded and never executed; returns False for them.
        """
        reason = self.invalid_reason(action) if action is not None else "no action"
        if reason is not None:
            self.note("invalid_action", f"{author}: {reason}", action if isinstance(action, Action) else None)
            return False
        assert action is not None
        effect = self.classify(action)
        observation = None if action.kind is ActionKind.STOP else await self.observe(action)
        self.commit([Step(action, observation, author, effect)])
        return True
