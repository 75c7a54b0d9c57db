"""The three-tier chain: a mid verifier reviews each block first and settles it alone only within its remit
(``ChainRule``); everything else escalates to the strong verifier, whose verdict is final. The mid verifier can
never accept a write of a tier it may not settle, and never authors a critical write."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.scripted import RecordingJournal, ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import METHODS, Action, Effect, MalformedOutput, Parts, SpecConfig, Task, Tier, Verdict
from specagent_ray.protocol.interfaces import EngineUnavailable
from specagent_ray.protocol.review import ChainRule
from specagent_ray.protocol.types import Review, ToolCall, Usage
from specagent_ray.testing.examples import examples
from specagent_ray.tools.scripted import InMemoryTools, ToolSpec, object_schema

LOOKUP = Action.tool("lookup", id="a")
NOTE = Action.tool("note", id="a", text="x")
NOTE2 = Action.tool("note", id="a", text="y")
REFUND = Action.tool("refund", id="a", amount=50)
STOP = Action.stop()


class Tiered(InMemoryTools):
    def tier(self, call: ToolCall) -> Tier:
        return Tier.CRITICAL if call.name == "refund" else Tier.READ


def mid_says(verdict, confidence=0.9):
    return Review(verdict, Usage(150, 0, 5), confidence)


def make(weak=(), strong=(), verdicts=(), mid=(), **cfg):
    tools = Tiered({
        "lookup": ToolSpec(Effect.READ, object_schema(id="string"), lambda id: f"record {id}"),
        "note": ToolSpec(Effect.WRITE, object_schema(id="string", text="string")),
        "refund": ToolSpec(Effect.WRITE, object_schema(id="string", amount="integer")),
    })
    parts = Parts(ScriptedPolicy(weak), ScriptedPolicy(strong), ScriptedVerifier(verdicts), tools,
                  ScriptedUser(), Ledger(), mid=ScriptedVerifier(mid))
    return parts, SpecConfig(**cfg)


async def run(parts, config):
    return await METHODS["specagent"](Task("t", "help"), parts, config)


async def test_a_confident_mid_accept_of_a_write_settles_the_block_without_the_strong_verifier():
    parts, cfg = make(weak=[LOOKUP, NOTE, STOP], mid=[mid_says(Verdict(2)), mid_says(Verdict(1))])
    traj = await run(parts, cfg)
    assert parts.tools.executed == [LOOKUP.call, NOTE.call]
    assert not parts.verifier.calls and traj.count("settled_by_mid") == 2
    assert {c.role for c in parts.ledger.calls} == {"weak", "mid"}


async def test_a_mid_fused_repair_of_a_write_commits_as_the_mids_step():
    parts, cfg = make(weak=[NOTE, STOP], mid=[mid_says(Verdict(0, "text is y", NOTE2))])
    traj = await run(parts, cfg)
    assert parts.tools.executed == [NOTE2.call] and traj.steps[0].author == "mid"
    (event,) = [e for e in traj.events if e.kind == "fused_repair"]
    assert event.author == "mid"  # what a served session's intent records as the write's author


@pytest.mark.parametrize("answer, why", [
    (mid_says(Verdict(1), confidence=0.2), "confidence"),
    (MalformedOutput("garbled"), "malformed"),
    (EngineUnavailable("lost"), "unavailable"),
    (mid_says(Verdict(0, "x", Action.tool("note", id=5, text="y"))), "invalid"),
    (mid_says(Verdict(0, "x", REFUND)), "repair is critical"),
    (mid_says(Verdict(7)), "malformed"),
    (mid_says(Verdict(1), confidence=float("nan")), "malformed"),
    (mid_says(Verdict(1), confidence=70.0), "not in 0..1"),  # a percentage is no probability
    (mid_says(Verdict(1), confidence=True), "not in 0..1"),
    (mid_says(Verdict(1), confidence=float("inf")), "not in 0..1"),
    (Review(Verdict(1)), "no confidence"),  # an engine that reports none never settles alone
])
async def test_anything_outside_the_mids_remit_escalates_to_the_strong_verifier(answer, why):
    parts, cfg = make(weak=[NOTE, STOP], mid=[answer], verdicts=[Verdict(0, "strong says no")], strong=[STOP])
    traj = await run(parts, cfg)
    assert parts.tools.executed == []  # the strong verdict is final: rejected, and the strong repair is a stop
    escalated = [e.detail for e in traj.events if e.kind == "escalated"]
    assert escalated and why in escalated[0]
    assert len(parts.verifier.calls) >= 1


async def test_the_mid_never_settles_a_critical_write_even_when_allowed_and_it_still_gets_its_second_check():
    parts, cfg = make(weak=[REFUND, STOP], mid=[mid_says(Verdict(1))], strong=[REFUND],
                      chain=ChainRule(settles=frozenset({Tier.WRITE})))
    traj = await run(parts, cfg)
    # per block, not in total: the refund's block escalates for its tier (the stop's block after it escalates
    # too, for want of a mid answer, so a count of escalations would pass with the refund's block settled)
    assert rulings(traj)[0] == ("escalated", "the staged step is critical, which the mid verifier may not settle")
    assert parts.verifier.calls[0][1][-1].action is REFUND
    assert parts.tools.executed == [REFUND.call] and traj.count("second_check") == 1
    parts, cfg = make(weak=[REFUND, STOP], mid=[mid_says(Verdict(1))], strong=[STOP],
                      chain=ChainRule(settles=frozenset({Tier.WRITE, Tier.CRITICAL})))
    traj = await run(parts, cfg)
    assert rulings(traj)[0] == ("settled_by_mid", "1/1")  # within its remit now
    assert parts.tools.executed == []  # settled by the mid, but the strong policy would not refund: never runs
    assert traj.count("second_check") == 1


def rulings(traj) -> list[tuple[str, str]]:
    """Each reviewed block's ruling by the chain, in order: (settled_by_mid, "j/n") or (escalated, why)."""
    return [(e.kind, e.detail) for e in traj.events if e.kind in ("settled_by_mid", "escalated")]


