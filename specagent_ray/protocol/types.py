"""The vocabulary of the protocol, defined once.

- **action**: what a policy proposes next: a tool call, a message to the user, or a stop.
- **step**: an action with its observation. A tool call's observation is the tool's output; a message's
  observation is the user's reply; a stop has none.
- **drafted**: a step the weak policy proposed inside the current block. Drafted reads have already
  been executed (reads are reversible: dropping them from the history undoes them).
- **staged**: the first drafted action that has an effect, ``(a, ⊥)``. It ends the draft and is *not*
  executed until the verifier accepts it.
- **block**: the steps drafted since the last commit, staged action included; n is its length.
- **verdict** ``(j, r, ã)``: the verifier's answer. ``j`` is the accepted prefix (0..n), ``r`` the reason
  step j+1 was rejected, ``ã`` an optional *fused repair* action that replaces step j+1.
- **accepted** / **rejected**: steps inside / after the accepted prefix. Rejected steps are dropped.
- **fused repair**: ``ã`` taken from the verdict, used only when the tool adapter's ``valid`` accepts it.
- **strong repair**: one step the strong policy writes from (H, r) when ``ã`` is missing or invalid.
  Repairs are the strong model's own steps and are not verified again.
- **committed**: a step in the history H. Only committed steps are ever graded or shown to the user.
- **parallel action**: an action of several tool calls the policy says are independent. Its reads run
  together; if any call is a write, the whole action is staged, and a *per-call verdict* (``calls``)
  accepts or rejects each staged call: the accepted calls run, the rejected ones never do, and ``ã``
  (or a strong repair) replaces them as a step of its own.
- **tier**: how much a tool call may cost if wrong: ``read`` (runs at once), ``write`` (staged, one
  verdict) or ``critical`` (staged; a verdict plus an independent *second check* before it runs). A call's
  tier is the highest its tool adapter and its effect give it; an adapter can raise a tier, never lower it.
- **mid verifier**: an optional smaller verifier that reviews each block first (the three-tier chain). It
  settles a block alone only for the tiers the operator allows; otherwise it *escalates* the block to the
  strong verifier, whose verdict is final.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Author = Literal["weak", "mid", "strong"]
MAX_CALLS = 8  # the most tool calls one parallel action may hold (SpecConfig.max_calls' default, the schemas)


class Effect(str, enum.Enum):
    """Side-effect class of an action. READs may run before review; everything else is staged."""

    READ = "read"
    WRITE = "write"


class Tier(str, enum.Enum):
    """Risk tier of a tool call, ordered READ < WRITE < CRITICAL. READ runs at once; WRITE and CRITICAL are
    staged (``effect`` WRITE); CRITICAL also needs a second check (protocol/review.py)."""

    READ = "read"
    WRITE = "write"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _TIER_RANK[self]

    @property
    def effect(self) -> Effect:
        return Effect.READ if self is Tier.READ else Effect.WRITE

    @staticmethod
    def of(effect: Effect) -> Tier:
        return Tier.READ if effect is Effect.READ else Tier.WRITE

    @staticmethod
    def highest(tiers: Sequence[Tier]) -> Tier:
        return max(tiers, key=lambda t: t.rank, default=Tier.READ)


_TIER_RANK = {Tier.READ: 0, Tier.WRITE: 1, Tier.CRITICAL: 2}


class ActionKind(str, enum.Enum):
    TOOL = "tool"
    MESSAGE = "message"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def key(self) -> str:
        """Canonical form: two calls are the same call iff their keys are equal."""
        return self.name + json.dumps(self.arguments, sort_keys=True, default=str)

    def action_key(self) -> str:
        """The key of this call as a one-call action (``Action.key``)."""
        return "tool:" + self.key()


@dataclass(frozen=True, slots=True)
class Action:
    """One proposed agent action. Exactly one of ``call``/``text`` is set for TOOL/MESSAGE. A *parallel*
    action holds several tool calls: ``call`` is the first and ``more`` the rest (``calls`` gives them all);
    a one-call action has ``more == ()``, the same key and the same form as before parallel calls."""

    kind: ActionKind
    call: ToolCall | None = None
    text: str = ""
    more: tuple[ToolCall, ...] = ()

    @staticmethod
    def tool(tool_name: str, /, **arguments: Any) -> Action:
        return Action(ActionKind.TOOL, ToolCall(tool_name, dict(arguments)))

    @staticmethod
    def parallel(calls: Sequence[ToolCall]) -> Action:
        """One action of ``calls``, in order; a single call gives the plain one-call action."""
        if not calls:
            raise ValueError("a tool action needs at least one call")
        return Action(ActionKind.TOOL, calls[0], more=tuple(calls[1:]))

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return () if self.call is None else (self.call, *self.more)

    @staticmethod
    def message(text: str) -> Action:
        return Action(ActionKind.MESSAGE, text=text)

    @staticmethod
    def stop() -> Action:
        return Action(ActionKind.STOP)

    def key(self) -> str:
        if self.kind is ActionKind.TOOL:
            assert self.call is not None
            if self.more:  # "tools:" can never begin a one-call key ("tool:" and then a name)
                return "tools:" + json.dumps([c.key() for c in self.calls])
            return self.call.action_key()
        return f"{self.kind.value}:{self.text}"

    def same_as(self, other: Action | None) -> bool:
        """Exact match, the acceptance test of Speculative Actions and of the exact-match ablation."""
        return other is not None and self.key() == other.key()

    def describe(self) -> str:
        if self.kind is ActionKind.TOOL:
            assert self.call is not None
            return "; ".join(f"{c.name}({json.dumps(c.arguments, sort_keys=True, default=str)})" for c in self.calls)
        if self.kind is ActionKind.MESSAGE:
            return f"say({self.text!r})"
        return "stop()"


@dataclass(frozen=True, slots=True)
class UserToolCall:
    """A tool the user ran on their own side before replying (dual-control domains: the user toggles
    airplane mode, the agent cannot). The agent never runs these; it only reads the user's reply."""

    call: ToolCall
    content: str
    error: bool = False


