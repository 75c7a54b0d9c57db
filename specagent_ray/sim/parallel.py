"""Parallel gold (SIMULATED): the calls of a task's gold path that a model could issue at once.

A modern model emits several tool calls in one turn when none needs another's result. Here that is
decided from the gold path itself: its calls are replayed once, in order, in a fresh environment of the
task, and a call *depends* on an earlier one if one of its argument values (a string, or a number, of at
least ``MIN_VALUE_CHARS`` characters) appears in that call's output. Consecutive calls of the same effect
with no dependency between them, at most ``cap``, become one parallel action: reads with reads, and
(``writes``) writes with writes that also share no identifier (``*_id`` argument value), so that two
changes of one order or reservation stay one after the other. Messages, and a call that depends on the
group, stay as they were. A group of writes is confirmed once and judged call by call.
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


def _identifiers(call: ToolCall) -> set[tuple[str, str]]:
    return {(k, str(v)) for k, v in call.arguments.items() if k.endswith("_id")}


def group_calls(actions: Sequence[Action], outputs: Sequence[str | None], effect: Callable[[Action], Effect],
                cap: int = CAP, writes: bool = True) -> list[Action]:
    """``actions`` with runs of independent reads (and, with ``writes``, of independent writes) joined into
    parallel actions. ``outputs[i]`` is what ``actions[i]`` returned in the replay (None for what is not a
    tool call)."""
    out: list[Action] = []
    group: list[tuple[ToolCall, str]] = []
    kind: Effect | None = None

    def close() -> None:
        if group:
            out.append(Action.parallel([c for c, _ in group]))
            group.clear()

    for action, output in zip(actions, outputs, strict=True):
        e = effect(action) if action.kind is ActionKind.TOOL and action.call is not None else None
        if e is None or (e is Effect.WRITE and not writes):
            close()
            out.append(action)
            continue
        call = action.call
        assert call is not None
        if e is not kind or len(group) >= cap or any(call == c or depends(call, o) for c, o in group) or (
                e is Effect.WRITE and any(_identifiers(call) & _identifiers(c) for c, _ in group)):
            close()
        kind = e
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


def judge_calls(want: Action, staged: Action, rates: Any, rng_of: Callable[[ToolCall], Any]
                ) -> tuple[tuple[bool, ...], str, Action | None]:
    """A simulated semantic verdict on ``staged``'s calls against ``want``, what is left of a parallel gold
    item: a call is acceptable iff it is one of ``want``'s calls (each at most once); each answer is then
    flipped at the judge's rates (a false reject of an acceptable call, a false accept of a wrong one),
    drawn per call. Returns the answers, the reason for the rejected ones, and the strong model's version
    of what they should have done (the wanted calls no accepted call covers), for a fused repair."""
    wanted = {c.key(): c for c in want.calls}
    answers = []
    for call in staged.calls:
        ok = wanted.pop(call.key(), None) is not None
        flip = rng_of(call).random() < (rates.false_reject if ok else rates.false_accept)
        answers.append(ok != flip)
    accepted = {c.key() for c, a in zip(staged.calls, answers, strict=True) if a}
    rest = [c for c in want.calls if c.key() not in accepted]
    wrong = [c for c, a in zip(staged.calls, answers, strict=True) if not a]
    said = lambda calls: "; ".join(f"{c.name}({c.arguments})" for c in calls)  # noqa: E731
    reason = "" if not wrong else f"expected {said(rest)}, not {said(wrong)}" if rest else f"not needed: {said(wrong)}"
    return tuple(answers), reason, Action.parallel(rest) if rest and wrong else None
