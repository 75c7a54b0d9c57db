"""Parallel gold (SIMULATED): which reads of a gold path join one parallel action, and when a script's
parallel item is done."""

from __future__ import annotations

from specagent_ray.sim.parallel import depends, group_calls
from specagent_ray.sim.script import build_script
from specagent_ray.protocol.types import Action, ActionKind, Effect, Observation, Step, ToolCall

EFFECT = {"get_user": Effect.READ, "get_order": Effect.READ, "refund": Effect.WRITE}


def effect(a: Action) -> Effect:
    return EFFECT[a.call.name]


def order(i: str) -> Action:
    return Action.tool("get_order", order_id=i)


USER = Action.tool("get_user", user_id="mia_li")


def test_a_read_depends_on_an_earlier_one_whose_output_shows_its_argument():
    assert depends(order("#W123").call, '{"orders": ["#W123", "#W456"]}')
    assert not depends(order("#W789").call, '{"orders": ["#W123", "#W456"]}')
    assert not depends(Action.tool("get_order", order_id="1", n=2).call, "order 1 of 2")  # too short to tell


def test_independent_reads_join_one_action_and_a_dependent_read_writes_and_messages_break_it():
    outputs = ['{"orders": ["#W1x", "#W2x"]}', "o1", "o2", "o3", None, "done", "o4"]
    actions = [USER, order("#W1x"), order("#W2x"), order("#W3x"), Action.message("ok?"),
               Action.tool("refund", order_id="#W1x"), order("#W4x")]
    got = group_calls(actions, outputs, lambda a: effect(a) if a.kind is ActionKind.TOOL else Effect.WRITE)
    # #W1x and #W2x come from get_user's output: they start a new group after it; #W3x joins them
    assert got == [USER, Action.parallel([order("#W1x").call, order("#W2x").call, order("#W3x").call]),
                   Action.message("ok?"), Action.tool("refund", order_id="#W1x"), order("#W4x")]
    assert [c for a in got for c in a.calls] == [c for a in actions for c in a.calls]  # nothing lost or added


def test_a_group_holds_at_most_cap_calls_and_never_the_same_call_twice():
    reads = [order(f"#W{i}x") for i in range(6)] + [order("#W5x")]
    got = group_calls(reads, ["-"] * 7, effect, cap=4)
    assert [len(a.calls) for a in got] == [4, 2, 1]


def test_a_parallel_item_is_done_by_one_step_or_by_its_calls_one_by_one_and_not_by_some_of_them():
    group = Action.parallel([order("#W1x").call, order("#W2x").call])
    script = build_script([USER, group, Action.tool("refund", order_id="#W1x")], [], effect, (), clarify=False)
    i = script.items.index(group)
    done = lambda *actions: [Step(a, Observation("ok"), "weak", Effect.READ) for a in actions]  # noqa: E731
    assert i in script.pending(done(USER))
    assert i not in script.pending(done(USER, group))
    assert i not in script.pending(done(USER, order("#W2x"), order("#W1x")))
    assert i in script.pending(done(USER, order("#W1x")))
    assert i in script.pending(done(USER) + [Step(group, None, "weak", Effect.READ)])  # staged is not done


def test_a_needless_read_is_one_call_and_a_group_is_asked_for_as_its_calls_would_be():
    calls = [ToolCall("get_order", {"order_id": "#W1x"}), ToolCall("get_order", {"order_id": "#W2x"})]
    group = Action.parallel(calls)
    script = build_script([group], [], effect, ())
    assert all(not a.more for a in script.spare_reads)
    asks = [i for i, a in enumerate(script.items) if a.kind is ActionKind.MESSAGE and "order id" in a.text]
    one_by_one = build_script([Action(ActionKind.TOOL, c) for c in calls], [], effect, ())
    assert len(asks) == 2 == sum(a.kind is ActionKind.MESSAGE and "order id" in a.text for a in one_by_one.items)
    assert max(asks) < script.items.index(group)


def refund(order: str, amount: int = 5) -> Action:
    return Action.tool("refund", order_id=order, amount=amount)