async def test_a_mid_that_may_settle_nothing_escalates_every_staged_block():
    parts, cfg = make(weak=[NOTE, STOP], mid=[mid_says(Verdict(1)), mid_says(Verdict(1))],
                      chain=ChainRule(settles=frozenset()))
    traj = await run(parts, cfg)
    assert traj.count("settled_by_mid") == 0 and len(parts.verifier.calls) == 2


MID = st.one_of(
    st.builds(lambda j, c: mid_says(Verdict(j, "r"), c), st.integers(-1, 3), st.floats(0, 1)),
    st.builds(lambda j, a, c: mid_says(Verdict(j, "r", a), c), st.integers(0, 2),
              st.sampled_from([NOTE, NOTE2, REFUND, LOOKUP, STOP]), st.floats(0, 1)),
    st.just(MalformedOutput("x")), st.just(EngineUnavailable("x")),
)
STRONG_VERDICT = st.builds(Verdict, st.integers(0, 2), st.just("s"))
# The strong policy's steps (its second-check proposals and repairs): a refund confirms a weak refund, so that
# a weak critical call can run and the referee judges it when it does.
STRONG_STEP = {"stop": Action.stop, "refund": lambda: Action.tool("refund", id="a", amount=50)}


def staged_tier(block) -> Tier:
    """The tier the runtime gives the block's staged step (``Tiered``: a refund is critical, any other
    write, a stop included, is a plain write)."""
    action = block[-1].action
    return Tier.CRITICAL if action.calls and action.call.name == "refund" else Tier.WRITE