@dataclass(frozen=True, slots=True)
class Observation:
    """What executing an action returned. ``error`` marks tool failures and refused actions. A user's
    reply to a message carries the tools the user ran on their side in ``user_calls``, in order. A parallel
    action's observation has one of ``parts`` per call, in call order; its ``content`` lists them, and its
    ``error`` is set only when every call failed."""

    content: str
    error: bool = False
    user_stop: bool = False
    user_calls: tuple[UserToolCall, ...] = ()
    parts: tuple[Observation, ...] = ()

    @staticmethod
    def of_calls(calls: Sequence[ToolCall], parts: Sequence[Observation]) -> Observation:
        """A parallel action's observation: one line per call, ``[i] name: result`` (``name (error)`` for a
        call that failed), and the parts themselves."""
        content = "\n".join(f"[{i}] {c.name}{' (error)' if p.error else ''}: {p.content}"
                            for i, (c, p) in enumerate(zip(calls, parts, strict=True)))
        return Observation(content, error=all(p.error for p in parts), parts=tuple(parts))


class Unavailable(Exception):
    """A step could not be carried out now for a reason outside the tool: the write's intent could not be
    stored (the session log paused past its patience, or this host was fenced), or the tool's host is not
    there. Never an observation: the run stops with it, the step's write has not run (or runs once, under
    its key, when a successor resumes the session), and the host ends the session with the reason."""


@dataclass(frozen=True, slots=True)
class Step:
    """A (possibly staged) step. ``observation is None`` means staged, ``(a, ⊥)`` in the paper."""

    action: Action
    observation: Observation | None
    author: Author
    effect: Effect

    @property
    def staged(self) -> bool:
        return self.observation is None


