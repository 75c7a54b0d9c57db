"""Who reviews a block, and how many judgements a critical call needs: the three-tier chain and the tier rule.

    review(H, block):
        if a mid verifier is configured:
            (j, r, ã), c <- V_M(H, block)                      # the mid verifier reviews first
            if it settles (see ``settles``): the ruling is the mid's
            else: note escalated; (j, r, ã) <- V_S(H, block)   # the strong verdict is final
        else: (j, r, ã) <- V_S(H, block)
        second check: every accepted CRITICAL call of the staged step must be confirmed independently,
            or it is rejected (it never runs); see ``CriticalCheck``.

Guarantees, each tested in tests/unit/test_tiers_safety.py and tests/unit/test_chain_safety.py:
- A weak CRITICAL call runs only after two judgements accepted it: a verdict, then the second check.
- The mid verifier settles a block alone only if the staged step's tier is one it may settle, its
  confidence is at least ``ChainRule.escalate_below``, and any fused repair it gives is valid and of a
  tier it may settle, never CRITICAL. Anything else (malformed, unavailable, low confidence) escalates.
- A malformed or unavailable second check rejects the critical calls (never an accept).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .interfaces import CriticalJudge, EngineUnavailable
from .types import Action, ActionKind, Author, Step, Tier, Verdict


@dataclass(frozen=True)
class CriticalCheck:
    """The independent second check a CRITICAL call needs after its verdict accepted it.

    ``agree`` (default): the strong policy writes its own step from H and the accepted prefix; each accepted
    critical call must be one of its calls (same tool, same arguments), and the strong step is the fused repair
    of those that are not. Costs one strong decode per accepted critical block.
    ``verdicts``: k - 1 more strong verdicts on the same block must all accept each critical call, asked as a
    ``CriticalJudge``'s critical look where the verifier has one (told to check the call argument by argument).
    Costs k - 1 verify calls; worth as much as the verdicts are independent of each other.
    """

    mode: Literal["agree", "verdicts"] = "agree"
    k: int = 2

    def __post_init__(self) -> None:
        if self.mode not in ("agree", "verdicts"):
            raise ValueError(f"critical check mode must be 'agree' or 'verdicts', got {self.mode!r}")
        if self.k < 2:
            raise ValueError(f"a critical call needs k >= 2 verdicts, got {self.k}")


@dataclass(frozen=True)
class ChainRule:
    """What the mid verifier may settle alone. ``settles``: the tiers of staged steps it may accept or repair
    without the strong verifier (CRITICAL still gets its second check, and a mid repair is never CRITICAL);
    ``escalate_below``: its self-reported confidence under which it escalates."""

    settles: frozenset[Tier] = field(default_factory=lambda: frozenset({Tier.WRITE}))
    escalate_below: float = 0.7

    def __post_init__(self) -> None:
        if not 0.0 <= self.escalate_below <= 1.0:
            raise ValueError(f"escalate_below must be in 0..1, got {self.escalate_below}")


@dataclass(frozen=True, slots=True)
class Ruling:
    """The final answer on a block and who settled it: the mid or the strong verifier. A fused repair in it
    commits with ``judge`` as its author. Made by the runtime, never read from model output."""

    verdict: Verdict
    judge: Author = "strong"


async def review(run, steps: Sequence[Step]) -> Ruling:
    """The block's ruling: the chain (if a mid verifier is configured), then the tier rule."""
    ruling = await chain(run, steps) if run.parts.mid is not None else Ruling(await run.verify(steps))
    return await second_check(run, steps, ruling)


async def chain(run, steps: Sequence[Step]) -> Ruling:
    """The mid verifier's ruling if it may settle the block alone, else the strong verifier's."""
    answer = await run.verify_mid(steps)
    why = answer if isinstance(answer, str) else escalation(run, steps, *answer)
    if why is None:
        verdict = answer[0]
        run.note("settled_by_mid", f"{verdict.accepted_prefix}/{len(steps)}")
        return Ruling(verdict, "mid")
    run.note("escalated", why)
    return Ruling(await run.verify(steps))


