"""Wiring simulated parts to a real tau2 task (SIMULATED policies, real tau2 environment)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..costs.ledger import Ledger
from ..models.simulated import (
    STRONG_RATES, WEAK_RATES, ErrorRates, GoldScript, SimulatedPolicy, SimulatedVerifier, VerifierRates,
    build_script,
)
from ..models.tokens import PrefixCache, TokenModel
from ..protocol.runtime import Parts
from ..protocol.types import Action, Observation, Task
from ..tools.tau2 import Tau2Domain, Tau2Tools, schema_validator

SPARE_READS = {
    "airline": (Action.tool("list_all_airports"),),
    "retail": (Action.tool("list_all_product_types"),),
}


@dataclass(frozen=True)
class SimSettings:
    """Everything that shapes a simulated run. Defaults are the calibrated ones (see docs)."""

    weak: ErrorRates = WEAK_RATES
    strong: ErrorRates = STRONG_RATES
    verifier: VerifierRates = VerifierRates()
    tokens: TokenModel = field(default_factory=TokenModel)
    seed: int = 0


class GoldUser:
    """A scripted customer (SIMULATED): agrees to every confirmation and never hangs up first."""

    def __init__(self) -> None:
        self.heard: list[str] = []

    async def reply(self, text: str) -> Observation:
        self.heard.append(text)
        if text.endswith("Shall I proceed?"):
            return Observation("Yes, please proceed.")
        return Observation("Thank you.")


def first_user_message(tau2_task: Any) -> str:
    instructions = tau2_task.user_scenario.instructions
    if isinstance(instructions, str):
        return instructions
    parts = [instructions.reason_for_call, instructions.known_info]
    return "\n".join(p for p in parts if p)


def gold_script(domain: Tau2Domain, task_id: str) -> GoldScript:
    criteria = domain.tasks[task_id].evaluation_criteria
    calls = [Action.tool(a.name, **a.arguments) for a in (criteria.actions or []) if a.requestor == "assistant"]
    return build_script(calls, criteria.communicate_info or [], lambda a: domain.effect(a.call.name),
                        SPARE_READS.get(domain.name, ()))


def simulated_models(domain: Tau2Domain, task_id: str, trial: int, settings: SimSettings,
                     valid: Callable[[Action], bool] | None = None,
                     ) -> tuple[SimulatedPolicy, SimulatedPolicy, SimulatedVerifier]:
    """The weak policy, strong policy and verifier of one run (SIMULATED), with fresh prefix caches.
    ``valid`` defaults to the domain's schema check (no environment needed)."""
    script = gold_script(domain, task_id)
    seed = (settings.seed, domain.name, task_id, trial)
    weak_cache, strong_cache = PrefixCache(), PrefixCache()
    if valid is None:
        valid = lambda a: schema_validator(domain.name).check(a.call) is None  # noqa: E731
    system_chars = len(domain.policy) + len(json.dumps(domain.openai_tools()))
    tm = replace(settings.tokens, system_tokens=int(system_chars / settings.tokens.chars_per_token))
    weak = SimulatedPolicy("weak", script, settings.weak, tm, weak_cache, seed, valid)
    strong = SimulatedPolicy("strong", script, settings.strong, tm, strong_cache, seed, valid)
    verifier = SimulatedVerifier(script, settings.verifier, strong, tm, strong_cache, seed)
    return weak, strong, verifier


def simulated_task(domain: Tau2Domain, task_id: str) -> Task:
    tau2_task = domain.tasks[task_id]
    return Task(task_id, first_user_message(tau2_task), tau2_task)


def simulated_parts(domain: Tau2Domain, task_id: str, trial: int, settings: SimSettings,
                    tools: Tau2Tools | None = None) -> tuple[Task, Parts]:
    """A task and fresh parts for one run: real tau2 tools, simulated models, an empty ledger."""
    tools = tools or Tau2Tools(domain)
    weak, strong, verifier = simulated_models(domain, task_id, trial, settings,
                                              lambda a: tools.validate(a.call) is None)
    return simulated_task(domain, task_id), Parts(weak, strong, verifier, tools, GoldUser(), Ledger())
