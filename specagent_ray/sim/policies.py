"""Simulated policies and verifier (SIMULATED: never claims about a real model).

A ``GoldScript`` is the path a perfect agent takes through one task: the task's gold tool calls, a
confirmation message before each write, a closing message that carries the facts the task expects
the agent to communicate, and a stop. ``SimulatedPolicy`` replays that script through a seeded error
model; ``SimulatedVerifier`` judges drafts *semantically* against it. Every draw is a pure function of
(seed, task, trial, role, state and, for what may vary between retries, the model's call count): runs
are reproducible. Under per-stage draws (the default) a model's harmful mistake belongs to the task's
stage and comes back on a re-draft, while its harmless choices draw afresh, so nothing repeats forever.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Callable, Literal, Sequence

from ..models.tokens import PrefixCache, TokenModel
from ..protocol.types import (
    Action, ActionKind, Effect, History, Proposal, Review, Step, Verdict,
)
from .judge import REPEAT_CORRELATION, Look
from .judge import confidence as _confidence
from .mutate import mutate, mutate_one  # noqa: F401 - where they lived before
from .parallel import judge_calls
from .script import (  # noqa: F401 - the script's names, where they lived before
    ASK_FORMS, CLOSING_FORMS, CONFIRM_FORMS, GoldScript, build_script,
)

SIMULATED = "simulated"


@dataclass(frozen=True)
class ErrorRates:
    """Per-step probabilities of each error kind (SIMULATED).

    wrong_arg: a write with one argument changed. needless_read: an extra, harmless read.
    skipped_read: the next needed read is skipped for now (it may come later, out of order).
    premature_write: a later write is issued before the steps that should precede it, with a wrong
    argument half the time. premature_stop: the agent ends the task with work left.
    """

    wrong_arg: float = 0.0
    needless_read: float = 0.0
    skipped_read: float = 0.0
    premature_write: float = 0.0
    premature_stop: float = 0.0


# Calibrated once for airline and retail together, so Strong-only and Weak-only land near the paper's
# Pass@1 on both (airline 86 / 80, retail 88.6 / 80.4), with the draw of harmful kinds once per stage
# (``errors_by="stage"``, see SimulatedPolicy) and the judge of ``VERIFIER_RATES``; see docs/simulation.md.
STRONG_RATES = ErrorRates(wrong_arg=0.42, needless_read=0.03, skipped_read=0.02, premature_write=0.0125,
                          premature_stop=0.035)
WEAK_RATES = ErrorRates(wrong_arg=0.42, needless_read=0.15, skipped_read=0.12, premature_write=0.015,
                        premature_stop=0.065)
# tau2 telecom, calibrated to vendor-reported telecom Pass@1 on the public tau2 leaderboard (as listed by
# agentsdirectory.dev, June 2026): a strong model at 83.0 (Claude Haiku 4.5) and a weak one at 64.4
# (Nemotron 3 Super), on telecom's 114 base tasks x 3 trials. Recalibrated on 2026-12-01 after the error
# draw began taking harmful kinds first (the old rates had drifted to 88.0 / 62.9): the history-keyed
# airline strong rates' harmful kinds x 1.6 (82.7) and the doubled airline weak rates' x 0.9 (64.9), as
# they stood before airline moved to per-stage draws. See docs/benchmarks.md.
TELECOM_STRONG_RATES = ErrorRates(wrong_arg=0.224, needless_read=0.03, skipped_read=0.02, premature_write=0.02,
                                  premature_stop=0.02)
TELECOM_WEAK_RATES = ErrorRates(wrong_arg=0.306, needless_read=0.30, skipped_read=0.24, premature_write=0.054,
                                premature_stop=0.036)
# BFCL v4 multi-turn, calibrated on the base category (200 cases x 3 trials) to published BFCL-V4 overall
# scores (BFCL does not publish multi-turn alone for these): Qwen3.5-397B-A17B, the paper's strong model,
# 72.9 (llm-stats.com, self-reported) and a small model, LFM2.5-8B-A1B, 49.7 (benchlm.ai snapshot, June
# 2026). The (history-keyed) airline rates scaled by 0.58 (strong) and 0.8 (weak), then, on 2026-12-01
# after the same drift (75.3 / 46.2), their harmful kinds by 1.1 and 0.85 (73.3 / 49.3). See
# docs/benchmarks.md.
BFCL_STRONG_RATES = ErrorRates(wrong_arg=0.0893, needless_read=0.0174, skipped_read=0.0116, premature_write=0.016,
                               premature_stop=0.016)
BFCL_WEAK_RATES = ErrorRates(wrong_arg=0.1156, needless_read=0.12, skipped_read=0.096, premature_write=0.0204,
                             premature_stop=0.0136)
DOMAIN_RATES = {"telecom": (TELECOM_STRONG_RATES, TELECOM_WEAK_RATES),  # (strong, weak); other domains: the defaults
                **{f"bfcl-{c}": (BFCL_STRONG_RATES, BFCL_WEAK_RATES)
                   for c in ("base", "miss_func", "miss_param", "long_context")}}


@dataclass(frozen=True)
class Style:
    """How a policy's correct steps vary (SIMULATED; not errors, so its confidence does not drop):
    it words a message in any of its equivalent forms, takes the reads it needs next in any order
    (``reorder_reads``), and before a step adds a harmless read with probability ``explore_read``
    (re-reading what it read, or a spare read), as real agents look around."""

    reorder_reads: bool = True
    explore_read: float = 0.0


# Calibrated with the error rates (docs/simulation.md): Strong-only takes about the paper's 13.8 strong
# calls per airline task, and AgentCollab's escalations cost about what the paper reports.
STYLE = Style(reorder_reads=True, explore_read=0.42)
CONFIDENCE_AUC = 0.65
ERROR_CORRELATION = 0.8


@dataclass(frozen=True)
class VerifierRates:
    """SIMULATED verifier quality: false accepts of bad steps, false rejects of fine ones, how often a
    rejection carries a fused repair (1 - rho), and how alike a second look at the same block is to the
    first (``judge.Look``; only a critical call's ``verdicts`` check looks twice)."""

    false_accept: float = 0.6
    false_reject: float = 0.03
    fused_repair: float = 0.8
    repeat_correlation: float = REPEAT_CORRELATION


# The judge of the per-stage calibration (airline, retail): its misses recur wherever the same wrong step
# comes back at the same stage, so it catches more of them than the history-keyed judge (0.6) each time.
VERIFIER_RATES = VerifierRates(false_accept=0.3)


def _executed_write(step: Step) -> bool:
    """A tool write that ran (right, wrong or failed); a staged write never executed is not one."""
    return step.observation is not None and step.effect is Effect.WRITE and step.action.kind is ActionKind.TOOL


def stage(steps: Sequence[Step]) -> int:
    """The task's stage after ``steps``: how many tool writes have been executed."""
    return sum(map(_executed_write, steps))


def opens_stage(steps: Sequence[Step]) -> bool:
    """Whether ``steps`` end where a stage opens: nothing after the last executed tool write (or nothing)."""
    return not steps or _executed_write(steps[-1])


def _rng(*state: object) -> random.Random:
    return random.Random("|".join(map(str, state)))


@dataclass
class SimulatedPolicy:
    """Replays a ``GoldScript`` through ``ErrorRates`` (SIMULATED). Ignores repair feedback."""

    role: str
    script: GoldScript
    rates: ErrorRates
    tokens: TokenModel
    cache: PrefixCache
    seed: tuple = ()
    valid: Callable[[Action], bool] = lambda a: True
    style: Style = Style()
    confidence_auc: float = 0.65  # how well its confidence separates correct steps from errors
    # Errors are not independent across models: a state that trips one model tends to trip the other, the
    # same way. Each model's error draw mixes a draw shared by every model at that state with its own
    # (a Gaussian copula of this correlation), and what the error is (the stop, the wrong argument, the
    # extra read) comes from the shared draw, so two models that both err there make the same mistake.
    error_correlation: float = 0.0
    # What the error draw is keyed by. ``"history"``: every call draws afresh, and the shared draw is keyed
    # by the history's length and last step. ``"stage"``: the harmful kinds (early stop, wrong argument,
    # premature write) are one draw per model and stage of the task, the number of writes executed so far
    # (``stage``); a model that would corrupt the stage's write does so whenever it gets there, however it
    # got there and however often it re-drafts (a discarded draft leaves no trace); an early stop or a
    # premature write is tried once, at the stage's opening, so a long lookup adds no chance to stop.
    # Harmless kinds and the style still draw afresh each call.
    errors_by: Literal["history", "stage"] = "stage"
    label: str = field(default=SIMULATED, init=False)
    calls: int = field(default=0, init=False)

    def next_action(self, steps: Sequence[Step]) -> tuple[Action, bool]:
        """The action at this state and whether an error was injected."""
        left = self.script.pending(steps)
        if not left:
            return Action.stop(), False
        items, effects, r = self.script.items, self.script.effects, self.rates
        nxt = left[0]
        self.calls += 1  # part of the state: a retry at the same history draws afresh
        last = steps[-1].action.key() if steps else ""
        own = _rng(*self.seed, self.role, self.calls, len(steps), last)
        if self.errors_by == "stage":
            k = stage(steps)
            rng = _rng(*self.seed, "stage", k)  # what any model meets here (see error_correlation)
            mine = _rng(*self.seed, self.role, "stage", k)
        else:
            rng, mine = _rng(*self.seed, "state", len(steps), last), own
        u = NormalDist().cdf(self.error_correlation * rng.gauss(0, 1)
                             + math.sqrt(1 - self.error_correlation**2) * mine.gauss(0, 1))
        rest = own.random() if self.errors_by == "stage" else None  # the harmless kinds' own draw

        def draw(rate: float) -> bool:
            """One slice of [0, 1) per error kind that applies here, so rates are probabilities per draw."""
            nonlocal u
            if u < rate:
                return True
            u -= rate
            return False

        # Harmful kinds take the lowest slices, in the same order for every model, so that two models
        # whose draws are correlated err in the same way; harmless kinds come after.
        item, effect = self.script.todo(nxt, steps), effects[nxt]
        is_write = effect is Effect.WRITE and item.kind is ActionKind.TOOL
        later = [i for i in left[1:] if effects[i] is Effect.WRITE and items[i].kind is ActionKind.TOOL]
        # Per stage, an early stop or a premature write is tried at the stage's opening only: after a
        # write, a model that thinks it is done (or hurries) shows it at once; once past, it carries on.
        opening = self.errors_by != "stage" or opens_stage(steps)
        if draw(r.premature_stop):
            if opening:
                return Action.stop(), True
        elif is_write and draw(r.wrong_arg):
            wrong = mutate_one(item, rng, self.valid)
            return wrong, not wrong.same_as(item)
        elif not is_write and later and draw(r.premature_write) and opening:
            early = items[later[0]]
            return (mutate_one(early, rng, self.valid) if rng.random() < 0.5 else early), True
        u = u if rest is None else rest
        if draw(r.needless_read):
            spare = self.script.spare_reads
            return spare[rng.randrange(len(spare))], True
        if effect is Effect.READ and len(left) > 1 and draw(r.skipped_read):
            return self.script.todo(left[1], steps), True
        return self._styled(left, steps, own), False

    def _styled(self, left: list[int], steps: Sequence[Step], rng: random.Random) -> Action:
        """The next item, in this policy's own style: an exploring read, a read out of order, or the
        item in one of its equivalent forms."""
        script, style = self.script, self.style
        done = [s.action for s in steps if s.observation is not None and s.action.kind is ActionKind.TOOL
                and s.effect is Effect.READ]
        pool = done or list(script.spare_reads)
        if pool and rng.random() < style.explore_read:
            return pool[rng.randrange(len(pool))]
        reads = []
        for i in left:
            if not (script.effects[i] is Effect.READ and script.items[i].kind is ActionKind.TOOL):
                break
            reads.append(i)
        if style.reorder_reads and len(reads) > 1:
            return script.todo(reads[rng.randrange(len(reads))], steps)
        if script.items[left[0]].more:
            return script.todo(left[0], steps)
        forms = script.forms(left[0])
        return forms[rng.randrange(len(forms))]

    async def propose(self, history: History, draft: Sequence[Step] = (), feedback: str | None = None) -> Proposal:
        steps = history.steps + tuple(draft) if draft else history.steps
        action, erred = self.next_action(steps)
        confidence = self.confidence(erred, _rng(*self.seed, self.role, "confidence", self.calls))
        usage = self.tokens.step_usage(self.cache, history, draft, action, self.role)
        return Proposal(action, usage, confidence)

    def confidence(self, erred: bool, rng: random.Random) -> float:
        """A self-report in (0, 1) whose AUC at telling correct steps from errors is ``confidence_auc``."""
        return _confidence(self.confidence_auc, erred, rng)


@dataclass
class SimulatedVerifier:
    """Judges a block against the gold script (SIMULATED), by one of two acceptance criteria.

    ``semantic`` (SpecAgent's): a read is always acceptable (needed reads in any order, harmless extra
    reads); a write, message or stop only if it is the next such item of the script, in any of its
    equivalent forms, with everything the script puts before it done.
    ``exact`` (the ablation's): a step must also be exactly the strong policy's own step at that point;
    an equally valid step in another form or order is rejected, and the judge's own step is the repair.
    Only the criterion changes: the judge keeps its noise. Wrong steps are falsely accepted, and
    acceptable ones falsely rejected, at ``rates``; a step that is valid but not the judge's own is
    always rejected under ``exact``. A rejection carries the strong policy's own step as fused repair at
    ``rates.fused_repair``. ``name`` keys its noise (the chain's mid judge draws apart from the strong one);
    with ``confidence_auc`` it reports a confidence that separates its right verdicts from its wrong ones.
    """

    script: GoldScript
    rates: VerifierRates
    strong: SimulatedPolicy
    tokens: TokenModel
    cache: PrefixCache
    seed: tuple = ()
    criterion: Literal["semantic", "exact"] = "semantic"
    name: str = "verifier"
    confidence_auc: float | None = None
    calls: int = field(default=0, init=False)
    looks: dict[tuple, int] = field(default_factory=dict, init=False)
    look: int = field(default=1, init=False)

    def _draw(self, *state: object) -> Look:
        """The judge's noise on one question at this look (``judge.Look``)."""
        first = _rng(*self.seed, self.name, *state)
        own = None if self.look == 1 else _rng(*self.seed, self.name, *state, "look", self.look)
        return Look(first, own, self.rates.repeat_correlation)

    def _state(self, context: Sequence[Step]) -> tuple:
        """What the judge's noise on a step is drawn from: each call afresh, or (``errors_by`` stage) the
        task's stage, so that it misses a wrong step again wherever it comes back at that stage."""
        if self.strong.errors_by == "stage":
            return (stage(context),)
        return self.calls, len(context)

    def for_critical(self) -> SimulatedVerifier:
        """The critical second look: the same judge (a second look at one block shares the first's draw at
        ``rates.repeat_correlation``; nothing else about it is simulated)."""
        return self

    def by_exact_match(self) -> SimulatedVerifier:
        """The same judge with the exact-match criterion (the ablation changes the criterion only)."""
        return replace(self, criterion="exact")

    def acceptable(self, steps: Sequence[Step], step: Step) -> tuple[bool, str]:
        """The semantic criterion: whether ``step`` is valid progress after ``steps``, and why not."""
        if step.effect is Effect.READ and step.action.kind is ActionKind.TOOL:
            return True, ""
        left = self.script.pending(steps)
        if not left:
            ok = step.action.kind is ActionKind.STOP
            return ok, "" if ok else "the task is complete; the agent should stop"
        want = self.script.items[left[0]]
        ok = self.script.matches(left[0], step.action)  # semantic: any equivalent form is progress
        return ok, "" if ok else f"expected {want.describe()} next, not {step.action.describe()}"

    async def verify(self, history: History, block: Sequence[Step]) -> Review:
        self.calls += 1
        seen = (len(history), tuple(s.action.key() for s in block))
        self.look = self.looks[seen] = self.looks.get(seen, 0) + 1
        j, reason, repair, calls, erred = self._judge(history, block)
        rejected = j < len(block) or (calls is not None and not all(calls))
        fused_key = ("fused",) if self.name == "verifier" else (self.name, "fused")
        fused = rejected and _rng(*self.seed, *fused_key, self.calls).random() < self.rates.fused_repair
        if not fused:
            repair = None
        elif repair is None and j < len(block):  # the semantic judge: the strong policy's own step there
            repair, _ = self.strong.next_action(history.steps + tuple(block[:j]))
        usage = self.tokens.verify_usage(self.cache, history, block, repair)
        sure = 1.0 if self.confidence_auc is None else _confidence(
            self.confidence_auc, erred, _rng(*self.seed, self.name, "confidence", self.calls))
        return Review(Verdict(j, reason, repair, calls if calls is not None and not all(calls) else None), usage, sure)

    def _judge(self, history: History, block: Sequence[Step]
               ) -> tuple[int, str, Action | None, tuple[bool, ...] | None, bool]:
        """(j, r, the exact judge's own step, per-call answers, whether its noise changed the verdict)."""
        j, reason, repair, calls, erred = len(block), "", None, None, False
        for i, step in enumerate(block):
            context = history.steps + tuple(block[:i])
            judged = self._per_call(context, step)
            if judged is not None:  # a staged parallel write, or a staged part of one: call by call
                calls, reason, repair, erred = judged
                if calls is not None and not any(calls):
                    j, calls = i, None
                break
            ok, why = self.acceptable(context, step)
            own = self.strong.next_action(context)[0] if self.criterion == "exact" else None
            flip = self._draw(*self._state(context), step.action.key()).random() < (
                self.rates.false_reject if ok else self.rates.false_accept)
            erred = erred or flip
            if ok and own is not None and not step.action.same_as(own):
                j, reason, repair = i, f"not an exact match: the strong model would {own.describe()}", own
                break
            if ok == flip:  # rejected: a bad step caught, or a fine one falsely rejected
                j, reason, repair = i, why or "judged unhelpful (false rejection)", own
                break
        return j, reason, repair, calls, erred

    def _per_call(self, context: Sequence[Step], step: Step
                  ) -> tuple[tuple[bool, ...] | None, str, Action | None, bool] | None:
        """The semantic judge of a staged write that is, or is part of, a parallel gold item: each call is
        acceptable iff it is one of the item's calls not done yet, and the judge's noise is drawn per call.
        None where the step is judged whole (``acceptable``)."""
        if self.criterion != "semantic" or not step.staged or step.action.kind is not ActionKind.TOOL:
            return None
        left = self.script.pending(context)
        want = self.script.todo(left[0], context) if left else None
        if want is None or want.kind is not ActionKind.TOOL or not (self.script.items[left[0]].more or step.action.more):
            return None
        draw = lambda c: self._draw(*self._state(context), "call", c.key())  # noqa: E731
        calls, reason, repair = judge_calls(want, step.action, self.rates, draw)
        truth, _, _ = judge_calls(want, step.action, VerifierRates(0.0, 0.0), draw)
        return calls, reason, repair, calls != truth
