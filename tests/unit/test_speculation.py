"""Every branch of Algorithm 1, driven by scripted parts."""

from __future__ import annotations

import pytest

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import (
    METHODS, Action, Effect, MalformedOutput, Parts, Proposal, SpecConfig, Task, Termination, Usage, Verdict,
)
from specagent_ray.tools.scripted import InMemoryTools, ToolSpec, object_schema

R = Action.tool("lookup", id="a")
R2 = Action.tool("lookup", id="b")
W = Action.tool("refund", id="a", amount=5)
W_BAD = Action.tool("refund", id="a", amount="five")
UNKNOWN = Action.tool("rm_rf", path="/")
STOP = Action.stop()


def _boom(**kw):
    raise RuntimeError("backend down")


def make(weak=(), strong=(), verdicts=(), replies=(), **cfg):
    tools = InMemoryTools({
        "lookup": ToolSpec(Effect.READ, object_schema(id="string"), lambda id: f"record {id}"),
        "flaky": ToolSpec(Effect.READ, object_schema(id="string"), _boom),
        "refund": ToolSpec(Effect.WRITE, object_schema(id="string", amount="integer")),
    })
    parts = Parts(ScriptedPolicy(weak), ScriptedPolicy(strong), ScriptedVerifier(verdicts), tools,
                  ScriptedUser(replies), Ledger())
    return parts, SpecConfig(**cfg)


async def run(parts, config, method="specagent"):
    return await METHODS[method](Task("t", "help"), parts, config)


def actions(traj):
    return [s.action for s in traj.steps]


async def test_accepted_block_commits_and_executes_staged_write():
    parts, cfg = make(weak=[R, W, STOP], verdicts=[Verdict(2), Verdict(1)])
    traj = await run(parts, cfg)
    assert actions(traj) == [R, W, STOP]
    assert parts.tools.executed == [R.call, W.call]
    assert [s.author for s in traj.steps] == ["weak", "weak", "weak"]
    assert traj.termination is Termination.AGENT_STOP
    assert len(parts.verifier.calls) == 2  # the write's block, then the stop's block


async def test_block_of_k_reads_commits_without_review():
    parts, cfg = make(weak=[R, R2, R, R2, STOP], k=2)
    traj = await run(parts, cfg)
    assert actions(traj) == [R, R2, R, R2, STOP]
    assert len(parts.verifier.calls) == 1  # only the stop is reviewed
    assert traj.count("accepted") == 1


async def test_rejection_commits_prefix_drops_suffix_and_uses_valid_fused_repair():
    fused = Action.tool("refund", id="a", amount=3)
    parts, cfg = make(weak=[R, R2, W, STOP], verdicts=[Verdict(1, "R2 irrelevant", fused)])
    traj = await run(parts, cfg)
    assert actions(traj) == [R, fused, STOP]
    assert traj.steps[1].author == "strong"
    assert W.call not in parts.tools.executed  # the rejected staged write never ran
    assert parts.tools.executed == [R.call, R2.call, fused.call]  # R2 ran as a draft read, then was dropped
    assert traj.count("fused_repair") == 1 and not parts.strong.calls


async def test_invalid_fused_repair_falls_back_to_strong_repair_with_reason():
    parts, cfg = make(weak=[W, STOP], strong=[Action.tool("refund", id="a", amount=1)],
                      verdicts=[Verdict(0, "amount wrong", W_BAD)])
    traj = await run(parts, cfg)
    assert [s.action for s in traj.steps][0] == Action.tool("refund", id="a", amount=1)
    assert parts.strong.calls[0][2] == "amount wrong"  # repair from (H, r)
    assert W_BAD.call not in parts.tools.executed and W.call not in parts.tools.executed


async def test_repair_is_not_verified_again():
    parts, cfg = make(weak=[W, STOP], strong=[W], verdicts=[Verdict(0, "no")])
    await run(parts, cfg)
    staged_blocks = [block for _, block, _ in parts.verifier.calls]
    assert len(staged_blocks) == 2 and staged_blocks[1][0].action == STOP  # W by strong was not reviewed


@pytest.mark.parametrize("bad", [Verdict(3), Verdict(-1), Verdict(True), Verdict("1"), None])
async def test_malformed_verdict_is_a_full_rejection(bad):
    verdict = MalformedOutput("missing field accepted_prefix") if bad is None else bad
    parts, cfg = make(weak=[R, W, STOP], strong=[STOP], verdicts=[verdict])
    traj = await run(parts, cfg)
    assert W.call not in parts.tools.executed
    assert actions(traj) == [STOP]
    rejected = [e for e in traj.events if e.kind == "rejected"]
    assert rejected and "malformed verdict" in rejected[0].detail


