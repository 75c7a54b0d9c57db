"""The gold path a simulated run replays (SIMULATED): ``GoldScript`` and ``build_script``.

A ``GoldScript`` is the path a perfect agent takes through one task: the task's gold tool calls, a
confirmation message before each write, a closing message that carries the facts the task expects the
agent to communicate, and a stop. An item may be a parallel action of several independent reads or
writes (``parallel.py``); it is done once each of its calls is, in one step or in several.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from ..protocol.types import Action, ActionKind, Effect, Step


@dataclass(frozen=True)
class GoldScript:
    """The ordered items of a perfect run, each with its effect, and the equivalent forms of each item:
    ``equivalents[i]`` are actions that make the same progress as ``items[i]`` (a message worded
    differently; the item itself first). Empty: every item has one form."""

    items: tuple[Action, ...]
    effects: tuple[Effect, ...]
    spare_reads: tuple[Action, ...]  # harmless reads a distracted agent might add
    equivalents: tuple[tuple[Action, ...], ...] = ()

    @functools.cached_property
    def _canonical(self) -> dict[str, str]:
        """Each form's key -> its item's key (computed once per script)."""
        return {form.key(): item.key() for i, item in enumerate(self.items) for form in self.forms(i)}

    def forms(self, i: int) -> tuple[Action, ...]:
        return self.equivalents[i] if self.equivalents else (self.items[i],)

    def matches(self, i: int, action: Action) -> bool:
        """Whether ``action`` is one of item i's equivalent forms (the semantic test, not the exact one)."""
        return any(action.same_as(form) for form in self.forms(i))

    def pending(self, steps: Sequence[Step]) -> list[int]:
        """Indices of script items not yet done in ``steps`` (executed or sent, in any equivalent form;
        staged steps are not done). A gold call that returns an error is done too: some tau2 gold actions
        fail by design."""
        return self._progress(steps)[0]

    def todo(self, i: int, steps: Sequence[Step]) -> Action:
        """What is left of pending item ``i`` after ``steps``: the item, or for a parallel item whose calls
        were partly done already (one by one, or by a partial accept), only the calls not done yet."""
        item = self.items[i]
        if not item.more:
            return item
        _, done = self._progress(steps)
        rest = [c for c in item.calls if not _take(done, c.action_key())]
        return Action.parallel(rest) if rest else item

    def _progress(self, steps: Sequence[Step]) -> tuple[list[int], Counter[str]]:
        """The pending items' indices, and what ``steps`` did that no done item accounts for."""
        canonical = self._canonical
        done: Counter[str] = Counter()
        for s in steps:
            if s.observation is None:
                continue
            if s.action.more:  # a parallel step does each of its calls
                done.update(c.action_key() for c in s.action.calls)
            else:
                done[canonical.get(s.action.key(), s.action.key())] += 1
        left = []
        for i, item in enumerate(self.items):
            need = Counter(c.action_key() for c in item.calls) if item.more else Counter({item.key(): 1})
            if all(done[k] >= n for k, n in need.items()):
                done.subtract(need)
            else:
                left.append(i)
        return left, done


# Equivalent wordings of the script's own messages: a real agent says the same thing many ways. A
# confirmation keeps its closing question (the scripted user answers it), a closing keeps its facts.
CONFIRM_FORMS = ("I will now {}. Shall I proceed?", "Next step: {}. Shall I proceed?",
                 "To do this I need to {}. Shall I proceed?")
CLOSING_FORMS = ("Everything is taken care of.", "All done.", "Your request is complete.")
ASK_FORMS = ("Could you please give me your {}?", "May I have your {}, please?", "What is your {}?")


def build_script(gold_calls: Sequence[Action], communicate: Sequence[str], effect: Callable[[Action], Effect],
                 spare_reads: Sequence[Action], clarify: bool = True) -> GoldScript:
    """The gold path with what real agents add: before the first call that needs an identifier, a question
    asking the user for it (``clarify``); before each write, a confirmation; a closing message with the
    facts to communicate; a stop. Messages come with their equivalent wordings."""
    forms: list[tuple[Action, ...]] = []
    asked: set[tuple[str, str]] = set()
    for call in gold_calls:  # tool calls, and (dual-control domains) messages asking the user to act
        if call.kind is ActionKind.TOOL and clarify:
            for name in _new_identifiers(call, asked):
                forms.append(tuple(Action.message(f.format(name.replace("_", " "))) for f in ASK_FORMS))
        if call.kind is ActionKind.TOOL and effect(call) is Effect.WRITE:  # a group of writes: one confirmation
            forms.append(tuple(Action.message(f.format(call.describe())) for f in CONFIRM_FORMS))
        forms.append((call,))
    facts = "".join(f" {c}." for c in communicate)
    forms += [tuple(Action.message(f + facts) for f in CLOSING_FORMS), (Action.stop(),)]
    items = tuple(f[0] for f in forms)
    effects = tuple(effect(a) if a.kind is ActionKind.TOOL else Effect.WRITE for a in items)
    reads = [Action(ActionKind.TOOL, c) for a, e in zip(items, effects, strict=False)
             if e is Effect.READ and a.kind is ActionKind.TOOL for c in a.calls]  # a needless read is one call
    return GoldScript(items, effects, tuple(reads) or tuple(spare_reads), tuple(forms))


def _new_identifiers(call: Action, asked: set[tuple[str, str]]) -> list[str]:
    """The call's ``*_id`` arguments whose value the user has not been asked for yet (recorded in ``asked``);
    a parallel item's calls' together: one question per value, as when the calls come one by one."""
    new: list[tuple[str, str]] = []
    for c in call.calls:
        new += [(k, str(v)) for k, v in sorted(c.arguments.items())
                if k.endswith("_id") and (k, str(v)) not in asked and (k, str(v)) not in new]
    asked.update(new)
    return [k for k, _ in new]


def _take(done: Counter[str], key: str) -> bool:
    """Whether ``done`` holds ``key``, taking one if so."""
    if done[key] > 0:
        done[key] -= 1
        return True
    return False
