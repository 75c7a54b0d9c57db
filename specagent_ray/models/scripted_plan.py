"""Engines that follow a plan written in the user's message (SCRIPTED: no model runs).

They let a client, a test or a demo decide exactly what the agent does, through any front door, on
any tool source: the weak policy drafts the plan's steps, the verifier accepts a block up to the first
step that differs from the plan, and the strong policy writes the plan's step. A plan is the latest
user message (the opening, or the reply to the agent's last message), one step per line or ``;``:

    call NAME {"arg": 1}                   a tool call (JSON arguments; {} if omitted)
    call NAME {"arg": 1} weak {"arg": 2}   the weak model drafts the second arguments instead: the
                                           verifier rejects that step and repairs it with the first
    say TEXT                               a message to the user (it ends the agent's turn)
    stop                                   the agent ends the session

A message that holds no plan gets the default plan: where the session has function tools, call the
first one once with arguments that its schema accepts (``example_arguments``), then ``say ok``;
without function tools, ``say ok``. After the plan's last step the agent says "Done." Every call's usage
is a fixed, labelled figure (``SCRIPTED_USAGE``), never a measurement.

A session with an output format (structured outputs, ``MessageFormat``) says JSON that its schema accepts:
"ok" and "Done." become an instance built from the schema (``structured.instance``), drafted and written
alike; a ``say TEXT`` whose TEXT the schema accepts is said as is; one it refuses is what the weak model
drafts, and what the strong model writes (and the verifier's repair) is the instance. Under SpecAgent the
drafted words are then an invalid action (the session's tools check the format), never sent, and the
strong model repairs the step. Sampling is accepted and has no effect: a plan decides every word.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol.types import Action, ActionKind, History, Proposal, Review, Step, Usage, Verdict
from .structured import MessageFormat, instance

SCRIPTED_USAGE = {"weak": Usage(100, 0, 20), "strong": Usage(120, 0, 20), "verify": Usage(200, 0, 10)}
VERBS = ("call", "say", "stop")


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan: what the strong model does, and what the weak one drafts (often the same)."""

    intended: Action
    drafted: Action


OK = PlanStep(Action.message("ok"), Action.message("ok"))


def say(text: str, fmt: MessageFormat | None = None) -> PlanStep:
    """A message step: ``text``, where the session's format (if any) accepts it; else the weak model drafts
    ``text`` and the strong one writes an instance of the format."""
    if fmt is None or fmt.check(text) is None:
        return PlanStep(Action.message(text), Action.message(text))
    return PlanStep(Action.message(fmt.example()), Action.message(text))


def reply(text: str, fmt: MessageFormat | None = None) -> PlanStep:
    """The agent's own words where no plan says any ("ok", "Done."): in the session's format, an instance of
    it, drafted and written alike."""
    said = Action.message(text if fmt is None else fmt.example())
    return PlanStep(said, said)


def parse_plan(text: str, default: Sequence[PlanStep] | None = None,
               fmt: MessageFormat | None = None) -> list[PlanStep]:
    """The plan a user message holds; ``default`` if it holds none (None: say ok, in ``fmt`` if given).
    Raises nothing: a line that is not a step makes the whole message no plan."""
    lines = [part.strip() for line in text.splitlines() for part in line.split(";") if part.strip()]
    try:
        steps = [_step(line, fmt) for line in lines]
    except ValueError:
        steps = []
    return steps or list(default if default is not None else (reply("ok", fmt),))


def default_plan(name: str | None, schema: dict[str, Any] | None,
                 fmt: MessageFormat | None = None) -> tuple[PlanStep, ...]:
    """The plan of a message without one: call function tool ``name`` (if any) once, then say ok (in the
    session's format, if it has one)."""
    if name is None:
        return (reply("ok", fmt),)
    call = Action.tool(name, **example_arguments(schema or {}))
    return PlanStep(call, call), reply("ok", fmt)