def test_independent_writes_join_and_writes_on_one_object_or_mixed_with_reads_do_not():
    actions = [refund("#W1x"), refund("#W2x"), refund("#W2x", 7), order("#W3x"), refund("#W4x")]
    got = group_calls(actions, ["ok"] * 5, effect)
    assert got == [Action.parallel([refund("#W1x").call, refund("#W2x").call]), refund("#W2x", 7), order("#W3x"),
                   refund("#W4x")]
    assert group_calls(actions[:2], ["ok"] * 2, effect, writes=False) == actions[:2]


def test_a_write_group_is_confirmed_once_and_a_partly_done_group_asks_only_for_the_rest():
    group = Action.parallel([refund("#W1x").call, refund("#W2x").call])
    script = build_script([group], [], effect, (), clarify=False)
    confirmations = [a for a in script.items if a.kind is ActionKind.MESSAGE and "Shall I proceed" in a.text]
    assert len(confirmations) == 1 and "#W1x" in confirmations[0].text and "#W2x" in confirmations[0].text
    i = script.items.index(group)
    first = [Step(confirmations[0], Observation("yes"), "weak", Effect.WRITE),
             Step(refund("#W2x"), Observation("ok"), "weak", Effect.WRITE)]
    assert script.todo(i, first) == refund("#W1x")
    assert script.todo(i, first[:1]) == group


def test_the_simulated_judge_answers_call_by_call_and_repairs_only_what_it_rejected():
    from specagent_ray.sim.parallel import judge_calls
    from specagent_ray.sim.policies import VerifierRates, mutate_one, _rng

    exact = VerifierRates(false_accept=0.0, false_reject=0.0)
    want = Action.parallel([refund("#W1x").call, refund("#W2x").call])
    rng = lambda c: _rng("t", c.key())  # noqa: E731
    assert judge_calls(want, want, exact, rng) == ((True, True), "", None)
    wrong = Action.parallel([refund("#W1x").call, refund("#W2x", 50).call])
    answers, reason, repair = judge_calls(want, wrong, exact, rng)
    assert answers == (True, False) and repair == refund("#W2x") and "#W2x" in reason
    twice = Action.parallel([refund("#W1x").call, refund("#W1x").call])
    assert judge_calls(want, twice, exact, rng)[0] == (True, False)  # a wanted call counts once
    always_wrong = VerifierRates(false_accept=1.0, false_reject=0.0)
    assert judge_calls(want, wrong, always_wrong, rng)[0] == (True, True)  # the judge's noise, per call
    one = mutate_one(want, _rng("m"))
    assert sum(a != b for a, b in zip(one.calls, want.calls)) == 1


def test_the_judge_accepts_the_last_call_of_a_partly_done_group_and_never_repairs_with_what_ran():
    from specagent_ray.sim.gold import script_models, SimSettings
    from specagent_ray.sim.policies import ErrorRates, VerifierRates
    from specagent_ray.protocol.types import History, Task
    import asyncio

    group = Action.parallel([refund("#W1x").call, refund("#W2x").call])
    script = build_script([group], [], effect, (), clarify=False)
    exact = SimSettings(weak=ErrorRates(), strong=ErrorRates(),
                        verifier=VerifierRates(false_accept=0.0, false_reject=0.0, fused_repair=1.0))
    _, _, judge = script_models(script, exact, ("t",), 100, lambda a: True)
    confirm = script.items[0]
    done = (Step(confirm, Observation("yes"), "weak", Effect.WRITE), Step(refund("#W2x"), Observation("ok"), "weak",
                                                                          Effect.WRITE))
    history = History(Task("t", "x")).commit(done)
    review = asyncio.run(judge.verify(history, [Step(refund("#W1x"), None, "weak", Effect.WRITE)]))
    assert review.verdict.accepted_prefix == 1 and review.verdict.calls is None
    extra = Action.parallel([refund("#W1x").call, refund("#W2x").call, refund("#W9x").call])
    review = asyncio.run(judge.verify(History(Task("t", "x")).commit(done[:1]), [Step(extra, None, "weak", Effect.WRITE)]))
    assert review.verdict.calls == (True, True, False) and "not needed" in review.verdict.reason
    assert review.verdict.repair is None  # never the accepted calls again
