"""The simulated world's ``User``s (SIMULATED): who answers the agent's messages in a simulated session.

- ``GoldUser``: tau2's scripted customer: agrees, runs its own gold calls when asked (telecom).
- ``BfclUser``: a BFCL case's turns, one per agent message.

tau2's own LLM user simulator on a real model is ``models/tau2_user.py``'s ``Tau2User``.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ..protocol.types import Action, ActionKind, Observation, ToolCall, UserToolCall

if TYPE_CHECKING:
    from ..tools.bfcl import BfclCase

# BFCL's own words when held-out functions come back (its runner sends them on the reveal turn).
REVEAL = "I have updated some more functions you can choose from. What about now?"


def ask_user(call: ToolCall) -> str:
    """The agent's request that the user run one of their own tools (dual-control domains)."""
    return f"Please {Action(ActionKind.TOOL, call).describe()} on your phone."


class GoldUser:
    """A scripted customer (SIMULATED): agrees to every confirmation and never hangs up first. In a
    dual-control domain, ``requests`` maps the agent's request texts (``ask_user``) to the user-side
    gold calls; the user runs each one once, through ``run`` (their own side of the environment), when
    asked for it, and replies with what they saw."""

    def __init__(self, requests: Sequence[ToolCall] = (),
                 run: Callable[[ToolCall], UserToolCall | Awaitable[UserToolCall]] | None = None):
        self.heard: list[str] = []
        self._todo = Counter(ask_user(c) for c in requests)
        self._calls = {ask_user(c): c for c in requests}
        self._run = run

    async def reply(self, text: str) -> Observation:
        self.heard.append(text)
        if text.endswith("Shall I proceed?"):
            return Observation("Yes, please proceed.")
        if self._todo[text] > 0 and self._run is not None:
            self._todo[text] -= 1
            done = self._run(self._calls[text])
            if inspect.isawaitable(done):
                done = await done
            return Observation(f"Done. My phone shows: {done.content}", user_calls=(done,))
        return Observation("Thank you.")


class BfclUser:
    """The case's user (SIMULATED): each agent message gets the next turn; after the last, a stop.
    ``answered``: turns already given in a committed history (a session resumed after a restart)."""

    def __init__(self, case: BfclCase, answered: int = 0):
        self.turns = list(case.turns[1 + answered:])
        self.heard: list[str] = []

    async def reply(self, text: str) -> Observation:
        self.heard.append(text)
        if not self.turns:
            return Observation("###STOP###", user_stop=True)
        return Observation(self.turns.pop(0) or REVEAL)