class Referee(Tiered):
    """As each weak write runs (told apart from the other authors' by object identity), judged from what the
    verifiers said: the block was settled by the mid only within its remit (its staged tier in ``settles``),
    else the strong verifier's latest verdict accepted the whole block; and a critical call ran only after the
    second check confirmed it."""

    def __init__(self, specs, journal, weak_calls, strong, settles):
        super().__init__(specs)
        self.journal, self.weak_calls, self.strong, self.settles = journal, weak_calls, strong, settles
        self.violations: list[str] = []

    async def execute(self, call):
        if any(call is w for w in self.weak_calls) and call.name != "lookup":
            events = self.journal.events
            staged = max(i for i, e in enumerate(events) if e.kind == "staged")
            review = [e.kind for e in events[staged:] if e.kind in ("settled_by_mid", "escalated")]
            settled = review[-1:] == ["settled_by_mid"]
            tier = Tier.CRITICAL if call.name == "refund" else Tier.WRITE
            if settled and tier not in self.settles:
                self.violations.append(f"the mid settled a weak {call.name} outside its remit {self.settles}")
            last = self.strong.answers[-1:]
            if not settled and not (last and last[0][0].accepted_prefix == last[0][1]):
                self.violations.append(f"a weak {call.name} ran without the strong verifier's acceptance")
            checks = [e.detail for e in events[staged:] if e.kind == "second_check"]
            if tier is Tier.CRITICAL and checks != ["1/1 confirmed"]:
                self.violations.append(f"a weak refund ran after the second checks {checks}")
        return await super().execute(call)


class Recording(ScriptedVerifier):
    def __init__(self, verdicts):
        super().__init__(verdicts)
        self.answers = []

    async def verify(self, history, block):
        out = await super().verify(history, block)
        self.answers.append((out.verdict, len(block)))
        return out


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mid=st.lists(MID, max_size=5), verdicts=st.lists(STRONG_VERDICT, max_size=5),
       settles=st.sets(st.sampled_from([Tier.WRITE, Tier.CRITICAL])), below=st.floats(0, 1),
       strong=st.lists(st.sampled_from(sorted(STRONG_STEP)), max_size=6))
@example(mid=[mid_says(Verdict(2)), mid_says(Verdict(1))], verdicts=[], settles={Tier.WRITE}, below=0.5,
         strong=["refund"])  # the mid accepts the refund's block, confidently, outside its remit
@example(mid=[mid_says(Verdict(2)), mid_says(Verdict(1))], verdicts=[], settles={Tier.WRITE, Tier.CRITICAL},
         below=0.5, strong=["refund"])  # the same, within its remit: settled, then the second check
async def test_the_mid_never_settles_outside_its_remit(mid, verdicts, settles, below, strong):
    weak = [Action.tool("lookup", id="a"), Action.tool("note", id="a", text="x"),
            Action.tool("refund", id="a", amount=50), Action.tool("note", id="a", text="y"), STOP]  # own objects
    parts, cfg = make(weak=weak, mid=mid, strong=[STRONG_STEP[s]() for s in strong], max_steps=10,
                      chain=ChainRule(frozenset(settles), below))
    journal = RecordingJournal()
    parts.journal, parts.verifier = journal, Recording(verdicts)
    parts.tools = Referee(parts.tools.specs, journal, [a.call for a in weak if a.call], parts.verifier, settles)
    traj = await run(parts, cfg)
    assert parts.tools.violations == []
    ruled = rulings(traj)
    assert len(ruled) == len(parts.mid.calls)
    for (_, block, _), (kind, detail) in zip(parts.mid.calls, ruled, strict=True):  # block by block
        if kind == "settled_by_mid":  # a settled accept of the staged step is within the remit; a rejection may
            j, n = map(int, detail.split("/"))  # be settled whatever the tier (the staged step never runs)
            assert j < n or staged_tier(block) in settles, f"the mid settled {detail} of a {staged_tier(block)} block"
    for step in traj.steps:
        if step.author == "mid":  # a mid repair: valid, never critical, of a tier it may settle
            assert step.action.kind is not ActionKind_TOOL or step.action.call.name != "refund"


ActionKind_TOOL = LOOKUP.kind
