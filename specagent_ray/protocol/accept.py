"""Running the staged step of a block whose whole prefix was accepted (j = n): all of it, or, when the
verdict answered call by call (a parallel staged action), only the accepted calls, as one weak step; the
rejected calls never run, and a repair replaces them as a step of its own."""

from __future__ import annotations

from .blocks import Ruling
from .repair import repair
from .runtime import Run
from .types import Action


async def execute_staged(run: Run, staged: Action, ruling: Ruling) -> None:
    """Execute what the verdict accepted of ``staged``; repair the calls it rejected, never repeating one
    that ran."""
    verdict = ruling.verdict
    accepted, rejected = verdict.split(staged)
    if rejected is not None:
        run.note("calls_accepted", f"{len(accepted.calls)}/{len(staged.calls)}", accepted)
    await run.execute_and_commit(accepted, "weak")  # accepted by the verifier: may now have effect
    if rejected is not None:
        run.note("rejected", verdict.reason, rejected)
        await repair(run, verdict, ran=accepted, judge=ruling.judge)
