"""Risk tiers in the loop: a weak CRITICAL call never runs on one verdict alone. It needs the verdict and an
independent second check (the strong policy's agreement, or k verdicts); a missing, malformed or dissenting
second check keeps it from running. A tier table can raise a call's tier, never lower it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.scripted import RecordingJournal, ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import METHODS, Action, Effect, MalformedOutput, Parts, SpecConfig, Task, Tier, Verdict
from specagent_ray.protocol.interfaces import EngineUnavailable, TieredTools
from specagent_ray.protocol.review import CriticalCheck
from specagent_ray.protocol.types import ToolCall
from specagent_ray.testing.examples import examples
from specagent_ray.tools.scripted import InMemoryTools, ToolSpec, object_schema

LOOKUP = Action.tool("lookup", id="a")
REFUND = Action.tool("refund", id="a", amount=50)  # critical: money leaves
BIG_NOTE = Action.tool("note", id="a", text="x")   # a write
CANCEL = Action.tool("cancel", id="a")             # a read by effect, raised to critical by the table
STOP = Action.stop()


class TieredInMemory(InMemoryTools):
    """In-memory tools with a tier table: refund and cancel are critical; lookup stays a read."""

    def __init__(self, specs, tiers):
        super().__init__(specs)
        self.tiers = tiers

    def tier(self, call: ToolCall) -> Tier:
        return self.tiers.get(call.name, Tier.READ)


def make(weak=(), strong=(), verdicts=(), tiers=None, **cfg):
    specs = {
        "lookup": ToolSpec(Effect.READ, object_schema(id="string"), lambda id: f"record {id}"),
        "cancel": ToolSpec(Effect.READ, object_schema(id="string")),
        "refund": ToolSpec(Effect.WRITE, object_schema(id="string", amount="integer")),
        "note": ToolSpec(Effect.WRITE, object_schema(id="string", text="string")),
    }
    tiers = {"refund": Tier.CRITICAL, "cancel": Tier.CRITICAL} if tiers is None else tiers
    tools = TieredInMemory(specs, tiers)
    parts = Parts(ScriptedPolicy(weak), ScriptedPolicy(strong), ScriptedVerifier(verdicts), tools,
                  ScriptedUser(), Ledger())
    return parts, SpecConfig(**cfg)


async def run(parts, config):
    return await METHODS["specagent"](Task("t", "help"), parts, config)


def executed(parts, name):
    return [c for c in parts.tools.executed if c.name == name]


def test_the_adapter_is_tiered_and_tiers_are_ordered():
    parts, _ = make()
    assert isinstance(parts.tools, TieredTools)
    assert Tier.READ.rank < Tier.WRITE.rank < Tier.CRITICAL.rank
    assert Tier.highest([Tier.WRITE, Tier.CRITICAL, Tier.READ]) is Tier.CRITICAL
    assert Tier.CRITICAL.effect is Effect.WRITE and Tier.READ.effect is Effect.READ


async def test_a_critical_call_the_strong_policy_agrees_with_runs_once():
    parts, cfg = make(weak=[LOOKUP, REFUND, STOP], strong=[REFUND])
    traj = await run(parts, cfg)
    assert executed(parts, "refund") == [REFUND.call]
    assert traj.steps[1].action == REFUND and traj.steps[1].author == "weak"
    assert traj.count("second_check") == 1
    (_, draft, _), = parts.strong.calls  # the strong step is written from H and the accepted prefix
    assert [s.action for s in draft] == [LOOKUP]


async def test_a_critical_call_the_strong_policy_disagrees_with_never_runs_and_the_strong_step_replaces_it():
    right = Action.tool("refund", id="a", amount=40)
    parts, cfg = make(weak=[REFUND, STOP], strong=[right])
    traj = await run(parts, cfg)
    assert executed(parts, "refund") == [right.call]  # the weak 50 never ran; the strong 40 ran once
    assert traj.steps[0].action == right and traj.steps[0].author == "strong"
    assert any(e.kind == "rejected" and "second check" in e.detail for e in traj.events)


@pytest.mark.parametrize("answer", [MalformedOutput("garbled"), EngineUnavailable("replica lost"),
                                    Action.message("are you sure?")])
async def test_no_usable_confirmation_means_the_critical_call_never_runs(answer):
    parts, cfg = make(weak=[REFUND, STOP], strong=[answer, STOP])
    traj = await run(parts, cfg)
    assert executed(parts, "refund") == []
    assert any(e.kind == "second_check" and e.detail.startswith("0/1") for e in traj.events)


async def test_a_read_raised_to_critical_is_staged_and_checked():
    parts, cfg = make(weak=[CANCEL, STOP], strong=[STOP], verdicts=[Verdict(1)])
    traj = await run(parts, cfg)
    assert executed(parts, "cancel") == []  # the strong policy would stop instead: never ran
    assert parts.verifier.calls[0][1][-1].staged


async def test_a_tier_table_cannot_lower_a_write_to_a_read():
    parts, cfg = make(weak=[BIG_NOTE, STOP], verdicts=[Verdict(0, "no")], strong=[STOP],
                      tiers={"note": Tier.READ})
    await run(parts, cfg)
    assert executed(parts, "note") == []  # still staged, and rejected


async def test_a_plain_write_still_needs_only_its_verdict():
    parts, cfg = make(weak=[BIG_NOTE, STOP])
    traj = await run(parts, cfg)
    assert executed(parts, "note") == [BIG_NOTE.call] and not parts.strong.calls
    assert traj.count("second_check") == 0


async def test_k_verdicts_must_all_accept_a_critical_call():
    parts, cfg = make(weak=[REFUND, STOP], verdicts=[Verdict(1), Verdict(0, "second look: wrong amount")],
                      strong=[STOP], critical=CriticalCheck("verdicts", k=2))
    await run(parts, cfg)
    assert executed(parts, "refund") == [] and len(parts.verifier.calls) == 2
    parts, cfg = make(weak=[REFUND, STOP], critical=CriticalCheck("verdicts", k=3))
    await run(parts, cfg)
    assert executed(parts, "refund") == [REFUND.call] and len(parts.verifier.calls) == 4  # 3, then the stop's


async def test_in_a_parallel_action_only_the_unconfirmed_critical_call_is_dropped():
    w1, w2 = ToolCall("refund", {"id": "a", "amount": 5}), ToolCall("refund", {"id": "b", "amount": 7})
    note = ToolCall("note", {"id": "a", "text": "x"})
    staged = Action.parallel([w1, note, w2])
    parts, cfg = make(weak=[staged, STOP], strong=[Action.parallel([w1, ToolCall("refund", {"id": "b", "amount": 6})])],
                      parallel_calls=True)
    traj = await run(parts, cfg)
    assert parts.tools.executed == [w1, note, ToolCall("refund", {"id": "b", "amount": 6})]
    assert traj.steps[0].action.calls == (w1, note) and traj.steps[0].author == "weak"
    assert traj.steps[1].author == "strong"  # the strong step less the call that ran already


async def test_a_tier_table_that_answers_no_tier_makes_the_call_critical():
    parts, cfg = make(weak=[BIG_NOTE, STOP], strong=[STOP], tiers={"note": "critical"})  # a string, no Tier
    await run(parts, cfg)
    assert executed(parts, "note") == []  # fail closed: critical, and the strong policy would not write it


def test_a_critical_check_needs_two_judgements():
    with pytest.raises(ValueError):
        CriticalCheck("verdicts", k=1)
    with pytest.raises(ValueError):
        CriticalCheck("vibes")


VERDICT = st.one_of(
    st.builds(Verdict, st.integers(-1, 3), st.just("r")),
    st.builds(lambda j: Verdict(j, "r", Action.tool("refund", id="a", amount=50)), st.integers(0, 2)),
)
# The strong policy's answers are equal to the weak refund but never the same object, so the referee can tell
# a weak call (by identity) from the strong model's own.
ANSWER = st.one_of(st.sampled_from([Action.tool("refund", id="a", amount=50), Action.tool("refund", id="a", amount=1),
                                    STOP, Action.tool("lookup", id="a")]), st.just(MalformedOutput("x")))


class Answers:
    """Wraps a scripted policy or verifier and keeps what it answered, in order."""

    def __init__(self, inner):
        self.inner, self.said = inner, []

    async def propose(self, history, draft=(), feedback=None):
        out = await self.inner.propose(history, draft, feedback)
        self.said.append(out.action)
        return out

    async def verify(self, history, block):
        out = await self.inner.verify(history, block)
        self.said.append((out.verdict, len(block)))
        return out


class Referee(TieredInMemory):
    """At the moment the weak refund would run, judged from what the models said, not from the loop's events:
    it was staged since the last review began, and either (agree) the strong policy's latest step is this very
    call, or (verdicts) the verifier's latest two verdicts both accepted the whole block."""

    def __init__(self, specs, tiers, journal, weak_call, strong, verifier, mode):
        super().__init__(specs, tiers)
        self.journal, self.weak_call, self.weak_runs = journal, weak_call, 0
        self.strong, self.verifier, self.mode = strong, verifier, mode
        self.violations: list[str] = []  # the loop turns a tool's exception into data: record, assert later

    async def execute(self, call):
        if call is self.weak_call:
            self.weak_runs += 1
            kinds = [(e.kind, e.action) for e in self.journal.events]
            staged = max(i for i, (k, _) in enumerate(kinds) if k == "staged")
            if not any(c is call for c in kinds[staged][1].calls):
                self.violations.append("ran without being the staged call")
            if self.mode == "agree" and not (self.strong.said and self.strong.said[-1].calls == (call,)):
                self.violations.append(f"ran though the strong policy's latest step was {self.strong.said[-1:]}")
            last = self.verifier.said[-2:]
            if self.mode == "verdicts" and not (len(last) == 2 and all(v.accepted_prefix == n for v, n in last)):
                self.violations.append(f"ran though the latest verdicts were {last}")
        return await super().execute(call)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verdicts=st.lists(VERDICT, max_size=4), answers=st.lists(ANSWER, max_size=4),
       mode=st.sampled_from(["agree", "verdicts"]))
