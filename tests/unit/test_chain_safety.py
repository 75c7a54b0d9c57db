"""The three-tier chain: a mid verifier reviews each block first and settles it alone only within its remit
(``ChainRule``); everything else escalates to the strong verifier, whose verdict is final. The mid verifier can
never accept a write of a tier it may not settle, and never authors a critical write."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.scripted import RecordingJournal, ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import METHODS, Action, Effect, MalformedOutput, Parts, SpecConfig, Task, Tier, Verdict
from specagent_ray.protocol.interfaces import EngineUnavailable
from specagent_ray.protocol.review import ChainRule
from specagent_ray.protocol.types import Review, ToolCall, Usage
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
    assert traj.count("escalated") >= 1 and len(parts.verifier.calls) >= 1
    assert parts.tools.executed == [REFUND.call] and traj.count("second_check") == 1
    parts, cfg = make(weak=[REFUND, STOP], mid=[mid_says(Verdict(1))], strong=[STOP],
                      chain=ChainRule(settles=frozenset({Tier.WRITE, Tier.CRITICAL})))
    traj = await run(parts, cfg)
    assert parts.tools.executed == []  # settled by the mid, but the strong policy would not refund: never runs
    assert traj.count("second_check") == 1


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


class Referee(Tiered):
    """As each weak write runs (told apart from the mid's repairs by object identity), judged from what the
    verifiers said: the block was settled by the mid only within its remit (a plain write with WRITE in
    ``settles``; never a critical call), else the strong verifier's latest verdict accepted the whole block."""

    def __init__(self, specs, journal, weak_calls, strong, settles):
        super().__init__(specs)
        self.journal, self.weak_calls, self.strong, self.settles = journal, weak_calls, strong, settles
        self.violations: list[str] = []

    async def execute(self, call):
        if any(call is w for w in self.weak_calls) and call.name != "lookup":
            kinds = [e.kind for e in self.journal.events]
            staged = max(i for i, k in enumerate(kinds) if k == "staged")
            review = [k for k in kinds[staged:] if k in ("settled_by_mid", "escalated")]
            settled = review[-1:] == ["settled_by_mid"]
            if settled and (call.name == "refund" or Tier.WRITE not in self.settles):
                self.violations.append(f"the mid settled a weak {call.name} outside its remit {self.settles}")
            last = self.strong.answers[-1:]
            if not settled and not (last and last[0][0].accepted_prefix == last[0][1]):
                self.violations.append(f"a weak {call.name} ran without the strong verifier's acceptance")
        return await super().execute(call)


class Recording(ScriptedVerifier):
    def __init__(self, verdicts):
        super().__init__(verdicts)
        self.answers = []

    async def verify(self, history, block):
        out = await super().verify(history, block)
        self.answers.append((out.verdict, len(block)))
        return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mid=st.lists(MID, max_size=5), verdicts=st.lists(STRONG_VERDICT, max_size=5),
       settles=st.sets(st.sampled_from([Tier.WRITE, Tier.CRITICAL])), below=st.floats(0, 1))
async def test_the_mid_never_settles_outside_its_remit(mid, verdicts, settles, below):
    weak = [Action.tool("lookup", id="a"), Action.tool("note", id="a", text="x"),
            Action.tool("refund", id="a", amount=50), Action.tool("note", id="a", text="y"), STOP]  # own objects
    parts, cfg = make(weak=weak, mid=mid, strong=[STOP] * 6, max_steps=10, chain=ChainRule(frozenset(settles), below))
    journal = RecordingJournal()
    parts.journal, parts.verifier = journal, Recording(verdicts)
    parts.tools = Referee(parts.tools.specs, journal, [a.call for a in weak if a.call], parts.verifier, settles)
    traj = await run(parts, cfg)
    assert parts.tools.violations == []
    settled = [e for e in traj.events if e.kind == "settled_by_mid"]
    assert len(settled) + traj.count("escalated") == len(parts.mid.calls)
    for step in traj.steps:
        if step.author == "mid":  # a mid repair: valid, never critical, of a tier it may settle
            assert step.action.kind is not ActionKind_TOOL or step.action.call.name != "refund"


ActionKind_TOOL = LOOKUP.kind
