"""The simulated world's mechanisms, pinned one by one (SIMULATED): equivalent-but-different steps,
which semantic acceptance keeps and exact matching rejects (the judge keeps its noise, only the
criterion changes); the style a policy's correct steps vary
in; a self-reported confidence with a chosen AUC; the clarifying questions real agents ask."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import pytest

from specagent_ray.models.scripted import ScriptedPolicy
from specagent_ray.sim.policies import (
    CONFIRM_FORMS,
    ErrorRates,
    SimulatedPolicy,
    SimulatedVerifier,
    Style,
    VerifierRates,
    build_script,
)
from specagent_ray.models.tokens import PrefixCache, TokenModel
from specagent_ray.costs.ledger import Ledger
from specagent_ray.protocol import baselines
from specagent_ray.protocol.baselines import ExactMatchVerifier
from specagent_ray.protocol.runtime import Parts
from specagent_ray.protocol.types import Action, ActionKind, Effect, History, Observation, Step, Task

READ_USER = Action.tool("get_user_details", user_id="mia_1")
READ_RES = Action.tool("get_reservation_details", reservation_id="R1")
CANCEL = Action.tool("cancel_reservation", reservation_id="R1")
EFFECTS = {"get_user_details": Effect.READ, "get_reservation_details": Effect.READ, "cancel_reservation": Effect.WRITE}
NO_ERRORS = VerifierRates(false_accept=0.0, false_reject=0.0, fused_repair=1.0)


def script(clarify: bool = True):
    return build_script([READ_USER, READ_RES, CANCEL], ["refund issued"], lambda a: EFFECTS[a.call.name], (),
                        clarify)


def step(action: Action, effect: Effect, done: bool = True) -> Step:
    return Step(action, Observation("ok") if done else None, "weak", effect)


def verifier(s, style: Style = Style()) -> SimulatedVerifier:
    tm = TokenModel()
    strong = SimulatedPolicy("strong", s, ErrorRates(), tm, PrefixCache(), ("t",), style=style)
    return SimulatedVerifier(s, NO_ERRORS, strong, tm, PrefixCache(), ("t",))


def history_before_confirmation(s) -> History:
    """Everything up to (not including) the confirmation of the cancel: questions asked, reads done."""
    steps = []
    for item, effect in zip(s.items, s.effects):
        if item.kind is ActionKind.MESSAGE and item.text.endswith("Shall I proceed?"):
            break
        steps.append(step(item, effect))
    return History(Task("t", "hi"), tuple(steps))


def test_a_paraphrased_confirmation_is_kept_by_semantic_acceptance_and_rejected_by_exact_matching():
    """The paper's reason exact matching loses: equally valid progress worded unlike the strong model's
    own step is discarded (and rewritten by the strong model) instead of kept."""
    s = script()
    history = history_before_confirmation(s)
    canonical = Action.message(CONFIRM_FORMS[0].format(CANCEL.describe()))
    paraphrase = Action.message(CONFIRM_FORMS[1].format(CANCEL.describe()))
    block = [step(paraphrase, Effect.WRITE, done=False)]

    semantic = asyncio.run(verifier(s).verify(history, block)).verdict
    assert semantic.accepted_prefix == 1  # the same progress, kept

    exact = asyncio.run(ExactMatchVerifier(ScriptedPolicy([canonical])).verify(history, block)).verdict
    assert exact.accepted_prefix == 0 and exact.repair == canonical  # discarded, the strong's own wording instead


def test_reads_in_another_order_are_progress_for_semantic_acceptance_only():
    s = script(clarify=False)
    history = History(Task("t", "hi"), ())
    block = [step(READ_RES, Effect.READ), step(READ_USER, Effect.READ)]  # the gold order is user, then reservation
    assert asyncio.run(verifier(s).verify(history, block)).verdict.accepted_prefix == 2
    exact = asyncio.run(ExactMatchVerifier(ScriptedPolicy([READ_USER])).verify(history, block)).verdict
    assert exact.accepted_prefix == 0
    assert s.pending([step(READ_RES, Effect.READ), step(READ_USER, Effect.READ)]) == [2, 3, 4, 5]


def test_the_simulated_judge_by_exact_match_discards_equivalent_progress_and_repairs_with_its_own():
    """The ablation as the paper runs it: the same judge, only the criterion changed. A paraphrase and a
    read in another order are valid progress; the exact-match judge rejects both and puts the strong
    policy's own step in their place, where the semantic judge keeps them."""
    s = script(clarify=False)
    strong_own = Style(reorder_reads=False)  # the strong policy's own reads come in the script's order
    reordered = [step(READ_RES, Effect.READ), step(READ_USER, Effect.READ)]
    history = History(Task("t", "hi"), ())
    semantic = verifier(s, strong_own)
    exact = semantic.by_exact_match()
    assert (semantic.criterion, exact.criterion) == ("semantic", "exact")
    assert asyncio.run(semantic.verify(history, reordered)).verdict.accepted_prefix == 2
    verdict = asyncio.run(exact.verify(history, reordered)).verdict
    assert verdict.accepted_prefix == 0 and verdict.repair == READ_USER and "not an exact match" in verdict.reason
    in_order = [step(READ_USER, Effect.READ), step(READ_RES, Effect.READ)]
    assert asyncio.run(exact.verify(history, in_order)).verdict.accepted_prefix == 2  # its own steps pass

    s = script()
    history = history_before_confirmation(s)
    paraphrases = [Action.message(f.format(CANCEL.describe())) for f in CONFIRM_FORMS]
    kept = [asyncio.run(verifier(s, strong_own).by_exact_match().verify(history, [step(p, Effect.WRITE, False)]))
            .verdict.accepted_prefix for p in paraphrases]
    assert sorted(kept) == [0, 0, 1]  # only the wording the strong policy itself chose here passes