async def test_every_weak_critical_call_that_ran_was_accepted_by_a_verdict_and_confirmed(verdicts, answers, mode):
    """The referee checks, as each weak refund runs, that this very call (by identity) was staged, accepted and
    confirmed by the second check of the same review."""
    parts, cfg = make(weak=[LOOKUP, REFUND, REFUND, STOP], strong=answers, verdicts=verdicts,
                      critical=CriticalCheck(mode), max_steps=8)
    journal = RecordingJournal()
    parts.journal, parts.strong, parts.verifier = journal, Answers(parts.strong), Answers(parts.verifier)
    parts.tools = Referee(parts.tools.specs, parts.tools.tiers, journal, REFUND.call, parts.strong, parts.verifier,
                          mode)
    traj = await run(parts, cfg)
    assert parts.tools.violations == []
    ran = [s for s in traj.steps if s.author == "weak" and s.action.call is REFUND.call]
    assert len(ran) == parts.tools.weak_runs


class TwoLooks(ScriptedVerifier):
    """A verifier with a critical second look of its own (a ``CriticalJudge``)."""

    def __init__(self, verdicts, critical):
        super().__init__(verdicts)
        self.critical = ScriptedVerifier(critical)

    def for_critical(self):
        return self.critical


async def test_the_second_verdict_is_the_verifiers_critical_look_where_it_has_one():
    from specagent_ray.protocol.interfaces import CriticalJudge

    parts, cfg = make(weak=[REFUND, STOP], strong=[STOP], critical=CriticalCheck("verdicts"))
    parts.verifier = TwoLooks([Verdict(1)], [Verdict(0, "the amount is 40, not 50")])
    assert isinstance(parts.verifier, CriticalJudge)
    await run(parts, cfg)
    assert executed(parts, "refund") == [] and len(parts.verifier.critical.calls) == 1
    assert len(parts.verifier.calls) == 1  # the first verdict; the second was the critical look


def test_an_llm_verifiers_critical_look_asks_for_the_call_to_be_checked_argument_by_argument():
    from specagent_ray.models.prompts import verify_instruction
    from specagent_ray.protocol.types import Step

    block = [Step(REFUND, None, "weak", Effect.WRITE)]
    critical = verify_instruction(block, "critical")
    assert "argument" in critical and "irreversible" in critical
    assert "irreversible" not in verify_instruction(block, "semantic")
