"""Who reviews a block, and how many judgements a critical call needs: the three-tier chain and the tier rule.

    review(H, block):
        if a mid verifier is configured (and the speculation controller did not route this block past it):
            (j, r, ã), c <- V_M(H, block)                      # the mid verifier reviews first (chain.py)
            if it settles (see ``chain.escalation``): the ruling is the mid's
            else: note escalated; (j, r, ã) <- V_S(H, block)   # the strong verdict is final
        else: (j, r, ã) <- V_S(H, block)
        second check: every accepted CRITICAL call of the staged step must be confirmed independently,
            or it is rejected (it never runs); see ``CriticalCheck`` (second_check.py).

Guarantees, each tested in tests/unit/test_tiers_safety.py and tests/unit/test_chain_safety.py:
- A weak CRITICAL call runs only after two judgements accepted it: a verdict, then the second check.
- The mid verifier settles a block alone only if the staged step's tier is one it may settle, its
  confidence is at least ``ChainRule.escalate_below``, and any fused repair it gives is valid and of a
  tier it may settle, never CRITICAL. Anything else (malformed, unavailable, low confidence) escalates.
- A malformed or unavailable second check rejects the critical calls (never an accept).

``ChainRule``, ``CriticalCheck`` (config.py) and ``Ruling`` (blocks.py) are importable from here, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from .blocks import Ruling
from .chain import chain
from .config import ChainRule, CriticalCheck
from .model_calls import verify
from .runtime import Run
from .second_check import second_check
from .types import Step

__all__ = ["ChainRule", "CriticalCheck", "Ruling", "review"]


async def review(run: Run, steps: Sequence[Step]) -> Ruling:
    """The block's ruling: the chain (if a mid verifier is configured and the block's route is not the strong
    verifier alone), then the tier rule. Skipping the mid only ever leaves the strong verdict: never less
    review."""
    routed = getattr(run.parts.block_size, "chain", None)  # the speculation controller's route, if it has one
    if run.parts.mid is not None and routed is not False:
        ruling = await chain(run, steps)
    else:
        ruling = Ruling(await verify(run, steps))
    return await second_check(run, steps, ruling)
