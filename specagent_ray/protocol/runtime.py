"""One run: the parts it runs on, its mutable state (H, the event log, how it ended), and the one guarded
path by which an action has effect. What an action is (tiers.py, validity.py), where it runs
(execution.py), how models are asked (model_calls.py) and what is reported (recorder.py) are pieces the run
holds; the speculation loop and the baselines are written on top of it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .config import ChainRule, CriticalCheck, SpecConfig
from .execution import Executor
from .interfaces import (
    BlockSize,
    Journal,
    Ledger,
    NoJournal,
    NoSpans,
    Policy,
    Spans,
    ToolAdapter,
    User,
    Verifier,
)
from .recorder import Recorder
from .tiers import Tiers
from .types import (
    Action,
    ActionKind,
    Author,
    Event,
    History,
    Step,
    Task,
    Termination,
    Trajectory,
)
from .validity import Validity

__all__ = ["ChainRule", "CriticalCheck", "Parts", "Run", "SpecConfig"]  # the config's names, as before


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
    """One session's state: H, the event log, and how it ended. Nothing has effect but through
    ``execute_and_commit`` (and the drafter's reads, which the executor runs and a drop undoes).

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
    tiers: Tiers = field(init=False, repr=False)
    validity: Validity = field(init=False, repr=False)
    recorder: Recorder = field(init=False, repr=False)
    executor: Executor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.history = self.start if self.start is not None else History(self.task)
        tools = self.parts.tools
        self.tiers = Tiers(tools, self.config.review_messages)
        self.validity = Validity(tools, self.config)
        self.recorder = Recorder(self.parts.ledger, self.parts.spans, self.parts.clock)
        self.executor = Executor(tools, self.parts.user, self.parts.spans, self.tiers, self.note)

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

    async def execute_and_commit(self, action: Action | None, author: Author) -> bool:
        """Validate, execute and commit one step. The single path by which any action has effect.

        Callers guarantee the safety rule: a weak action reaches here as a WRITE only after an
        accepting verdict. Invalid actions are recorded and never executed; returns False for them.
        """
        reason = self.validity.invalid_reason(action) if action is not None else "no action"
        if reason is not None:
            self.note("invalid_action", f"{author}: {reason}", action if isinstance(action, Action) else None)
            return False
        assert action is not None
        effect = self.tiers.classify(action)
        observation = None if action.kind is ActionKind.STOP else await self.executor.observe(action)
        self.commit([Step(action, observation, author, effect)])
        return True