def example_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments an object schema accepts (``structured.instance``): each required property at its const,
    its first enum value, or a plain value of its type."""
    value = instance({**schema, "type": "object"})
    return value if isinstance(value, dict) else {}


def _step(line: str, fmt: MessageFormat | None = None) -> PlanStep:
    verb, _, rest = line.partition(" ")
    if verb == "say" and rest.strip():
        return say(rest.strip(), fmt)
    if verb == "stop" and not rest.strip():
        return PlanStep(Action.stop(), Action.stop())
    if verb != "call" or not rest.strip():
        raise ValueError(line)
    name, _, args = rest.strip().partition(" ")
    intended, _, weak = args.partition(" weak ")
    return PlanStep(_call(name, intended), _call(name, weak if weak.strip() else intended))


def _call(name: str, arguments: str) -> Action:
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(arguments) from exc
    if not isinstance(parsed, dict):
        raise ValueError(arguments)
    return Action.tool(name, **parsed)


def position(history: History, default: Sequence[PlanStep] | None = None,
             fmt: MessageFormat | None = None) -> tuple[list[PlanStep], int]:
    """The plan in force (the latest user message) and how many of its steps the history has taken."""
    steps = history.steps
    last = max((i for i, s in enumerate(steps) if s.action.kind is ActionKind.MESSAGE and s.observation), default=-1)
    text = steps[last].observation.content if last >= 0 else history.task.instruction  # type: ignore[union-attr]
    return parse_plan(text, default, fmt), len(steps) - last - 1


def _at(plan: list[PlanStep], i: int, fmt: MessageFormat | None = None) -> PlanStep:
    return plan[i] if i < len(plan) else reply("Done.", fmt)


class PlanPolicy:
    """The protocol's ``Policy``: the plan's next step, as the weak model drafts it or the strong one writes it."""

    def __init__(self, role: str, default: Sequence[PlanStep] | None = None, fmt: MessageFormat | None = None):
        self.role, self.default, self.fmt = role, default, fmt

    async def propose(self, history: History, draft: Sequence[Step] = (), feedback: str | None = None) -> Proposal:
        plan, done = position(history, self.default, self.fmt)
        step = _at(plan, done + len(draft), self.fmt)
        return Proposal(step.drafted if self.role == "weak" else step.intended, SCRIPTED_USAGE[self.role])


class PlanVerifier:
    """The protocol's ``Verifier``: accepts the block up to the first step that is not the plan's, and
    repairs that step with the plan's own (a fused repair)."""

    def __init__(self, default: Sequence[PlanStep] | None = None, fmt: MessageFormat | None = None):
        self.default, self.fmt = default, fmt

    async def verify(self, history: History, block: Sequence[Step]) -> Review:
        plan, done = position(history, self.default, self.fmt)
        for j, step in enumerate(block):
            intended = _at(plan, done + j, self.fmt).intended
            if not step.action.same_as(intended):
                return Review(Verdict(j, f"step {j + 1} is not the plan's: expected {intended.describe()}",
                                      intended), SCRIPTED_USAGE["verify"])
        return Review(Verdict(len(block)), SCRIPTED_USAGE["verify"])


class PlanEngineClient:
    """The coordinator's ``EngineClient`` for ``ScriptedEngines``: plan-following models, no batching."""

    def __init__(self, priority: Any) -> None:
        self.priority = priority  # a ``ProgramPriority``: nothing waits on an engine, its waits stay empty

    def models(self, session: Any, catalog: object, parallel: bool = False
               ) -> tuple[PlanPolicy, PlanPolicy, PlanVerifier]:
        """The plan's parts; ``parallel`` is accepted and ignored: a plan's steps hold one call each, and so
        is the session's sampling (a plan decides every word). Its output format is honoured (module doc)."""
        functions = session.request.client_tools
        first = functions[0] if functions else None
        fmt = MessageFormat.of(session.request.output_format)
        default = default_plan(first.name if first else None, first.parameters if first else None, fmt)
        return PlanPolicy("weak", default, fmt), PlanPolicy("strong", default, fmt), PlanVerifier(default, fmt)

    def queued(self) -> int:
        return 0

    def batchers(self) -> dict[str, list]:
        return {}
