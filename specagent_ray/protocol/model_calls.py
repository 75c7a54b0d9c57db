"""The guarded ways to ask a model: a policy for an action, a verifier for a verdict. Each call is
recorded (ledger, span) and its output is never trusted: a malformed proposal is None (nothing runs), a
verdict is checked against its block, and the strong and the mid verifier share one skeleton (``ask``) and
differ only in what they make of a missing verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .interfaces import EngineUnavailable, MalformedOutput, Purpose, Verifier
from .runtime import Run
from .types import Author, Proposal, Review, Step, Verdict


async def propose(run: Run, role: Author, purpose: Purpose, draft: Sequence[Step] = (),
                  feedback: str | None = None) -> Proposal | None:
    """Ask a policy for the next action and record the call. None if its output was malformed (noted, and
    kept in ``run.last_malformed``); ``EngineUnavailable`` propagates."""
    policy = run.parts.weak if role == "weak" else run.parts.strong
    with run.recorder.model_call(role, purpose) as call:
        try:
            proposal = await policy.propose(run.history, draft, feedback)
        except MalformedOutput as exc:
            call.spent(exc)  # a backend's exception may carry the usage spent
            run.last_malformed = f"{role} policy output was malformed: {exc}"
            run.note("malformed_output", run.last_malformed)
            call.failed("malformed_output")
            return None
        call.spent(proposal)
        return proposal


@dataclass(frozen=True, slots=True)
class NoVerdict:
    """Why a verifier call gave no verdict to check: it was unavailable, or its output was malformed
    (``detail``: the exception's text, or the type of what came instead of a verdict)."""

    unavailable: bool
    detail: str


async def ask(run: Run, role: Author, verifier: Verifier, block: Sequence[Step]) -> Review | NoVerdict:
    """The verify skeleton: one recorded call of ``verifier`` over H + block, answering its review (whose
    verdict is a ``Verdict``, not yet checked) or why there is none."""
    with run.recorder.model_call(role, "verify") as call:
        try:
            review = await verifier.verify(run.history, block)
        except MalformedOutput as exc:
            call.spent(exc)
            return NoVerdict(False, str(exc))
        except EngineUnavailable as exc:
            call.failed("engine_unavailable")
            return NoVerdict(True, str(exc))
        call.spent(review)
    if not isinstance(review.verdict, Verdict):
        return NoVerdict(False, type(review.verdict).__name__)
    return review


def checked(verdict: Verdict, block: Sequence[Step]) -> Verdict:
    """The verdict in its normal form for this block (a malformed one becomes a full rejection)."""
    staged = block[-1].action.calls if block and block[-1].staged else ()
    return verdict.checked(len(block), max(len(staged), 1))


async def verify(run: Run, block: Sequence[Step], verifier: Verifier | None = None) -> Verdict:
    """One strong call over H + block (by ``verifier``, default the run's). Malformed output is a full
    rejection, never trusted; an unavailable verifier is one too (no repair), so the strong policy writes
    the step instead."""
    answer = await ask(run, "strong", verifier or run.parts.verifier, block)
    if isinstance(answer, NoVerdict):
        if answer.unavailable:
            run.note("verifier_fallback", answer.detail)
            return Verdict(0, f"verifier unavailable: {answer.detail}")
        return Verdict(0, f"malformed verdict: {answer.detail}")
    return checked(answer.verdict, block)


async def verify_mid(run: Run, block: Sequence[Step]) -> tuple[Verdict, float] | str:
    """One mid-verifier call over H + block: its checked verdict and confidence, or why it cannot be used
    (malformed, unavailable, no confidence in 0..1): the chain escalates then, never accepts."""
    assert run.parts.mid is not None
    answer = await ask(run, "mid", run.parts.mid, block)
    if isinstance(answer, NoVerdict):
        return f"mid verifier unavailable: {answer.detail}" if answer.unavailable else \
            f"malformed mid verdict: {answer.detail}"
    confidence = getattr(answer, "confidence", None)
    if confidence is None:
        return "the mid verifier reported no confidence"
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 <= confidence <= 1.0:
        return f"malformed mid verdict: confidence {confidence!r} is not in 0..1"
    verdict = checked(answer.verdict, block)
    if verdict.reason.startswith("malformed verdict"):  # ours, or the model's own words: escalate either way
        return f"mid: {verdict.reason}"
    return verdict, float(confidence)
