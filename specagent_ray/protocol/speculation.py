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

The loop below is the algorithm's lines and nothing else. What varies around it is in pieces of its own:
who reviews and how (review.py: the mid verifier's chain, the second check), the K controller and the
block's span (hooks.py: they watch, never decide), a partial accept (accept.py), and the strong model's
steps (repair.py).
"""

from __future__ import annotations

from .accept import execute_staged
from .blocks import Block, Ruling
from .hooks import Hooks
from .interfaces import EngineUnavailable
from .model_calls import propose
from .repair import repair, strong_repair, strong_step
from .review import review
from .runtime import Parts, Run, SpecConfig
from .types import ActionKind, Effect, History, Step, Task, Trajectory


async def run_specagent(task: Task, parts: Parts, config: SpecConfig = SpecConfig(),
                        start: History | None = None) -> Trajectory:
    run = Run(task, parts, config, start)
    hooks = Hooks(run)  # the K controller (it picks K) and the block's span: neither decides what runs
    # Invariant: a weak model's write reaches a tool only after the strong model accepts it.
    # The only other way to a write is a strong repair, which is the strong model's own step.
    while run.next_round():
        k = hooks.next_k()
        if k == 0:
            await strong_step(run)
            continue
        with hooks.block():
            block = await draft(run, k)
            hooks.drafted(block)
            if not block.staged:
                await commit_unreviewed(run, block)
                continue
            ruling = await review(run, block.steps)
            hooks.reviewed(block, ruling)
            await commit(run, block, ruling)
    return run.trajectory()


async def draft(run: Run, k: int) -> Block:
    """Draft up to k steps. Reads run now; the first write is staged and ends the draft."""
    steps: list[Step] = []
    for _ in range(min(k, run.room())):
        try:
            proposal = await propose(run, "weak", "draft", steps)
        except EngineUnavailable as exc:
            return Block(tuple(steps), lost=str(exc))
        if proposal is None:
            return Block(tuple(steps), refused=run.last_malformed)
        action = proposal.action
        reason = run.validity.invalid_reason(action)
        if reason is not None:
            run.note("invalid_action", f"weak: {reason}", action)
            return Block(tuple(steps), refused=f"weak policy proposed an invalid action: {reason}")
        if run.tiers.classify(action) is Effect.WRITE:
            steps.append(Step(action, None, "weak", Effect.WRITE))
            run.note("staged", "", action)
            return Block(tuple(steps), staged=True)
        observation = await run.executor.observe(action)
        steps.append(Step(action, observation, "weak", Effect.READ))
        run.note("drafted", "", action)
        if action.kind is ActionKind.MESSAGE:
            break  # a sent message is a block boundary: it can never be dropped
    return Block(tuple(steps))


async def commit_unreviewed(run: Run, block: Block) -> None:
    """A block with nothing staged: its reads commit without review (reads are reversible; a full K-read
    block), and a refused last proposal is replaced by a strong step. A drafter lost mid-block drops the
    block instead, reads included, and drafting restarts from H."""
    if block.lost is not None:
        run.note("redraft", block.lost)
        return
    run.commit(block.steps)
    if block.refused is not None:
        await strong_repair(run, block.refused)


async def commit(run: Run, block: Block, ruling: Ruling) -> None:
    """Commit the accepted prefix; execute the staged write only if the whole block was accepted (of a
    parallel staged action only the calls the verdict accepted: accept.py); else drop the rest and repair."""
    verdict = ruling.verdict
    j, n = verdict.accepted_prefix, len(block.steps)
    run.note("accepted", f"{j}/{n}")
    if j == n:
        run.commit(block.steps[:-1])
        await execute_staged(run, block.steps[-1].action, ruling)
        return
    run.commit(block.steps[:j])
    run.note("rejected", verdict.reason, block.steps[j].action)
    await repair(run, verdict, judge=ruling.judge)