@pytest.mark.parametrize("bad, reason", [
    (UNKNOWN, "unknown tool 'rm_rf'"),
    (W_BAD, "amount"),
    (Action.message("  "), "empty message"),
    ("not an action", "not an action"),
])
async def test_invalid_weak_action_is_never_executed_and_strong_writes_the_step(bad, reason):
    parts, cfg = make(weak=[R, bad], strong=[W, STOP])
    traj = await run(parts, cfg)
    assert actions(traj) == [R, W, STOP]
    assert traj.steps[1].author == "strong"
    assert all(c.name != "rm_rf" for c in parts.tools.executed)
    assert any(reason in e.detail for e in traj.events if e.kind == "invalid_action")


async def test_malformed_weak_output_becomes_strong_step_with_the_parsers_reason():
    parts, cfg = make(weak=[MalformedOutput("bad json")], strong=[STOP])
    traj = await run(parts, cfg)
    assert actions(traj) == [STOP] and traj.steps[0].author == "strong"
    assert any("bad json" in e.detail for e in traj.events if e.kind == "malformed_output")
    assert "bad json" in parts.strong.calls[0][2]  # the repair is asked with the actual reason


async def test_usage_of_a_malformed_reply_is_still_recorded():
    class Costly(MalformedOutput):
        usage = Usage(500, 0, 70)

    parts, cfg = make(weak=[Costly("truncated")], strong=[STOP])
    await run(parts, cfg)
    assert parts.ledger.totals("weak").decode_tokens == 70


async def test_tool_that_raises_is_an_error_observation():
    flaky = Action.tool("flaky", id="x")
    parts, cfg = make(weak=[flaky, STOP])
    traj = await run(parts, cfg)
    assert traj.steps[0].observation.error and "backend down" in traj.steps[0].observation.content
    assert traj.count("tool_error") == 1 and traj.termination is Termination.AGENT_STOP


async def test_max_steps_guard():
    parts, cfg = make(weak=[R] * 50, k=3, max_steps=7)
    traj = await run(parts, cfg)
    assert len(traj.steps) == 7 and traj.termination is Termination.MAX_STEPS


async def test_strong_that_never_produces_valid_output_terminates():
    parts, cfg = make(weak=[UNKNOWN] * 1000, strong=[UNKNOWN] * 1000, max_steps=5)
    traj = await run(parts, cfg)
    assert traj.termination is Termination.MAX_STEPS and not parts.tools.executed


async def test_reviewed_message_is_staged_and_user_stop_ends_run():
    hello = Action.message("Your refund is done.")
    parts, cfg = make(weak=[hello], replies=["thanks ###STOP###"], review_messages=True)
    traj = await run(parts, cfg)
    assert traj.termination is Termination.USER_STOP
    assert parts.verifier.calls[0][1][0].staged  # the user saw it only after review


async def test_rejected_message_never_reaches_the_user():
    rude = Action.message("go away")
    parts, cfg = make(weak=[rude, STOP], strong=[Action.message("How can I help?")],
                      verdicts=[Verdict(0, "rude")], replies=["bye ###STOP###"], review_messages=True)
    await run(parts, cfg)
    assert parts.user.heard == ["How can I help?"]


async def test_unreviewed_message_is_sent_at_once_and_ends_the_block():
    hello = Action.message("hi")
    parts, cfg = make(weak=[R, hello, R2, W, STOP], verdicts=[Verdict(0, "no")], strong=[STOP])
    traj = await run(parts, cfg)
    assert parts.user.heard == ["hi"]
    first_block = parts.verifier.calls[0][1]
    assert [s.action for s in first_block] == [R2, W]  # R and the message committed unreviewed
    assert actions(traj) == [R, hello, STOP]  # the rejection cannot drop what the user already read


async def test_unreviewed_user_stop_ends_run():
    parts, cfg = make(weak=[Action.message("done")], replies=["bye ###STOP###"])
    traj = await run(parts, cfg)
    assert traj.termination is Termination.USER_STOP and not parts.verifier.calls


def test_config_rejects_bad_k_and_max_steps():
    with pytest.raises(ValueError, match="k must be"):
        SpecConfig(k=0)
    with pytest.raises(ValueError, match="max_steps"):
        SpecConfig(max_steps=-1)


