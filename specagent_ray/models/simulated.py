"""Simulated policies and verifier (SIMULATED: never claims about a real model).

A ``GoldScript`` is the path a perfect agent takes through one task: the task's gold tool calls, a
confirmation message before each write, a closing message that carries the facts the task expects
the agent to communicate, and a stop. ``SimulatedPolicy`` replays that script through a seeded error
model; ``SimulatedVerifier`` judges drafts *semantically* against it. Every draw is a pure function of
(seed, task, trial, role, the model's call count, state): runs are reproducible, and a retry at an
unchanged state draws afresh instead of repeating its mistake forever.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..protocol.types import (
    Action, ActionKind, Effect, History, Proposal, Review, Step, Verdict,
)
from .tokens import PrefixCache, TokenModel

SIMULATED = "simulated"


@dataclass(frozen=True)
class GoldScript:
    """The ordered items of a perfect run, each with its effect."""

    items: tuple[Action, ...]
    effects: tuple[Effect, ...]
    spare_reads: tuple[Action, ...]  # harmless reads a distracted agent might add

    def pending(self, steps: Sequence[Step]) -> list[int]:
        """Indices of script items not yet done in ``steps`` (executed or sent; staged steps are not done).
        A gold call that returns an error is done too: some tau2 gold actions fail by design."""
        done = Counter(s.action.key() for s in steps if s.observation is not None)
        left = []
        for i, item in enumerate(self.items):
            k = item.key()
            if done[k] > 0:
                done[k] -= 1
            else:
                left.append(i)
        return left


def build_script(gold_calls: Sequence[Action], communicate: Sequence[str], effect: Callable[[Action], Effect],
                 spare_reads: Sequence[Action]) -> GoldScript:
    items: list[Action] = []
    for call in gold_calls:  # tool calls, and (dual-control domains) messages asking the user to act
        if call.kind is ActionKind.TOOL and effect(call) is Effect.WRITE:
            items.append(Action.message(f"I will now {call.describe()}. Shall I proceed?"))
        items.append(call)
    closing = "Everything is taken care of." + "".join(f" {c}." for c in communicate)
    items += [Action.message(closing), Action.stop()]
    effects = tuple(effect(a) if a.kind is ActionKind.TOOL else Effect.WRITE for a in items)
    reads = [a for a, e in zip(items, effects, strict=False) if e is Effect.READ and a.kind is ActionKind.TOOL]
    return GoldScript(tuple(items), effects, tuple(reads) or tuple(spare_reads))


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


# Calibrated so Strong-only and Weak-only land near the paper's airline Pass@1 (86 / 80); see docs.
STRONG_RATES = ErrorRates(wrong_arg=0.14, needless_read=0.03, skipped_read=0.02, premature_write=0.025,
                          premature_stop=0.025)
WEAK_RATES = ErrorRates(wrong_arg=0.17, needless_read=0.15, skipped_read=0.12, premature_write=0.03,
                        premature_stop=0.02)
# tau2 telecom, calibrated to vendor-reported telecom Pass@1 on the public tau2 leaderboard (as listed by
# agentsdirectory.dev, June 2026): a strong model at 83.0 (Claude Haiku 4.5) and a weak one at 64.4
# (Nemotron 3 Super). The airline strong rates already land at 83.0 on telecom's 114 base tasks x 3
# trials; the weak rates are the airline ones doubled (64.9). See docs/simulation.md.
TELECOM_WEAK_RATES = ErrorRates(wrong_arg=0.34, needless_read=0.30, skipped_read=0.24, premature_write=0.06,
                                premature_stop=0.04)
# BFCL v4 multi-turn, calibrated on the base category (200 cases x 3 trials) to published BFCL-V4 overall
# scores (BFCL does not publish multi-turn alone for these): Qwen3.5-397B-A17B, the paper's strong model,
# 72.9 (llm-stats.com, self-reported) and a small model, LFM2.5-8B-A1B, 49.7 (benchlm.ai snapshot, June
# 2026). The airline rates scaled by 0.58 (strong: 73.2) and 0.8 (weak: 50.2). See docs/benchmarks.md.
BFCL_STRONG_RATES = ErrorRates(wrong_arg=0.0812, needless_read=0.0174, skipped_read=0.0116, premature_write=0.0145,
                               premature_stop=0.0145)
BFCL_WEAK_RATES = ErrorRates(wrong_arg=0.136, needless_read=0.12, skipped_read=0.096, premature_write=0.024,
                             premature_stop=0.016)
DOMAIN_RATES = {"telecom": (STRONG_RATES, TELECOM_WEAK_RATES),  # (strong, weak); other domains: the defaults
                **{f"bfcl-{c}": (BFCL_STRONG_RATES, BFCL_WEAK_RATES)
                   for c in ("base", "miss_func", "miss_param", "long_context")}}


@dataclass(frozen=True)
class VerifierRates:
    """SIMULATED verifier quality: false accepts of bad steps, false rejects of fine ones, and how
    often a rejection carries a fused repair (1 - rho)."""

    false_accept: float = 0.6
    false_reject: float = 0.03
    fused_repair: float = 0.8


def _rng(*state: object) -> random.Random:
    return random.Random("|".join(map(str, state)))


def mutate(action: Action, rng: random.Random, valid: Callable[[Action], bool] = lambda a: True) -> Action:
    """The same tool with one argument changed so that it still passes ``valid`` (a wrong but
    well-formed call). Unchanged if no argument can be changed that way."""
    assert action.call is not None
    keys = sorted(action.call.arguments)
    rng.shuffle(keys)
    for key in keys:
        args = dict(action.call.arguments)
        args[key] = _perturb(args[key], rng)
        wrong = Action.tool(action.call.name, **args)
        if not wrong.same_as(action) and valid(wrong):
            return wrong
    return action


def _perturb(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + rng.choice([1, 2, 5, 10])
    if isinstance(value, str):
        return value[:-1] + ("X" if not value.endswith("X") else "Y") if value else "X"
    if isinstance(value, list):
        return value[:-1] if len(value) > 1 else [_perturb(v, rng) for v in value]
    if isinstance(value, dict) and value:
        k = sorted(value)[0]
        return {**value, k: _perturb(value[k], rng)}
    return value


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
        rng = _rng(*self.seed, self.role, self.calls, len(steps), last)
        u = rng.random()

        def draw(rate: float) -> bool:
            """One slice of [0, 1) per error kind that applies here, so rates are per-step probabilities."""
            nonlocal u
            if u < rate:
                return True
            u -= rate
            return False

        if draw(r.premature_stop):
            return Action.stop(), True
        if draw(r.needless_read):
            spare = self.script.spare_reads
            return spare[rng.randrange(len(spare))], True
        item, effect = items[nxt], effects[nxt]
        is_write = effect is Effect.WRITE and item.kind is ActionKind.TOOL
        if is_write and draw(r.wrong_arg):
            wrong = mutate(item, rng, self.valid)
            return wrong, not wrong.same_as(item)
        if effect is Effect.READ and len(left) > 1 and draw(r.skipped_read):
            return items[left[1]], True
        later = [i for i in left[1:] if effects[i] is Effect.WRITE and items[i].kind is ActionKind.TOOL]
        if not is_write and later and draw(r.premature_write):
            early = items[later[0]]
            return (mutate(early, rng, self.valid) if rng.random() < 0.5 else early), True
        return item, False

    async def propose(self, history: History, draft: Sequence[Step] = (), feedback: str | None = None) -> Proposal:
        steps = history.steps + tuple(draft) if draft else history.steps
        action, erred = self.next_action(steps)
        conf_rng = _rng(*self.seed, self.role, "confidence", self.calls)
        confidence = conf_rng.uniform(0.15, 0.7) if erred else conf_rng.uniform(0.4, 1.0)
        usage = self.tokens.step_usage(self.cache, history, draft, action, self.role)
        return Proposal(action, usage, confidence)


@dataclass
class SimulatedVerifier:
    """Judges a block semantically against the gold script (SIMULATED).

    A read is always acceptable (needed reads in any order, harmless extra reads). A write, message
    or stop is acceptable only if it is the next such item of the script and everything the script
    puts before it is done. Correct steps are falsely rejected, and wrong ones falsely accepted,
    at ``rates``. A rejection carries the strong policy's own step as fused repair at ``rates.fused_repair``.
    """

    script: GoldScript
    rates: VerifierRates
    strong: SimulatedPolicy
    tokens: TokenModel
    cache: PrefixCache
    seed: tuple = ()
    calls: int = field(default=0, init=False)

    def acceptable(self, steps: Sequence[Step], step: Step) -> tuple[bool, str]:
        if step.effect is Effect.READ and step.action.kind is ActionKind.TOOL:
            return True, ""
        left = self.script.pending(steps)
        if not left:
            ok = step.action.kind is ActionKind.STOP
            return ok, "" if ok else "the task is complete; the agent should stop"
        want = self.script.items[left[0]]
        ok = step.action.same_as(want)
        return ok, "" if ok else f"expected {want.describe()} next, not {step.action.describe()}"

    async def verify(self, history: History, block: Sequence[Step]) -> Review:
        self.calls += 1
        j, reason = len(block), ""
        for i, step in enumerate(block):
            context = history.steps + tuple(block[:i])
            ok, why = self.acceptable(context, step)
            rng = _rng(*self.seed, "verifier", self.calls, len(context), step.action.key())
            flip = rng.random() < (self.rates.false_reject if ok else self.rates.false_accept)
            if ok == flip:  # rejected: a bad step caught, or a fine one falsely rejected
                j, reason = i, why or "judged unhelpful (false rejection)"
                break
        repair = None
        if j < len(block) and _rng(*self.seed, "fused", self.calls).random() < self.rates.fused_repair:
            repair, _ = self.strong.next_action(history.steps + tuple(block[:j]))
        usage = self.tokens.verify_usage(self.cache, history, block, repair)
        return Review(Verdict(j, reason, repair), usage)
