"""The simulated world's scripts (SIMULATED): a benchmark task's gold path, and the seeded weak and strong
policies and verifier that replay it, for the bench and for the sim engines alike.

tau2: the task's gold actions (the agent's calls, and in dual-control domains a request to the user in
place of each of the user's own calls), then its communicate info. BFCL v4 multi-turn: the ground-truth
calls turn by turn, each turn closed by a message to the user (BFCL has no confirmation policy); a turn
whose gold is empty (``miss_func``, ``miss_param``) is a message asking the user, which the semantic
verifier accepts as the turn's progress.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal

from ..models.tokens import PrefixCache, TokenModel
from ..protocol.types import Action, ActionKind, Effect, ToolCall
from ..tools.bfcl import BfclCase, effect, load_cases, parse_call, spare_reads
from ..tools.tau2 import Tau2Domain, schema_validator
from .judge import MID_CONFIDENCE_AUC, mid_policy_rates, mid_verifier_rates
from .parallel import gold_outputs, group_calls
from .policies import (
    CONFIDENCE_AUC, DOMAIN_RATES, ERROR_CORRELATION, STRONG_RATES, STYLE, VERIFIER_RATES, WEAK_RATES, ErrorRates, GoldScript,
    SimulatedPolicy, SimulatedVerifier, Style, VerifierRates, build_script,
)
from .users import ask_user

ASK = "I need more information to do that: which one do you mean, and with what details?"
# A harmless read per domain, for the error model's needless reads where the gold path has none.
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
    verifier: VerifierRates = VERIFIER_RATES
    tokens: TokenModel = field(default_factory=TokenModel)
    style: Style = STYLE
    confidence_auc: float = CONFIDENCE_AUC
    error_correlation: float = ERROR_CORRELATION
    clarify: bool = True  # the script asks the user for each identifier before the first call needing it
    errors_by: Literal["history", "stage"] = "stage"  # what the error draw is keyed by (SimulatedPolicy)
    seed: int = 0
    parallel: bool = False  # the gold path's independent calls as parallel actions (parallel.py)
    parallel_writes: bool = True  # with parallel: writes too, not only reads

    @classmethod
    def for_domain(cls, domain: str, seed: int = 0, errors_by: Literal["history", "stage"] | None = None
                   ) -> SimSettings:
        """The calibrated settings of one domain; ``errors_by`` overrides the domain's own keying (the
        rates stay those calibrated for it). Airline and retail share one calibration, to the paper's
        tables, with per-stage error draws; telecom and BFCL keep theirs, made before the style mechanisms
        and per-stage draws (history-keyed draws and the 0.6 judge; no clarifying questions, exploring or
        reordered reads; the old confidence's AUC of 0.86)."""
        strong, weak = DOMAIN_RATES.get(domain, (STRONG_RATES, WEAK_RATES))
        if domain in ("airline", "retail"):
            return cls(weak=weak, strong=strong, seed=seed, errors_by=errors_by or "stage")
        return cls(weak=weak, strong=strong, verifier=VerifierRates(),
                   style=Style(reorder_reads=False, explore_read=0.0), confidence_auc=0.86, error_correlation=0.0,
                   clarify=False, seed=seed, errors_by=errors_by or "history")


def first_user_message(tau2_task: Any) -> str:
    instructions = tau2_task.user_scenario.instructions
    if isinstance(instructions, str):
        return instructions
    parts = [instructions.reason_for_call, instructions.known_info]
    return "\n".join(p for p in parts if p)


def gold_script(domain: Tau2Domain, task_id: str, clarify: bool = True, parallel: bool = False,
                writes: bool = True) -> GoldScript:
    """The gold path: the agent's gold calls, and (dual-control) a request to the user in place of each
    of the user's own gold calls, in the task's order; ``clarify``: see ``build_script``; ``parallel``:
    runs of independent reads, and with ``writes`` of independent writes, as one parallel action each
    (``parallel.group_calls``)."""
    criteria = domain.tasks[task_id].evaluation_criteria
    items = [Action.tool(a.name, **a.arguments) if a.requestor == "assistant"
             else Action.message(ask_user(ToolCall(a.name, dict(a.arguments)))) for a in (criteria.actions or [])]
    if parallel:
        items = group_calls(items, gold_outputs(domain.name, task_id), lambda a: domain.effect(a.call.name),
                            writes=writes)
    return build_script(items, criteria.communicate_info or [], lambda a: domain.effect(a.call.name),
                        SPARE_READS.get(domain.name, ()), clarify)


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
        valid = lambda a: all(schema_validator(domain.name).check(c) is None for c in a.calls)  # noqa: E731
    system_chars = len(domain.policy) + len(json.dumps(domain.openai_tools()))
    return script_models(gold_script(domain, task_id, settings.clarify, settings.parallel, settings.parallel_writes),
                         settings, (settings.seed, domain.name, task_id, trial),
                         system_chars, valid)


def script_models(script: GoldScript, settings: SimSettings, seed: tuple, system_chars: int,
                  valid: Callable[[Action], bool]) -> tuple[SimulatedPolicy, SimulatedPolicy, SimulatedVerifier]:
    """Weak and strong policies and the verifier replaying one gold script (SIMULATED), with fresh prefix
    caches; ``system_chars`` sizes the system prompt (policy and tool schemas) in the token model."""
    weak_cache, strong_cache = PrefixCache(), PrefixCache()
    tm = replace(settings.tokens, system_tokens=int(system_chars / settings.tokens.chars_per_token))
    shared = {"style": settings.style, "confidence_auc": settings.confidence_auc,
              "error_correlation": settings.error_correlation, "errors_by": settings.errors_by}
    weak = SimulatedPolicy("weak", script, settings.weak, tm, weak_cache, seed, valid, **shared)
    strong = SimulatedPolicy("strong", script, settings.strong, tm, strong_cache, seed, valid, **shared)
    verifier = SimulatedVerifier(script, settings.verifier, strong, tm, strong_cache, seed)
    return weak, strong, verifier


def mid_judge(verifier: SimulatedVerifier, weak_rates: ErrorRates) -> SimulatedVerifier:
    """The three-tier chain's mid verifier beside ``verifier`` (SIMULATED, on judge.py's stated assumptions):
    its own noise and prefix cache, more false accepts and rejects, repairs from a policy between the weak and
    strong ones, and a confidence that tells its right verdicts from its wrong ones at MID_CONFIDENCE_AUC."""
    policy = replace(verifier.strong, role="mid", rates=mid_policy_rates(verifier.strong.rates, weak_rates),
                     cache=PrefixCache())
    return SimulatedVerifier(verifier.script, mid_verifier_rates(verifier.rates), policy, verifier.tokens,
                             policy.cache, verifier.seed, name="mid", confidence_auc=MID_CONFIDENCE_AUC)


def bfcl_gold_script(case: BfclCase) -> GoldScript:
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


def bfcl_models(domain: str, case_id: str, trial: int, settings: SimSettings
                ) -> tuple[SimulatedPolicy, SimulatedPolicy, SimulatedVerifier]:
    """The weak policy, strong policy and verifier of one run (SIMULATED), as the sim engines need them:
    from the case's function docs alone, without its backends."""
    case = load_cases(domain.removeprefix("bfcl-"))[case_id]
    validator = case.validator()  # what BfclTools.validate checks
    return script_models(bfcl_gold_script(case), settings, (settings.seed, domain, case_id, trial),
                         len(json.dumps(case.tools())), lambda a: validator.check(a.call) is None)