async def test_ledger_records_every_model_call():
    parts, cfg = make(weak=[R, W, STOP], verdicts=[Verdict(1, "no", None)], strong=[W])
    await run(parts, cfg)
    purposes = [c.purpose for c in parts.ledger.calls]
    assert purposes.count("verify") == 2 and purposes.count("repair") == 1 and purposes.count("draft") == 3
    assert parts.ledger.totals("strong").calls == 3


# -- baselines ----------------------------------------------------------------------------------


async def test_strong_only_never_calls_weak_or_verifier():
    parts, cfg = make(weak=[UNKNOWN], strong=[R, W, STOP])
    traj = await run(parts, cfg, "strong")
    assert actions(traj) == [R, W, STOP] and not parts.weak.calls and not parts.verifier.calls


async def test_agentcollab_escalates_on_low_confidence_and_after_error():
    flaky = Action.tool("flaky", id="x")
    weak = [Proposal(R, confidence=0.9), Proposal(W, confidence=0.1), Proposal(flaky, confidence=0.9),
            Proposal(R2, confidence=0.9), Proposal(STOP, confidence=0.9)]
    parts, cfg = make(weak=weak, strong=[W, R2])
    traj = await run(parts, cfg, "agentcollab")
    assert actions(traj) == [R, W, flaky, R2, STOP]
    assert [s.author for s in traj.steps] == ["weak", "strong", "weak", "strong", "weak"]
    assert traj.count("escalated") == 2


async def test_speculative_actions_keeps_strong_steps_and_counts_hits():
    parts, cfg = make(weak=[R, R, STOP], strong=[R, W, STOP])
    traj = await run(parts, cfg, "specactions")
    assert actions(traj) == [R, W, STOP] and all(s.author == "strong" for s in traj.steps)
    assert traj.count("speculation_hit") == 2 and traj.count("speculation_miss") == 1


async def test_exact_match_ablation_rejects_a_different_but_fine_step():
    parts, cfg = make(weak=[R2, W, STOP], strong=[R, R, W, STOP])
    traj = await run(parts, cfg, "specagent-exact")
    # strong would have looked up "a" first, so the semantically fine R2 is rejected and replaced
    assert actions(traj)[0] == R and traj.steps[0].author == "strong"


# -- served sessions: lost engines, journal, resume -------------------------------------------------

from specagent_ray.protocol import EngineUnavailable, History  # noqa: E402


async def test_lost_drafter_drops_the_block_and_redrafts_from_committed_history():
    lost = EngineUnavailable("drafter replica died")
    parts, cfg = make(weak=[R, lost, R2, W, STOP])
    traj = await run(parts, cfg)
    assert actions(traj) == [R2, W, STOP]  # the first R was drafted in the lost block: dropped
    assert traj.count("redraft") == 1
    assert parts.tools.executed == [R.call, R2.call, W.call]  # the dropped read ran, the write once
    redraft_history = parts.weak.calls[2][0]
    assert len(redraft_history) == 0 and parts.weak.calls[2][1] == ()  # re-drafted from H, empty draft


async def test_unavailable_verifier_falls_back_to_a_strong_step_and_never_runs_the_weak_write():
    parts, cfg = make(weak=[W, STOP], strong=[R2], verdicts=[EngineUnavailable("verifier timed out")])
    traj = await run(parts, cfg)
    assert W.call not in parts.tools.executed
    assert traj.count("verifier_fallback") == 1
    assert traj.steps[0].action == R2 and traj.steps[0].author == "strong"


class _Journal:
    def __init__(self):
        self.events, self.commits = [], []

    def event(self, event):
        self.events.append(event.kind)

    def committed(self, steps):
        self.commits.append([s.action for s in steps])


async def test_journal_sees_every_event_and_every_commit_in_order():
    parts, cfg = make(weak=[R, W, STOP], verdicts=[Verdict(1)], strong=[R2])
    parts.journal = _Journal()
    traj = await run(parts, cfg)
    assert parts.journal.events == [e.kind for e in traj.events]
    assert [a for c in parts.journal.commits for a in c] == actions(traj)


@pytest.mark.parametrize("method", sorted(METHODS))
async def test_every_method_resumes_from_a_committed_history(method):
    parts, cfg = make(weak=[STOP], strong=[STOP])
    done = parts.tools
    first = (await run(make(weak=[R], strong=[R], max_steps=1)[0], SpecConfig(max_steps=1), method)).steps
    assert len(first) == 1
    traj = await METHODS[method](Task("t", "help"), parts, cfg, History(Task("t", "help"), first))
    assert actions(traj)[0] == R and traj.steps[-1].action == STOP
    assert done.executed == []  # nothing of the resumed history ran again
