"""Algorithm 1 of the paper: trajectory-level speculation with semantic verification.

    H <- (u)
    repeat
        K <- the block's draft cap (SpecConfig.k, or a speculation controller's choice in 0..k).
        if K = 0: the strong policy writes the step itself (as in Strong-only); continue.
        draft: the weak policy proposes up to K steps from H ⊕ draft.
               a READ is executed at once and (a, o) joins the draft;
               the first WRITE is staged as (a, ⊥) and ends the draft;
               a message to the user ends the draft (sent, or staged if messages are reviewed).
        if the draft holds no staged action: commit it without review; continue.
        verify: (j, r, ã) <- V_S(H, draft), one strong call (review.py: a mid verifier may settle it
                first; a CRITICAL call needs a second check too).
        commit: if j = n, commit the block and execute the staged write.
                else commit the first j steps, drop the rest, and repair:
                ã if valid(ã), else a strong step from (H, r). Repairs are not verified again.
                A parallel staged action with some calls rejected: the accepted calls run as one
                step, the rejected never do, and a repair replaces them.
    until the agent stops, the user stops, or max_steps.

Beyond the paper, and never weakening it: a weak action that fails ``valid()`` is never executed; it
ends the draft (the reads before it commit like a read-only block) and the strong policy writes that
step instead. A malformed verdict is a full rejection (j = 0, no fused repair). A drafter that is lost
mid-block (``EngineUnavailable``) drops the block, reads included, and drafting restarts from H; an
unavailable verifier is a full rejection, so the strong policy writes the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from .interfaces import EngineUnavailable
from .review import Ruling, review
from .runtime import Parts, Run, SpecConfig
from .types import Action, ActionKind, Author, Effect, History, Step, Task, Trajectory, Verdict


@dataclass(frozen=True, slots=True)
class Block:
    """The drafted steps; the last one is staged iff ``staged``. ``refused`` says why the weak
    policy's last proposal was dropped without execution (invalid or malformed), if it was; ``lost``
    says why the drafter went away mid-block, if it did."""

    steps: tuple[Step, ...]
    staged: bool = False
    refused: str | None = None
    lost: str | None = None


async def run_specagent(task: Task, parts: Parts, config: SpecConfig = SpecConfig(),
                        start: History | None = None) -> Trajectory:
    run = Run(task, parts, config, start)
    # Invariant: a weak model's write reaches a tool only after the strong model accepts it.
    # The only other way to a write is a strong repair, which is the strong model's own step.
    while run.next_round():
        k = run.next_k()
        if k == 0:
            await strong_step(run)
            continue
        with run.span("block") as span:
            block = await draft(run, k)
            span.set("specagent.draft_length", len(block.steps))
            if block.lost is not None:
                run.note("redraft", block.lost)  # drafted reads are reversible: drop them, draft again from H
                continue
            run.drafted(block.steps, block.staged)
            if not block.staged:
                run.commit(block.steps)  # reads only: reversible, so no review (a full K-read block)
                if block.refused is not None:
                    await strong_repair(run, block.refused)
                continue
            ruling = await review(run, block.steps)
            span.set("specagent.accepted_prefix", ruling.verdict.accepted_prefix)
            run.reviewed(block.steps, ruling.verdict)
            await commit(run, block, ruling)
    return run.trajectory()


async def draft(run: Run, k: int) -> Block:
    """Draft up to k steps. Reads run now; the first write is staged and ends the draft."""
    steps: list[Step] = []
    for _ in range(min(k, run.room())):
        try:
            proposal = await run.propose("weak", "draft", steps)
        except EngineUnavailable as exc:
            return Block(tuple(steps), lost=str(exc))
        if proposal is None:
            return Block(tuple(steps), refused=run.last_malformed)
        action = proposal.action
        reason = run.invalid_reason(action)
        if reason is not None:
            run.note("invalid_action", f"weak: {reason}", action)
            return Block(tuple(steps), refused=f"weak policy proposed an invalid action: {reason}")
        if run.classify(action) is Effect.WRITE:
            steps.append(Step(action, None, "weak", Effect.WRITE))
            run.note("staged", "", action)
            return Block(tuple(steps), staged=True)
        observation = await run.observe(action)
        steps.append(Step(action, observation, "weak", Effect.READ))
        run.note("drafted", "", action)
        if action.kind is ActionKind.MESSAGE:
            break  # a sent message is a block boundary: it can never be dropped
    return Block(tuple(steps))


async def commit(run: Run, block: Block, ruling: Ruling) -> None:
    """Commit the accepted prefix; execute the staged write only if the whole block was accepted, and of a
    parallel staged action only the calls the verdict accepted."""
    verdict = ruling.verdict
    j, n = verdict.accepted_prefix, len(block.steps)
    run.note("accepted", f"{j}/{n}")
    if j == n:
        run.commit(block.steps[:-1])
        accepted, rejected = verdict.split(block.steps[-1].action)
        if rejected is not None:
            run.note("calls_accepted", f"{len(accepted.calls)}/{len(block.steps[-1].action.calls)}", accepted)
        await run.execute_and_commit(accepted, "weak")  # accepted by the verifier: may now have effect
        if rejected is not None:
            run.note("rejected", verdict.reason, rejected)
            await repair(run, verdict, ran=accepted, judge=ruling.judge)
        return
    run.commit(block.steps[:j])
    run.note("rejected", verdict.reason, block.steps[j].action)
    await repair(run, verdict, judge=ruling.judge)


async def repair(run: Run, verdict: Verdict, ran: Action | None = None, judge: Author = "strong") -> None:
    """Replace what the verdict rejected: its fused repair if valid, else a strong step from (H, r). After
    a partial accept, a fused repair that repeats a call of ``ran`` (the accepted calls) is invalid: that
    call already ran, and running it again would be a second write. A fused repair is its judge's step."""
    if run.termination is not None:
        return
    fused = verdict.repair
    why = None if fused is None else run.invalid_reason(fused) or _repeats(fused, ran)
    if fused is not None and why is None:
        run.note("fused_repair", verdict.reason, fused, judge)
        with run.span("repair", **{"specagent.repair_kind": "fused"}):
            await run.execute_and_commit(fused, judge)
    else:
        if fused is not None:
            run.note("invalid_action", f"fused repair: {why}", fused)
        await strong_repair(run, verdict.reason)


def _repeats(fused: Action, ran: Action | None) -> str | None:
    done = {c.key() for c in ran.calls} if ran is not None else set()
    again = [c.name for c in fused.calls if c.key() in done]
    return f"it repeats {', '.join(again)}, which already ran" if again else None


async def strong_step(run: Run) -> None:
    """The block's cap is 0: the strong policy writes the step, as in Strong-only (a strong repair's equal)."""
    with run.span("strong_step"):
        proposal = await run.propose("strong", "step")
        if proposal is not None:
            run.note("strong_step", "K = 0", proposal.action)
            await run.execute_and_commit(proposal.action, "strong")


async def strong_repair(run: Run, reason: str) -> None:
    """One step written by the strong policy from (H, r). Not verified again."""
    if run.termination is not None:
        return
    with run.span("repair", **{"specagent.repair_kind": "strong"}):
        proposal = await run.propose("strong", "repair", feedback=reason)
        if proposal is not None:
            run.note("strong_repair", reason, proposal.action)
            await run.execute_and_commit(proposal.action, "strong")
