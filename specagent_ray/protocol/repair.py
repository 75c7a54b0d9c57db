"""The strong model's own steps: a repair of what a verdict rejected (its fused repair ã if valid, else a
strong step from (H, r)), and a step written outright when a block's cap is 0. Repairs are not verified
again: they are the strong model's own steps, as in Strong-only."""

from __future__ import annotations

from .model_calls import propose
from .runtime import Run
from .types import Action, Author, Verdict


async def repair(run: Run, verdict: Verdict, ran: Action | None = None, judge: Author = "strong") -> None:
    """Replace what the verdict rejected: its fused repair if valid, else a strong step from (H, r). After
    a partial accept, a fused repair that repeats a call of ``ran`` (the accepted calls) is invalid: that
    call already ran, and running it again would be a second write. A fused repair is its judge's step."""
    if run.termination is not None:
        return
    fused = verdict.repair
    why = None if fused is None else run.validity.invalid_reason(fused) or _repeats(fused, ran)
    if fused is not None and why is None:
        run.note("fused_repair", verdict.reason, fused, judge)
        with run.recorder.span("repair", **{"specagent.repair_kind": "fused"}):
            await run.execute_and_commit(fused, judge)
    else:
        if fused is not None:
            run.note("invalid_action", f"fused repair: {why}", fused)
        await strong_repair(run, verdict.reason)


def _repeats(fused: Action, ran: Action | None) -> str | None:
    done = {c.key() for c in ran.calls} if ran is not None else set()
    again = [c.name for c in fused.calls if c.key() in done]
    return f"it repeats {', '.join(again)}, which already ran" if again else None


async def strong_repair(run: Run, reason: str) -> None:
    """One step written by the strong policy from (H, r). Not verified again."""
    if run.termination is not None:
        return
    with run.recorder.span("repair", **{"specagent.repair_kind": "strong"}):
        proposal = await propose(run, "strong", "repair", feedback=reason)
        if proposal is not None:
            run.note("strong_repair", reason, proposal.action)
            await run.execute_and_commit(proposal.action, "strong")


async def strong_step(run: Run) -> None:
    """The block's cap is 0: the strong policy writes the step, as in Strong-only (a strong repair's equal)."""
    with run.recorder.span("strong_step"):
        proposal = await propose(run, "strong", "step")
        if proposal is not None:
            run.note("strong_step", "K = 0", proposal.action)
            await run.execute_and_commit(proposal.action, "strong")