def test_the_exact_match_judge_keeps_the_semantic_judges_noise_on_wrong_steps():
    """A wrong step the judge misses under one criterion it misses under the other: the ablation changes
    what counts as acceptable, not how well the judge sees errors."""
    s = script()
    wrong = Action.tool("cancel_reservation", reservation_id="R2")
    history = history_before_confirmation(s)
    history = History(history.task, history.steps + (step(s.items[len(history.steps)], Effect.WRITE),))
    lenient = VerifierRates(false_accept=1.0, false_reject=0.0, fused_repair=1.0)
    for rates, prefix in ((lenient, 1), (NO_ERRORS, 0)):
        for judge in (verifier(s), verifier(s).by_exact_match()):
            judge.rates = rates
            assert asyncio.run(judge.verify(history, [step(wrong, Effect.WRITE, done=False)])).verdict.accepted_prefix \
                == prefix, (judge.criterion, rates)


def test_the_exact_ablation_switches_a_judge_that_can_and_compares_steps_otherwise(monkeypatch):
    seen = []

    async def run_specagent(task, parts, config, start):
        seen.append(parts.verifier)

    monkeypatch.setattr(baselines, "run_specagent", run_specagent)
    strong = ScriptedPolicy([READ_USER])
    for judge in (verifier(script()), object()):
        parts = Parts(strong, strong, judge, None, None, Ledger())  # type: ignore[arg-type]
        asyncio.run(baselines.run_specagent_exact(Task("t", "hi"), parts))
    assert isinstance(seen[0], SimulatedVerifier) and seen[0].criterion == "exact"
    assert isinstance(seen[1], ExactMatchVerifier) and seen[1].strong is strong


def test_a_wrong_step_is_still_rejected_by_semantic_acceptance():
    s = script()
    wrong = Action.tool("cancel_reservation", reservation_id="R2")
    history = history_before_confirmation(s)
    history = History(history.task, history.steps + (step(s.items[len(history.steps)], Effect.WRITE),))
    verdict = asyncio.run(verifier(s).verify(history, [step(wrong, Effect.WRITE, done=False)])).verdict
    assert verdict.accepted_prefix == 0 and verdict.repair == CANCEL