def escalation(run, steps: Sequence[Step], verdict: Verdict, confidence: float) -> str | None:
    """Why the mid verifier may not settle this block alone (None: it may)."""
    rule: ChainRule = run.config.chain
    if confidence < rule.escalate_below:
        return f"mid confidence {confidence:.2f} < {rule.escalate_below:.2f}"
    tier = run.tier(steps[-1].action) if steps[-1].staged else Tier.READ
    if tier not in rule.settles and verdict.accepted_prefix == len(steps):
        return f"the staged step is {tier.value}, which the mid verifier may not settle"
    fused = verdict.repair
    if fused is not None and (verdict.accepted_prefix < len(steps) or verdict.partial):
        bad = run.invalid_reason(fused)
        if bad is not None:
            return f"the mid verifier's repair is invalid: {bad}"
        made = run.tier(fused)
        if made is Tier.CRITICAL or (made is not Tier.READ and made not in rule.settles):
            return f"the mid verifier's repair is {made.value}, which it may not settle"
    return None


async def second_check(run, steps: Sequence[Step], ruling: Ruling) -> Ruling:
    """Reject every accepted CRITICAL call of the staged step that an independent check does not confirm."""
    verdict, n = ruling.verdict, len(steps)
    staged = steps[-1] if steps and steps[-1].staged else None
    if staged is None or staged.action.kind is not ActionKind.TOOL or verdict.accepted_prefix < n:
        return ruling
    calls = staged.action.calls
    accepted = verdict.calls or (True,) * len(calls)
    critical = [i for i, c in enumerate(calls) if accepted[i] and run.call_tier(c) is Tier.CRITICAL]
    if not critical:
        return ruling
    check: CriticalCheck = run.config.critical
    confirmed, repair = await (_agree(run, steps) if check.mode == "agree" else _verdicts(run, steps, check.k))
    refused = [i for i in critical if not confirmed(i, calls[i])]
    run.note("second_check", f"{len(critical) - len(refused)}/{len(critical)} confirmed", staged.action)
    if not refused:
        return ruling
    mask = tuple(ok and i not in refused for i, ok in enumerate(accepted))
    kept = {c.key() for c, ok in zip(calls, mask, strict=True) if ok}
    names = ", ".join(calls[i].name for i in refused)
    reason = f"second check did not confirm the critical call(s) {names}"
    if verdict.reason:
        reason = f"{verdict.reason}; {reason}"
    fused = _without(repair, kept) if repair is not None else verdict.repair
    judge = ruling.judge if repair is None else "strong"  # the verdict's own repair stays its judge's
    return Ruling(Verdict(n, reason, fused, mask).checked(n, len(calls)), judge)


async def _agree(run, steps: Sequence[Step]):
    """The strong policy's own step from H and the accepted prefix; a call is confirmed iff it is one of its."""
    try:
        proposal = await run.propose("strong", "confirm", steps[:-1])
    except EngineUnavailable as exc:
        run.note("verifier_fallback", f"second check: {exc}")
        proposal = None
    if proposal is None:
        return (lambda i, c: False), None
    own = proposal.action
    theirs = {c.key() for c in own.calls} if own.kind is ActionKind.TOOL else set()
    return (lambda i, c: c.key() in theirs), own


async def _verdicts(run, steps: Sequence[Step], k: int):
    """k - 1 more verdicts on the block; a call is confirmed iff every one of them accepts it."""
    refused: set[int] = set()
    n, size = len(steps), len(steps[-1].action.calls)
    judge = run.parts.verifier
    look = judge.for_critical() if isinstance(judge, CriticalJudge) else judge
    for _ in range(k - 1):
        again = await run.verify(steps, look)
        if again.accepted_prefix < n:
            refused.update(range(size))
        elif again.calls is not None:
            refused.update(i for i, ok in enumerate(again.calls) if not ok)
    return (lambda i, c: i not in refused), None


def _without(action: Action, kept: set[str]) -> Action | None:
    """``action`` less the calls that will run anyway (so a repair never repeats an accepted call)."""
    if action.kind is not ActionKind.TOOL:
        return action
    rest = [c for c in action.calls if c.key() not in kept]
    return Action.parallel(rest) if rest else None
