"""The three-tier chain: a mid verifier reviews each block first and settles it alone only inside its
remit (``ChainRule``); anything else escalates to the strong verifier, whose verdict is final.

Guarantee (tests/unit/test_chain_safety.py): the mid verifier settles a block alone only if the staged
step's tier is one it may settle, its confidence is at least ``ChainRule.escalate_below``, and any fused
repair it gives is valid and of a tier it may settle, never CRITICAL. Anything else (malformed,
unavailable, low confidence) escalates.
"""

from __future__ import annotations

from collections.abc import Sequence

from .blocks import Ruling
from .config import ChainRule
from .model_calls import verify, verify_mid
from .runtime import Run
from .types import Step, Tier, Verdict


async def chain(run: Run, steps: Sequence[Step]) -> Ruling:
    """The mid verifier's ruling if it may settle the block alone, else the strong verifier's."""
    answer = await verify_mid(run, steps)
    why = answer if isinstance(answer, str) else escalation(run, steps, *answer)
    if why is None:
        verdict = answer[0]
        run.note("settled_by_mid", f"{verdict.accepted_prefix}/{len(steps)}")
        return Ruling(verdict, "mid")
    run.note("escalated", why)
    return Ruling(await verify(run, steps))


def escalation(run: Run, steps: Sequence[Step], verdict: Verdict, confidence: float) -> str | None:
    """Why the mid verifier may not settle this block alone (None: it may)."""
    rule: ChainRule = run.config.chain
    if confidence < rule.escalate_below:
        return f"mid confidence {confidence:.2f} < {rule.escalate_below:.2f}"
    tier = run.tiers.tier(steps[-1].action) if steps[-1].staged else Tier.READ
    if tier not in rule.settles and verdict.accepted_prefix == len(steps):
        return f"the staged step is {tier.value}, which the mid verifier may not settle"
    fused = verdict.repair
    if fused is not None and (verdict.accepted_prefix < len(steps) or verdict.partial):
        bad = run.validity.invalid_reason(fused)
        if bad is not None:
            return f"the mid verifier's repair is invalid: {bad}"
        made = run.tiers.tier(fused)
        if made is Tier.CRITICAL or (made is not Tier.READ and made not in rule.settles):
            return f"the mid verifier's repair is {made.value}, which it may not settle"
    return None