def test_the_script_asks_for_each_identifier_once_and_words_messages_several_ways():
    s = script()
    asks = [a.text for a in s.items if a.kind is ActionKind.MESSAGE and a.text.endswith("?")
            and not a.text.endswith("Shall I proceed?")]
    assert asks == ["Could you please give me your user id?", "Could you please give me your reservation id?"]
    assert len(script(clarify=False).items) == len(s.items) - 2
    closing = s.items[-2]
    assert all("refund issued" in form.text for form in s.forms(len(s.items) - 2)) and closing.kind is ActionKind.MESSAGE
    assert len(set(s.forms(len(s.items) - 2))) == 3


def test_a_policys_style_varies_its_correct_steps_without_errors():
    s = script(clarify=False)
    seen = set()
    for seed in range(60):
        p = SimulatedPolicy("strong", s, ErrorRates(), TokenModel(), PrefixCache(), (seed,),
                            style=Style(reorder_reads=True, explore_read=0.0))
        action, erred = p.next_action(())
        assert not erred
        seen.add(action.key())
    assert seen == {READ_USER.key(), READ_RES.key()}  # either needed read first
    explorer = SimulatedPolicy("strong", s, ErrorRates(), TokenModel(), PrefixCache(), (0,),
                               style=Style(reorder_reads=False, explore_read=1.0))
    done = (step(READ_USER, Effect.READ),)
    assert explorer.next_action(done) == (READ_USER, False)  # a harmless re-read, not an error


@pytest.mark.parametrize("auc", [0.55, 0.65, 0.86])
def test_confidence_separates_correct_steps_from_errors_with_the_chosen_auc(auc):
    p = SimulatedPolicy("weak", script(), ErrorRates(), TokenModel(), PrefixCache(), confidence_auc=auc)
    rng = random.Random(1)
    right = [p.confidence(False, rng) for _ in range(3000)]
    wrong = [p.confidence(True, rng) for _ in range(3000)]
    pairs = random.Random(2)
    measured = sum(pairs.choice(right) > pairs.choice(wrong) for _ in range(40000)) / 40000
    assert abs(measured - auc) < 0.02


@pytest.mark.parametrize("correlation", [0.0, 0.8])
def test_errors_of_the_two_models_are_correlated_and_alike_where_both_err(correlation):
    """A state that trips one model tends to trip the other the same way; at 0 they are independent."""
    s = script(clarify=False)
    rates = ErrorRates(premature_stop=0.2)
    both = weak_only = strong_only = 0
    for seed in range(3000):
        def policy(role: str) -> SimulatedPolicy:
            return SimulatedPolicy(role, s, rates, TokenModel(), PrefixCache(), (seed,), style=Style(False, 0.0),
                                   error_correlation=correlation)
        w, sw = policy("weak").next_action(())
        t, st = policy("strong").next_action(())
        both += sw and st
        weak_only += sw and not st
        strong_only += st and not sw
        if sw and st:
            assert w == t  # the same mistake
    p_weak, p_strong = (both + weak_only) / 3000, (both + strong_only) / 3000
    assert abs(p_weak - 0.2) < 0.03 and abs(p_strong - 0.2) < 0.03  # each model's own rate is unchanged
    joint = both / 3000
    if correlation == 0.0:
        assert abs(joint - p_weak * p_strong) < 0.02
    else:
        assert joint > 2 * p_weak * p_strong  # far more often together than by chance


def _stops(errors_by: str, seed: int, steps: list[Step], calls: int = 0) -> bool:
    """Whether a policy whose errors mix the shared draw and its own (correlation 0.5) stops early here,
    on its ``calls + 1``-th call."""
    s = script(clarify=False)
    policy = SimulatedPolicy("weak", s, ErrorRates(premature_stop=0.5), TokenModel(), PrefixCache(), (seed,),
                             error_correlation=0.5, errors_by=errors_by)
    policy.calls = calls
    return policy.next_action(steps)[0].kind is ActionKind.STOP


