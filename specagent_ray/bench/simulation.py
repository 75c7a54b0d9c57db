"""Wiring simulated parts to a real tau2 task (SIMULATED policies, real tau2 environment)."""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..costs.ledger import Ledger
from ..models.simulated import (
    DOMAIN_RATES, STRONG_RATES, WEAK_RATES, ErrorRates, GoldScript, SimulatedPolicy, SimulatedVerifier, VerifierRates,
    build_script,
)
from ..models.tokens import PrefixCache, TokenModel
from ..protocol.runtime import Parts
from ..protocol.types import Action, ActionKind, Observation, Task, ToolCall, UserToolCall
from ..tools.tau2 import Tau2Domain, Tau2Tools, schema_validator

SPARE_READS = {
    "airline": (Action.tool("list_all_airports"),),
    "retail": (Action.tool("list_all_product_types"),),
    "telecom": (Action.tool("get_customer_by_id", customer_id="C1001"),),
}


@dataclass(frozen=True)
class SimSettings:
    """Everything that shapes a simulated run. Defaults are the calibrated ones (see docs)."""

    weak: ErrorRates = WEAK_RATES
    strong: ErrorRates = STRONG_RATES
    verifier: VerifierRates = VerifierRates()
    tokens: TokenModel = field(default_factory=TokenModel)
    seed: int = 0

    @classmethod
    def for_domain(cls, domain: str, seed: int = 0) -> SimSettings:
        """The calibrated settings of one tau2 domain (airline's for airline and retail)."""
        strong, weak = DOMAIN_RATES.get(domain, (STRONG_RATES, WEAK_RATES))
        return cls(weak=weak, strong=strong, seed=seed)


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


def first_user_message(tau2_task: Any) -> str:
    instructions = tau2_task.user_scenario.instructions
    if isinstance(instructions, str):
        return instructions
    parts = [instructions.reason_for_call, instructions.known_info]
    return "\n".join(p for p in parts if p)


def gold_script(domain: Tau2Domain, task_id: str) -> GoldScript:
    """The gold path: the agent's gold calls, and (dual-control) a request to the user in place of each
    of the user's own gold calls, in the task's order."""
    criteria = domain.tasks[task_id].evaluation_criteria
    items = [Action.tool(a.name, **a.arguments) if a.requestor == "assistant"
             else Action.message(ask_user(ToolCall(a.name, dict(a.arguments)))) for a in (criteria.actions or [])]
    return build_script(items, criteria.communicate_info or [], lambda a: domain.effect(a.call.name),
                        SPARE_READS.get(domain.name, ()))


def user_requests(domain: Tau2Domain, task_id: str) -> list[ToolCall]:
    """The user-side gold calls of a dual-control task (none elsewhere)."""
    criteria = domain.tasks[task_id].evaluation_criteria
    return [ToolCall(a.name, dict(a.arguments)) for a in (criteria.actions or []) if a.requestor == "user"]


def simulated_models(domain: Tau2Domain, task_id: str, trial: int, settings: SimSettings,
                     valid: Callable[[Action], bool] | None = None,
                     ) -> tuple[SimulatedPolicy, SimulatedPolicy, SimulatedVerifier]:
    """The weak policy, strong policy and verifier of one run (SIMULATED), with fresh prefix caches.
    ``valid`` defaults to the domain's schema check (no environment needed)."""
    if valid is None:
        valid = lambda a: schema_validator(domain.name).check(a.call) is None  # noqa: E731
    system_chars = len(domain.policy) + len(json.dumps(domain.openai_tools()))
    return script_models(gold_script(domain, task_id), settings, (settings.seed, domain.name, task_id, trial),
                         system_chars, valid)


def script_models(script: GoldScript, settings: SimSettings, seed: tuple, system_chars: int,
                  valid: Callable[[Action], bool]) -> tuple[SimulatedPolicy, SimulatedPolicy, SimulatedVerifier]:
    """Weak and strong policies and the verifier replaying one gold script (SIMULATED), with fresh prefix
    caches; ``system_chars`` sizes the system prompt (policy and tool schemas) in the token model."""
    weak_cache, strong_cache = PrefixCache(), PrefixCache()
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
    """A task and fresh parts for one run: real tau2 tools in the task's initial state, simulated models,
    the scripted user (who runs their own tools in dual-control domains), an empty ledger."""
    tools = tools or Tau2Tools(domain, task=domain.tasks[task_id])
    weak, strong, verifier = simulated_models(domain, task_id, trial, settings,
                                              lambda a: tools.validate(a.call) is None)
    user = GoldUser(user_requests(domain, task_id), tools.execute_user)
    return simulated_task(domain, task_id), Parts(weak, strong, verifier, tools, user, Ledger())
