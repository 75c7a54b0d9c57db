"""How a simulated policy gets a write wrong (SIMULATED): the same tool with one argument changed, still well
formed, so that only a judge that understands the task can tell."""

from __future__ import annotations

import random
from typing import Any, Callable

from ..protocol.types import Action, ActionKind


def mutate(action: Action, rng: random.Random, valid: Callable[[Action], bool] = lambda a: True) -> Action:
    """The same tool with one argument changed so that it still passes ``valid`` (a wrong but
    well-formed call). Unchanged if no argument can be changed that way."""
    assert action.call is not None
    keys = sorted(action.call.arguments)
    rng.shuffle(keys)
    for key in keys:
        args = dict(action.call.arguments)
        args[key] = _perturb(args[key], rng)
        wrong = Action.tool(action.call.name, **args)
        if not wrong.same_as(action) and valid(wrong):
            return wrong
    return action


def mutate_one(action: Action, rng: random.Random, valid: Callable[[Action], bool] = lambda a: True) -> Action:
    """``mutate`` for an action of one call; of a parallel action, one call (drawn by ``rng``) mutated."""
    if not action.more:
        return mutate(action, rng, valid)
    calls = list(action.calls)
    i = rng.randrange(len(calls))
    swap = lambda c: Action.parallel([*calls[:i], c, *calls[i + 1:]])  # noqa: E731
    wrong = mutate(Action(ActionKind.TOOL, calls[i]), rng, lambda a: valid(swap(a.call)))
    return swap(wrong.call)


def _perturb(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + rng.choice([1, 2, 5, 10])
    if isinstance(value, str):
        return value[:-1] + ("X" if not value.endswith("X") else "Y") if value else "X"
    if isinstance(value, list):
        return value[:-1] if len(value) > 1 else [_perturb(v, rng) for v in value]
    if isinstance(value, dict) and value:
        k = sorted(value)[0]
        return {**value, k: _perturb(value[k], rng)}
    return value