@pytest.mark.parametrize("errors_by, same", [("stage", True), ("history", False)])
def test_errors_by_stage_trips_a_redraft_where_the_first_draft_tripped(errors_by, same):
    """Keyed by stage, neither an extra read, nor another order of reads, nor a retry changes what the
    stage does to a model (a block discarded before its mistake was judged brings the mistake back);
    keyed by the history, each of these draws afresh."""
    done = [step(READ_USER, Effect.READ)]
    variants = [done + [step(READ_USER, Effect.READ)],  # an exploring re-read
                [step(READ_RES, Effect.READ), step(READ_USER, Effect.READ)]]  # reads in another order
    for seed in range(40):
        first = _stops(errors_by, seed, done)
        agree = [_stops(errors_by, seed, v) == first for v in variants] + [_stops(errors_by, seed, done, 7) == first]
        if not all(agree):
            assert not same
            return
    assert same


def test_a_new_stage_begins_only_when_a_write_is_executed():
    """The stage is the count of executed tool writes: a staged write, a message or a read leaves it."""
    from specagent_ray.sim.policies import stage

    s = script(clarify=False)
    reads = [step(READ_USER, Effect.READ), step(READ_RES, Effect.READ), step(s.items[2], Effect.WRITE)]
    assert stage(reads) == 0  # the confirmation is a message, not a tool write
    assert stage(reads + [step(CANCEL, Effect.WRITE, done=False)]) == 0  # staged, never executed
    assert stage(reads + [step(CANCEL, Effect.WRITE)]) == 1
    draws = [_stops("stage", seed, reads + [step(CANCEL, Effect.WRITE)]) == _stops("stage", seed, reads)
             for seed in range(40)]
    assert not all(draws)  # the next stage draws afresh


def test_an_early_stop_is_tried_at_a_stages_opening_only():
    """Per stage, a model that would stop early does so at the stage's opening (the start, or right after
    an executed write); once a step follows (a strong repair of the caught stop), it carries on."""
    s = script(clarify=False)
    policy = SimulatedPolicy("weak", s, ErrorRates(premature_stop=1.0), TokenModel(), PrefixCache(), ("t",))
    assert policy.next_action(())[0].kind is ActionKind.STOP
    repaired = [Step(READ_USER, Observation("ok"), "strong", Effect.READ)]
    assert policy.next_action(repaired)[0].kind is not ActionKind.STOP
    written = [step(READ_USER, Effect.READ), step(READ_RES, Effect.READ), step(s.items[2], Effect.WRITE),
               step(CANCEL, Effect.WRITE)]
    assert policy.next_action(written)[0].kind is ActionKind.STOP  # the next stage opens
    per_step = replace(policy, errors_by="history")
    assert per_step.next_action(repaired)[0].kind is ActionKind.STOP  # history keying: a hazard every step


@pytest.mark.parametrize("errors_by, consistent", [("stage", True), ("history", False)])
def test_errors_by_stage_makes_the_judge_miss_a_wrong_step_every_time_or_never(errors_by, consistent):
    s = script()
    history = history_before_confirmation(s)
    history = History(history.task, history.steps + (step(s.items[len(history.steps)], Effect.WRITE),))
    tm = TokenModel()
    strong = SimulatedPolicy("strong", s, ErrorRates(), tm, PrefixCache(), ("t",), errors_by=errors_by)
    judge = SimulatedVerifier(s, VerifierRates(false_accept=0.5, false_reject=0.0), strong, tm, PrefixCache(), ("t",))
    wrong = [step(Action.tool("cancel_reservation", reservation_id="R2"), Effect.WRITE, done=False)]
    verdicts = {asyncio.run(judge.verify(history, wrong)).verdict.accepted_prefix for _ in range(20)}
    assert (len(verdicts) == 1) is consistent
