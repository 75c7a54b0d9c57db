"""Parallel tool calls in Algorithm 1: an action may hold several calls. Its reads run together; an action
with a write is staged whole, and one verdict accepts or rejects each staged call. A weak write reaches a
tool only after the verifier accepted that call."""

from __future__ import annotations

import asyncio

import pytest

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import METHODS, Action, Effect, Parts, SpecConfig, Task, Verdict
from specagent_ray.protocol.types import Observation, Step, ToolCall
from specagent_ray.serve.log.wire import action_dict, action_from, step_dict, step_from
from specagent_ray.tools.scripted import InMemoryTools, ToolSpec, object_schema

R1, R2 = ToolCall("lookup", {"id": "a"}), ToolCall("lookup", {"id": "b"})
W1, W2, W3 = (ToolCall("refund", {"id": i, "amount": 5}) for i in ("a", "b", "c"))
STOP = Action.stop()


class ConcurrentTools(InMemoryTools):
    """Counts how many calls are in flight at once; each call yields to the loop twice."""

    def __init__(self, specs):
        super().__init__(specs)
        self.in_flight = self.most_in_flight = 0

    async def execute(self, call):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.in_flight -= 1
        return await super().execute(call)


def make(weak=(), strong=(), verdicts=(), **cfg):
    tools = ConcurrentTools({
        "lookup": ToolSpec(Effect.READ, object_schema(id="string"), lambda id: f"record {id}"),
        "refund": ToolSpec(Effect.WRITE, object_schema(id="string", amount="integer")),
    })
    parts = Parts(ScriptedPolicy(weak), ScriptedPolicy(strong), ScriptedVerifier(verdicts), tools,
                  ScriptedUser(), Ledger())
    return parts, SpecConfig(**{"parallel_calls": True, **cfg})


async def run(parts, config):
    return await METHODS["specagent"](Task("t", "help"), parts, config)


def test_a_single_call_action_keeps_its_shape_and_key():
    one = Action.parallel([R1])
    assert one == Action.tool("lookup", id="a") and one.calls == (R1,) and one.more == ()
    assert one.key() == 'tool:lookup{"id": "a"}'
    both = Action.parallel([R1, R2])
    assert both.calls == (R1, R2) and both.key() != Action.parallel([R2, R1]).key()
    assert both.key() not in {one.key(), Action.tool("lookup", id="b").key()}
    with pytest.raises(ValueError):
        Action.parallel([])


async def test_the_reads_of_one_action_run_together_and_commit_as_one_step():
    parts, cfg = make(weak=[Action.parallel([R1, R2]), STOP])
    traj = await run(parts, cfg)
    assert parts.tools.executed == [R1, R2] and parts.tools.most_in_flight == 2
    step = traj.steps[0]
    assert step.action.calls == (R1, R2) and step.effect is Effect.READ
    assert [p.content for p in step.observation.parts] == ["record a", "record b"]
    assert "record a" in step.observation.content and "record b" in step.observation.content


async def test_an_action_with_a_write_is_staged_whole_and_none_of_its_calls_runs_before_the_verdict():
    parts, cfg = make(weak=[Action.parallel([R1, W1])], verdicts=[Verdict(0, "no")], strong=[STOP])
    traj = await run(parts, cfg)
    assert parts.tools.executed == []  # not even the read inside the staged action
    assert parts.verifier.calls[0][1][-1].staged


async def test_one_rejected_call_of_a_parallel_write_never_runs_and_the_accepted_ones_run_once():
    staged = Action.parallel([W1, W2, W3])
    parts, cfg = make(weak=[Action.tool("lookup", id="a"), staged, STOP],
                      verdicts=[Verdict(2, "b is not owed a refund", calls=(True, False, True))],
                      strong=[Action.message("b was not refunded")])
    traj = await run(parts, cfg)
    writes = [c for c in parts.tools.executed if c.name == "refund"]
    assert writes == [W1, W3]  # once each, W2 never
    committed = [s.action for s in traj.steps]
    assert committed[1].calls == (W1, W3) and traj.steps[1].author == "weak"
    assert committed[2] == Action.message("b was not refunded") and traj.steps[2].author == "strong"
    assert parts.strong.calls[0][2] == "b is not owed a refund"  # the repair is written from (H, r)
    assert traj.count("rejected") == 1 and traj.count("calls_accepted") == 1