@dataclass(frozen=True, slots=True)
class Verdict:
    """``(j, r, ã)``. Built only through :meth:`checked`, so ``0 <= j <= n`` always holds in the loop.

    ``calls`` answers call by call for a staged parallel action when the whole block is accepted (j = n):
    True accepts that call, False rejects it, and ``r``/``ã`` then speak of the rejected calls. None accepts
    every call of an accepted block."""

    accepted_prefix: int
    reason: str = ""
    repair: Action | None = None
    calls: tuple[bool, ...] | None = None

    def checked(self, n: int, staged_calls: int = 1) -> Verdict:
        """Return the verdict in its normal form for a block of ``n`` steps whose staged step holds
        ``staged_calls`` calls, or a full rejection saying why it is malformed.

        A malformed verdict is never trusted: j outside 0..n, or ``calls`` that are not one bool per staged
        call, become j = 0 with no repair. ``calls`` is dropped when j < n (the staged step is rejected
        anyway); all True is None; all False rejects the staged step (j = n - 1)."""
        j = self.accepted_prefix
        if not isinstance(j, int) or isinstance(j, bool) or not 0 <= j <= n:
            return Verdict(0, f"malformed verdict: accepted_prefix={j!r} outside 0..{n}", None)
        if self.calls is None:
            return self
        calls = self.calls
        if not isinstance(calls, tuple) or len(calls) != staged_calls or not all(isinstance(c, bool) for c in calls):
            return Verdict(0, f"malformed verdict: calls={calls!r} is not one true/false per staged call "
                              f"({staged_calls})", None)
        if j < n or all(calls):
            return Verdict(j, self.reason, self.repair)
        if not any(calls):
            return Verdict(n - 1, self.reason, self.repair)
        return self

    @property
    def partial(self) -> bool:
        """Some calls of the staged action are accepted and some rejected (a checked verdict)."""
        return self.calls is not None and not all(self.calls)

    def split(self, action: Action) -> tuple[Action, Action | None]:
        """A checked verdict's accepted calls of the staged ``action``, and its rejected ones (None if none)."""
        if not self.partial:
            return action, None
        assert self.calls is not None
        kept = [c for c, ok in zip(action.calls, self.calls, strict=True) if ok]
        dropped = [c for c, ok in zip(action.calls, self.calls, strict=True) if not ok]
        return Action.parallel(kept), Action.parallel(dropped)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one model call. ``cached_prompt_tokens`` is the part of the prompt served from cache
    (delivered); ``predicted_cached_tokens`` the part the prompt layout predicts would be: what it shares
    with the session's previous prompt to the same engine (0 where nothing predicts it)."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    decode_tokens: int = 0
    predicted_cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Proposal:
    """A policy's answer: the action, what it cost, and the model's self-reported confidence (0..1)."""

    action: Action
    usage: Usage = Usage()
    confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class Review:
    """A verifier's answer: the (unchecked) verdict, what it cost, and its self-reported confidence in 0..1
    (the chain's mid verifier escalates under ``ChainRule.escalate_below``, and when it reports none or one
    outside 0..1; the strong one's is not read)."""

    verdict: Verdict
    usage: Usage = Usage()
    confidence: float | None = None  # None: not reported (a mid verifier without one always escalates)


@dataclass(frozen=True, slots=True)
class Task:
    """What the agent is asked to do. ``context`` carries adapter-specific data (e.g. the tau2 task)."""

    id: str
    instruction: str
    context: Any = None


@dataclass(frozen=True, slots=True)
class History:
    """The committed history H = (u, (a1, o1), ..., (at, ot)). Immutable: commits return a new H."""

    task: Task
    steps: tuple[Step, ...] = ()

    def commit(self, steps: tuple[Step, ...] | list[Step]) -> History:
        return History(self.task, self.steps + tuple(steps))

    def __len__(self) -> int:
        return len(self.steps)


class Termination(str, enum.Enum):
    AGENT_STOP = "agent_stop"
    USER_STOP = "user_stop"
    MAX_STEPS = "max_steps"


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the trajectory's event log: what happened, to which action, and why."""

    kind: Literal[
        "drafted", "staged", "accepted", "rejected", "fused_repair", "strong_repair", "escalated",
        "speculation_hit", "speculation_miss", "invalid_action", "malformed_output", "tool_error",
        "redraft", "verifier_fallback", "strong_step", "calls_accepted", "second_check", "settled_by_mid",
    ]
    detail: str = ""
    action: Action | None = None
    author: Author | None = None  # whose step a ``fused_repair`` is (its judge's); None elsewhere


@dataclass
class Trajectory:
    """The result of one run: the committed history, why it ended, and the event log."""

    history: History
    termination: Termination
    events: list[Event] = field(default_factory=list)

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.history.steps

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind)
