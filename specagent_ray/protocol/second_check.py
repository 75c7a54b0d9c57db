"""The tier rule's second check: every accepted CRITICAL call of the staged step must be confirmed by an
independent judgement (``CriticalCheck``) after its verdict, or it is rejected and never runs.

Guarantees (tests/unit/test_tiers_safety.py): a weak CRITICAL call runs only after two judgements accepted
it, a verdict and then the second check; a malformed or unavailable second check rejects the critical calls
(never an accept); a repair never repeats a call that runs anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .blocks import Ruling
from .config import CriticalCheck
from .interfaces import CriticalJudge, EngineUnavailable
from .model_calls import propose, verify
from .runtime import Run
from .types import Action, ActionKind, Step, Tier, ToolCall, Verdict

Confirmed = Callable[[int, ToolCall], bool]  # (index in the staged action, call): did the check confirm it


async def second_check(run: Run, steps: Sequence[Step], ruling: Ruling) -> Ruling:
    """Reject every accepted CRITICAL call of the staged step that an independent check does not confirm."""
    verdict, n = ruling.verdict, len(steps)
    staged = steps[-1] if steps and steps[-1].staged else None
    if staged is None or staged.action.kind is not ActionKind.TOOL or verdict.accepted_prefix < n:
        return ruling
    calls = staged.action.calls
    accepted = verdict.calls or (True,) * len(calls)
    critical = [i for i, c in enumerate(calls) if accepted[i] and run.tiers.call_tier(c) is Tier.CRITICAL]
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


async def _agree(run: Run, steps: Sequence[Step]) -> tuple[Confirmed, Action | None]:
    """The strong policy's own step from H and the accepted prefix; a call is confirmed iff it is one of its."""
    try:
        proposal = await propose(run, "strong", "confirm", steps[:-1])
    except EngineUnavailable as exc:
        run.note("verifier_fallback", f"second check: {exc}")
        proposal = None
    if proposal is None:
        return (lambda i, c: False), None
    own = proposal.action
    theirs = {c.key() for c in own.calls} if own.kind is ActionKind.TOOL else set()
    return (lambda i, c: c.key() in theirs), own


async def _verdicts(run: Run, steps: Sequence[Step], k: int) -> tuple[Confirmed, Action | None]:
    """k - 1 more verdicts on the block; a call is confirmed iff every one of them accepts it."""
    refused: set[int] = set()
    n, size = len(steps), len(steps[-1].action.calls)
    judge = run.parts.verifier
    look = judge.for_critical() if isinstance(judge, CriticalJudge) else judge
    for _ in range(k - 1):
        again = await verify(run, steps, look)
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