async def test_a_fused_repair_replaces_the_rejected_call():
    fused = Action.tool("refund", id="b", amount=3)
    parts, cfg = make(weak=[Action.parallel([W1, W2]), STOP],
                      verdicts=[Verdict(1, "b gets 3", fused, calls=(True, False))])
    traj = await run(parts, cfg)
    assert [c for c in parts.tools.executed] == [W1, fused.call]
    assert [s.author for s in traj.steps[:2]] == ["weak", "strong"] and not parts.strong.calls


@pytest.mark.parametrize("calls", [(True,), (True, True, True), (1, 0), ("yes", "no"), (True, None)])
async def test_a_malformed_per_call_verdict_is_a_full_rejection_and_nothing_staged_runs(calls):
    parts, cfg = make(weak=[Action.parallel([W1, W2])], verdicts=[Verdict(1, "", calls=calls)], strong=[STOP])
    traj = await run(parts, cfg)
    assert parts.tools.executed == []
    assert any(e.kind == "rejected" and "malformed verdict" in e.detail for e in traj.events)


async def test_rejecting_every_call_rejects_the_staged_step():
    parts, cfg = make(weak=[Action.parallel([W1, W2])], verdicts=[Verdict(1, "neither", calls=(False, False))],
                      strong=[STOP])
    await run(parts, cfg)
    assert parts.tools.executed == []


async def test_per_call_answers_do_not_reach_a_rejected_prefix():
    """``calls`` speaks of the staged step only: with j < n the staged step is rejected whatever it says."""
    parts, cfg = make(weak=[Action.tool("lookup", id="a"), Action.parallel([W1, W2])],
                      verdicts=[Verdict(0, "wrong order", calls=(True, True))], strong=[STOP])
    await run(parts, cfg)
    assert [c for c in parts.tools.executed if c.name == "refund"] == []


@pytest.mark.parametrize("action,why", [
    (Action.parallel([R1, R1]), "twice"),
    (Action.parallel([R1, ToolCall("lookup", {"id": 3})]), "lookup"),
    (Action.parallel([ToolCall("lookup", {"id": str(i)}) for i in range(9)]), "at most 8"),
])
async def test_an_invalid_parallel_action_is_never_executed(action, why):
    parts, cfg = make(weak=[action], strong=[STOP])
    traj = await run(parts, cfg)
    assert parts.tools.executed == []
    assert any(e.kind == "invalid_action" and why in e.detail for e in traj.events)


async def test_with_parallel_calls_off_an_action_of_several_calls_is_invalid():
    parts, cfg = make(weak=[Action.parallel([R1, R2])], strong=[STOP], parallel_calls=False)
    traj = await run(parts, cfg)
    assert parts.tools.executed == []
    assert any(e.kind == "invalid_action" and "one tool call" in e.detail for e in traj.events)


async def test_a_failing_call_is_an_error_part_and_its_siblings_still_answer():
    parts, cfg = make(weak=[Action.parallel([R1, ToolCall("lookup", {"id": "boom"})]), STOP])
    parts.tools.specs["lookup"].fn = lambda id: (_ for _ in ()).throw(RuntimeError("down")) if id == "boom" else id
    traj = await run(parts, cfg)
    obs = traj.steps[0].observation
    assert [p.error for p in obs.parts] == [False, True] and not obs.error
    assert traj.count("tool_error") == 1


def test_a_parallel_step_round_trips_through_the_log_wire():
    step = Step(Action.parallel([W1, W2]), Observation("[0] ok\n[1] ok", parts=(Observation("ok"), Observation(
        "no", error=True))), "weak", Effect.WRITE)
    assert step_from(step_dict(step)) == step
    assert action_from(action_dict(Action.parallel([R1]))) == Action.tool("lookup", id="a")
    assert "more" not in action_dict(Action.tool("lookup", id="a"))  # single calls keep their old form


async def test_a_fused_repair_that_repeats_an_accepted_call_is_refused_so_no_write_runs_twice():
    """A verifier's repair for the rejected calls of a partial accept must not run an accepted call again
    (it would get a new idempotency key): such a repair is invalid, and the strong policy repairs."""
    parts, cfg = make(weak=[Action.parallel([W1, W2]), STOP],
                      verdicts=[Verdict(1, "b gets 3", Action.parallel([W1, ToolCall("refund", {"id": "b", "amount": 3})]),
                                        calls=(True, False))],
                      strong=[Action.tool("refund", id="b", amount=3)])
    traj = await run(parts, cfg)
    assert [c for c in parts.tools.executed] == [W1, ToolCall("refund", {"id": "b", "amount": 3})]
    assert any(e.kind == "invalid_action" and "already ran" in e.detail for e in traj.events)
