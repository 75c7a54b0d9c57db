"""The paper's baselines, run by the same runtime as SpecAgent so their ledgers compare directly.

- Strong-only / Weak-only: one model authors every step.
- AgentCollab: the weak model acts; a step is escalated to the strong model when the weak model's
  self-reported confidence is below a threshold, or right after an error.
- Speculative Actions: the strong model authors every step; the weak model speculates the same step
  concurrently and its guess is kept only on an exact match. The strong decode is hidden, not removed.
- Exact-match ablation: SpecAgent whose verifier accepts a drafted step only if it equals what the
  strong policy itself would write there: the same judge with the exact criterion where the verifier
  can switch (``JudgeWithCriteria``), else ``ExactMatchVerifier``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence

from .interfaces import JudgeWithCriteria, Policy
from .model_calls import propose
from .runtime import Parts, Run, SpecConfig
from .speculation import run_specagent
from .types import History, Review, Step, Task, Trajectory, Usage, Verdict

# (task, parts, config, start): ``start`` is the committed history a served session resumes from.
Method = Callable[[Task, Parts, SpecConfig, History | None], Awaitable[Trajectory]]


async def run_strong_only(task: Task, parts: Parts, config: SpecConfig = SpecConfig(),
                          start: History | None = None) -> Trajectory:
    return await _single_author(task, parts, config, "strong", start)


async def run_weak_only(task: Task, parts: Parts, config: SpecConfig = SpecConfig(),
                        start: History | None = None) -> Trajectory:
    return await _single_author(task, parts, config, "weak", start)


async def _single_author(task: Task, parts: Parts, config: SpecConfig, role: str,
                         start: History | None) -> Trajectory:
    run = Run(task, parts, config, start)
    while run.next_round():
        proposal = await propose(run, role, "step")  # type: ignore[arg-type]
        if proposal is not None:
            await run.execute_and_commit(proposal.action, role)  # type: ignore[arg-type]
    return run.trajectory()


async def run_agentcollab(task: Task, parts: Parts, config: SpecConfig = SpecConfig(),
                          start: History | None = None) -> Trajectory:
    run = Run(task, parts, config, start)
    while run.next_round():
        proposal = await propose(run, "weak", "step")
        last = run.history.steps[-1] if run.history.steps else None
        after_error = last is not None and last.observation is not None and last.observation.error
        why = _escalation_reason(run, proposal, after_error)
        if why is None:
            await run.execute_and_commit(proposal.action, "weak")  # type: ignore[union-attr]
            continue
        run.note("escalated", why)
        strong = await propose(run, "strong", "escalate", feedback=why)
        if strong is not None:
            await run.execute_and_commit(strong.action, "strong")
    return run.trajectory()


def _escalation_reason(run: Run, proposal, after_error: bool) -> str | None:
    if proposal is None:
        return "weak output was malformed"
    if after_error:
        return "previous step failed"
    if proposal.confidence < run.config.escalate_below:
        return f"low confidence {proposal.confidence:.2f}"
    reason = run.validity.invalid_reason(proposal.action)
    return None if reason is None else f"invalid weak action: {reason}"


async def run_speculative_actions(task: Task, parts: Parts, config: SpecConfig = SpecConfig(),
                                  start: History | None = None) -> Trajectory:
    run = Run(task, parts, config, start)
    while run.next_round():
        strong, guess = await asyncio.gather(propose(run, "strong", "step"), propose(run, "weak", "speculate"))
        if strong is None:
            continue
        hit = guess is not None and guess.action.same_as(strong.action)
        run.note("speculation_hit" if hit else "speculation_miss")
        await run.execute_and_commit(strong.action, "strong")
    return run.trajectory()


class ExactMatchVerifier:
    """The ablation's verifier: step i is accepted iff the strong policy, given H ⊕ block[:i],
    proposes exactly the same action. Its own proposal at the first mismatch is the fused repair.
    Every comparison costs a strong decode, which is why the ablation spends more compute."""

    def __init__(self, strong: Policy):
        self.strong = strong

    async def verify(self, history: History, block: Sequence[Step]) -> Review:
        prompt = cached = decode = 0
        for i, step in enumerate(block):
            proposal = await self.strong.propose(history, block[:i])
            u = proposal.usage
            prompt, cached, decode = prompt + u.prompt_tokens, cached + u.cached_prompt_tokens, decode + u.decode_tokens
            if not step.action.same_as(proposal.action):
                usage = Usage(prompt, cached, decode)
                return Review(Verdict(i, "not an exact match", proposal.action), usage)
        return Review(Verdict(len(block)), Usage(prompt, cached, decode))


async def run_specagent_exact(task: Task, parts: Parts, config: SpecConfig = SpecConfig(),
                              start: History | None = None) -> Trajectory:
    """SpecAgent with the exact-match criterion. A judge that can switch its criterion (the simulated
    judge, ``LLMVerifier``, a served session's ``RemoteVerifier``) keeps its judging and changes only the
    criterion; any other verifier is replaced by ``ExactMatchVerifier``, which compares each step with the
    strong policy's own."""
    judge = parts.verifier
    verifier = judge.by_exact_match() if isinstance(judge, JudgeWithCriteria) else ExactMatchVerifier(parts.strong)
    return await run_specagent(task, dataclasses.replace(parts, verifier=verifier), config, start)


def _session(name: str, method: Method) -> Method:
    """The method as a served session: one root span over the whole run."""

    async def session(task: Task, parts: Parts, config: SpecConfig = SpecConfig(),
                      start: History | None = None) -> Trajectory:
        with parts.spans.span("session", {"specagent.method": name, "specagent.task_id": task.id}) as span:
            trajectory = await method(task, parts, config, start)
            span.set("specagent.committed_steps", len(trajectory.steps))
            span.set("specagent.termination", trajectory.termination.value)
            return trajectory

    session.__name__ = session.__qualname__ = method.__name__
    session.__doc__ = method.__doc__
    return session


METHODS: dict[str, Method] = {name: _session(name, fn) for name, fn in {
    "strong": run_strong_only,
    "weak": run_weak_only,
    "specagent": run_specagent,
    "agentcollab": run_agentcollab,
    "specactions": run_speculative_actions,
    "specagent-exact": run_specagent_exact,
}.items()}
