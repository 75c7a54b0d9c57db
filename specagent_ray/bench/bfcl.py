"""Simulated parts for a BFCL v4 multi-turn case (SIMULATED policies, BFCL's real backends and checker).

The gold script of a case is its ground-truth calls turn by turn, each turn closed by a message to the
user (BFCL has no confirmation policy, so no confirmation is asked before a write); the scripted user
answers each such message with the next turn, and stops after the last. ``miss_func`` and
``miss_param`` cases have turns whose gold is empty (the function is held out, or a parameter is
missing): the gold step there is a message asking the user, which the semantic verifier accepts as the
turn's progress. Policies replay the script through the seeded error model, as for tau2.
"""

from __future__ import annotations

import json

from ..costs.ledger import Ledger
from ..models.simulated import GoldScript, SimulatedPolicy, SimulatedVerifier
from ..protocol.runtime import Parts
from ..protocol.types import Action, ActionKind, Effect, Observation, Task, Trajectory
from ..tools.bfcl import BfclCase, BfclTools, effect, load_cases, parse_call, reward, spare_reads
from .simulation import SimSettings, script_models

# The system prompt's policy for real models (BFCL has no policy document of its own).
POLICY = ("You operate the user's applications through the functions below. Do what each request asks, "
          "calling functions as needed, then end your turn with a message to the user. When a request "
          "lacks information a function needs, or no function can do it, ask the user instead of guessing.")
# BFCL's own words when held-out functions come back (its runner sends them on the reveal turn).
REVEAL = "I have updated some more functions you can choose from. What about now?"
ASK = "I need more information to do that: which one do you mean, and with what details?"


def category_of(domain: str) -> str:
    """``bfcl-base`` -> ``base`` (the bench's domain names for BFCL categories)."""
    return domain.removeprefix("bfcl-")


def gold_script(case: BfclCase) -> GoldScript:
    items: list[Action] = []
    for i, turn in enumerate(case.ground_truth):
        items += [Action(ActionKind.TOOL, parse_call(c)) for c in turn]
        items.append(Action.message(ASK if not turn else f"Done with request {i + 1}."))
    items.append(Action.stop())
    effects = tuple(effect(a.call.name) if a.kind is ActionKind.TOOL else Effect.WRITE  # type: ignore[union-attr]
                    for a in items)
    reads = tuple(a for a, e in zip(items, effects, strict=True) if e is Effect.READ and a.kind is ActionKind.TOOL)
    spare = reads or tuple(Action(ActionKind.TOOL, c) for c in spare_reads(case.tools()))
    return GoldScript(tuple(items), effects, spare)


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


def bfcl_parts(domain: str, case_id: str, trial: int, settings: SimSettings) -> tuple[Task, Parts]:
    """A case and fresh parts for one run: BFCL's backends, simulated models, the scripted user."""
    case = load_cases(category_of(domain))[case_id]
    tools = BfclTools(case)
    weak, strong, verifier = bfcl_models(domain, case_id, trial, settings)
    return Task(case.id, case.turns[0], case), Parts(weak, strong, verifier, tools, BfclUser(case), Ledger())


def bfcl_models(domain: str, case_id: str, trial: int, settings: SimSettings
                ) -> tuple[SimulatedPolicy, SimulatedPolicy, SimulatedVerifier]:
    """The weak policy, strong policy and verifier of one run (SIMULATED), as the sim engines need them:
    from the case's function docs alone, without its backends."""
    case = load_cases(category_of(domain))[case_id]
    validator = case.validator()  # what BfclTools.validate checks
    return script_models(gold_script(case), settings, (settings.seed, domain, case_id, trial),
                         len(json.dumps(case.tools())), lambda a: validator.check(a.call) is None)


def grade(domain: str, case_id: str, trajectory: Trajectory) -> float:
    return reward(load_cases(category_of(domain))[case_id], trajectory)
