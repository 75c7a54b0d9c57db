"""Parallel gold (SIMULATED): the reads of a task's gold path that a model could issue at once.

A modern model emits several tool calls in one turn when none needs another's result. Here that is
decided from the gold path itself: its calls are replayed once, in order, in a fresh environment of the
task, and a read *depends* on an earlier one if one of its argument values (a string, or a number, of at
least ``MIN_VALUE_CHARS`` characters) appears in that read's output. Consecutive reads with no
dependency between them, at most ``cap``, become one parallel action; writes, messages and reads that
depend on the group stay as they were. Only reads are grouped: a write keeps its own confirmation and
its own verdict.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..protocol.types import Action, ActionKind, Effect, ToolCall

MIN_VALUE_CHARS = 3  # shorter values ("1", "no") appear in any output by chance
CAP = 4  # the most calls in one parallel action of the gold path


def _values(value: Any) -> list[str]:
    """The argument's leaf values as text, long enough to tell where they came from."""
    if isinstance(value, dict):
        return [v for item in value.values() for v in _values(item)]
    if isinstance(value, list):
        return [v for item in value for v in _values(item)]
    if isinstance(value, bool) or value is None:
        return []
    text = str(value)
    return [text] if len(text) >= MIN_VALUE_CHARS else []


def depends(call: ToolCall, output: str) -> bool:
    """Whether ``call`` takes a value that ``output`` (an earlier call's result) shows."""
    return any(v in output for v in _values(call.arguments))


def group_reads(actions: Sequence[Action], outputs: Sequence[str | None], effect: Callable[[Action], Effect],
                cap: int = CAP) -> list[Action]:
    """``actions`` with runs of independent reads joined into parallel actions. ``outputs[i]`` is what
    ``actions[i]`` returned in the replay (None for what is not a tool call)."""
    out: list[Action] = []
    group: list[tuple[ToolCall, str]] = []

    def close() -> None:
        if group:
            out.append(Action.parallel([c for c, _ in group]))
            group.clear()

    for action, output in zip(actions, outputs, strict=True):
        if action.kind is not ActionKind.TOOL or effect(action) is not Effect.READ or action.call is None:
            close()
            out.append(action)
            continue
        call = action.call
        if len(group) >= cap or any(call == c or depends(call, o) for c, o in group):
            close()
        group.append((call, output or ""))
    close()
    return out


@functools.cache
def gold_outputs(domain_name: str, task_id: str) -> tuple[str | None, ...]:
    """What each of the task's gold actions returns when the gold path is replayed in a fresh environment
    (None for the user's own actions, which the agent does not run)."""
    from tau2.data_model.message import ToolCall as Tau2Call

    from ..tools.tau2 import Tau2Domain

    domain = Tau2Domain.load(domain_name)
    env = domain.new_environment(task=domain.tasks[task_id])
    out: list[str | None] = []
    for i, a in enumerate(domain.tasks[task_id].evaluation_criteria.actions or ()):
        if a.requestor != "assistant":
            out.append(None)
            continue
        out.append(env.get_response(Tau2Call(id=f"gold_{i}", name=a.name, arguments=dict(a.arguments))).content or "")
    return tuple(out)
