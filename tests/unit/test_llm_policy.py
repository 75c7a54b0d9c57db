"""LLMPolicy and LLMVerifier over a scripted backend (same ``complete`` signature as ChatBackend), then
inside the real protocol loop: malformed output is retried once, then refused, never executed."""

from __future__ import annotations

import json

import pytest

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.backend import Completion
from specagent_ray.models.llm import LLMPolicy, LLMVerifier, MalformedReply
from specagent_ray.models.prompts import PromptConfig
from specagent_ray.models.scripted import ScriptedUser
from specagent_ray.protocol import (
    Action,
    Effect,
    History,
    MalformedOutput,
    Parts,
    SpecConfig,
    Step,
    Task,
    Termination,
    Usage,
    Verdict,
    run_specagent,
)
from specagent_ray.protocol.interfaces import JudgeWithCriteria
from specagent_ray.tools.scripted import InMemoryTools, ToolSpec, object_schema

SCHEMAS = {"lookup": object_schema(id="string"), "refund": object_schema(id="string", amount="integer")}
CONFIG = PromptConfig(policy="Refund only after a lookup.")
USAGE = Usage(prompt_tokens=100, cached_prompt_tokens=60, decode_tokens=12)
LOOKUP = json.dumps({"kind": "tool", "name": "lookup", "arguments": {"id": "a"}})
RM_RF = json.dumps({"kind": "tool", "name": "rm_rf", "arguments": {"path": "/"}})
STOP = '{"kind": "stop"}'
HISTORY = History(Task("t", "Refund order a."))


class FakeBackend:
    """Answers from a script of texts (or (text, finish_reason) pairs); records every request."""

    def __init__(self, *outputs: str | tuple[str, str]):
        self.outputs = list(outputs)
        self.requests: list[dict] = []

    async def complete(self, messages, json_schema, max_tokens, temperature=0.0, headers=None, priority=None) -> Completion:
        self.requests.append({"messages": list(messages), "schema": json_schema, "max_tokens": max_tokens,
                              "headers": headers, "priority": priority})
        item = self.outputs.pop(0)
        text, finish = item if isinstance(item, tuple) else (item, "stop")
        return Completion(text, USAGE, finish, "fake")


def policy(*outputs, **kw) -> LLMPolicy:
    return LLMPolicy(FakeBackend(*outputs), CONFIG, SCHEMAS, headers=None, **kw)


def verifier(*outputs) -> LLMVerifier:
    return LLMVerifier(FakeBackend(*outputs), CONFIG, SCHEMAS, headers=lambda: {"traceparent": "00-abc-def-01"})


async def test_good_output_is_one_call():
    p = policy(LOOKUP, max_tokens=64)
    proposal = await p.propose(HISTORY)
    assert proposal.action == Action.tool("lookup", id="a")
    assert proposal.usage == USAGE and proposal.confidence == 1.0
    [request] = p.backend.requests
    names = [b["properties"]["name"]["const"] for b in request["schema"]["anyOf"] if "name" in b["properties"]]
    assert names == ["lookup", "refund"]  # one branch per tool, each with that tool's argument schema
    assert request["max_tokens"] == 64 and request["headers"] is None


async def test_one_malformed_then_good_sums_usage_and_shows_the_model_its_mistake():
    p = policy((LOOKUP[:30], "length"), LOOKUP)
    proposal = await p.propose(HISTORY)
    assert proposal.action == Action.tool("lookup", id="a")
    assert proposal.usage == Usage(200, 120, 24)
    first, retry = p.backend.requests
    assert retry["messages"][:len(first["messages"])] == first["messages"]  # still a prefix-cache hit
    assert retry["messages"][-2] == {"role": "assistant", "content": LOOKUP[:30]}
    assert "truncated output (finish_reason=length)" in retry["messages"][-1]["content"]


async def test_a_retry_is_a_new_request_with_its_own_priority():
    numbers = iter([7, 9])
    p = policy((LOOKUP[:30], "length"), LOOKUP)
    await p.propose(HISTORY, priority=lambda: next(numbers))
    assert [r["priority"] for r in p.backend.requests] == [7, 9]
    plain = policy(LOOKUP)
    await plain.propose(HISTORY)
    assert plain.backend.requests[0]["priority"] is None  # no source: no priority sent


async def test_two_malformed_outputs_raise_with_both_reasons():
    p = policy("Sure! I will look that up.", RM_RF)
    with pytest.raises(MalformedOutput) as err:
        await p.propose(HISTORY)
    assert isinstance(err.value, MalformedReply)
    assert str(err.value) == ("invalid JSON: Expecting value at line 1 column 1 (char 0); "
                              "after one retry: unknown tool 'rm_rf'")
    assert err.value.usage == Usage(200, 120, 24)
    assert len(p.backend.requests) == 2  # retried at most once


async def test_repair_feedback_reaches_the_prompt():
    p = policy(STOP)
    await p.propose(HISTORY, feedback="refund before lookup")
    assert "rejected the next step because: refund before lookup" in p.backend.requests[0]["messages"][-1]["content"]


BLOCK = (Step(Action.tool("lookup", id="a"), None, "weak", Effect.READ),
         Step(Action.tool("refund", id="a", amount=5), None, "weak", Effect.WRITE))


async def test_verifier_parses_a_verdict_with_a_fused_repair():
    v = verifier(json.dumps({"accepted_prefix": 1, "reason": "amount is 50",
                             "repair": {"kind": "tool", "name": "refund", "arguments": {"id": "a", "amount": 50}}}))
    review = await v.verify(HISTORY, BLOCK)
    assert review.verdict == Verdict(1, "amount is 50", Action.tool("refund", id="a", amount=50))
    assert review.usage == USAGE
    [request] = v.backend.requests
    assert request["schema"]["properties"]["accepted_prefix"] == {"type": "integer", "minimum": 0, "maximum": 2}
    assert request["headers"] == {"traceparent": "00-abc-def-01"}


async def test_the_exact_ablation_asks_the_same_reviewer_to_accept_only_its_own_steps():
    """The paper's ablation changes the acceptance criterion, not the reviewer: the same backend and the
    same prompt up to its closing instruction, which now accepts only the reviewer's own exact steps."""
    semantic = verifier('{"accepted_prefix": 2, "reason": "", "repair": null}',
                        '{"accepted_prefix": 0, "reason": "not my step", "repair": null}')
    exact = semantic.by_exact_match()
    assert isinstance(semantic, JudgeWithCriteria) and exact.backend is semantic.backend
    assert (semantic.criterion, exact.criterion) == ("semantic", "exact")
    assert (await semantic.verify(HISTORY, BLOCK)).verdict.accepted_prefix == 2
    assert (await exact.verify(HISTORY, BLOCK)).verdict == Verdict(0, "not my step", None)
    first, second = (r["messages"] for r in semantic.backend.requests)
    assert first[:-1] == second[:-1]  # one prefill up to the instruction: a prefix-cache hit
    assert "need not be the action you would have chosen" in first[-1]["content"]
    assert "only if it is exactly the action you would have chosen" in second[-1]["content"]
    assert "exactly" not in first[-1]["content"].split("accepted_prefix is")[0]


async def test_verifier_retries_a_prefix_longer_than_the_draft_once():
    v = verifier('{"accepted_prefix": 3, "reason": ""}', '{"accepted_prefix": 2, "reason": "", "repair": null}')
    review = await v.verify(HISTORY, BLOCK)
    assert review.verdict == Verdict(2, "", None) and review.usage == Usage(200, 120, 24)


async def test_verifier_gives_up_after_two_malformed_verdicts():
    v = verifier('{"accepted_prefix": 3, "reason": ""}', '{"accepted_prefix": 0, "reason": "x", "repair": "undo"}')
    with pytest.raises(MalformedOutput, match=r"accepted_prefix 3 outside 0..2; after one retry: repair malformed"):
        await v.verify(HISTORY, BLOCK)


# -- inside the real protocol loop -----------------------------------------------------------------

def parts(weak: LLMPolicy, strong: LLMPolicy, verify: LLMVerifier) -> Parts:
    tools = InMemoryTools({"lookup": ToolSpec(Effect.READ, SCHEMAS["lookup"], lambda id: f"order {id}: 50 USD"),
                           "refund": ToolSpec(Effect.WRITE, SCHEMAS["refund"])})
    return Parts(weak, strong, verify, tools, ScriptedUser(), Ledger())


async def test_weak_unknown_tool_is_never_executed_and_the_reason_is_recorded():
    run_parts = parts(weak=policy(RM_RF, RM_RF, STOP), strong=policy(LOOKUP),
                      verify=verifier('{"accepted_prefix": 1, "reason": "", "repair": null}'))
    traj = await run_specagent(Task("t", "Refund order a."), run_parts, SpecConfig(k=4, max_steps=10))
    assert [c.name for c in run_parts.tools.executed] == ["lookup"]  # rm_rf never ran
    assert [(s.action, s.author) for s in traj.steps] == [(Action.tool("lookup", id="a"), "strong"),
                                                          (Action.stop(), "weak")]
    [malformed] = [e for e in traj.events if e.kind == "malformed_output"]
    assert "unknown tool 'rm_rf'; after one retry: unknown tool 'rm_rf'" in malformed.detail
    assert traj.termination is Termination.AGENT_STOP
    verify_calls = [c for c in run_parts.ledger.calls if c.purpose == "verify"]
    assert [c.usage for c in verify_calls] == [USAGE]  # the engine's usage reaches the ledger


async def test_malformed_verdicts_become_a_full_rejection_in_the_loop():
    refund = json.dumps({"kind": "tool", "name": "refund", "arguments": {"id": "a", "amount": 5}})
    run_parts = parts(weak=policy(LOOKUP, refund, STOP), strong=policy(STOP),
                      verify=verifier("no", '{"accepted_prefix": 9, "reason": ""}'))
    traj = await run_specagent(Task("t", "Refund order a."), run_parts, SpecConfig(k=4, max_steps=10))
    assert [c.name for c in run_parts.tools.executed] == ["lookup"]  # the staged refund never ran
    [rejected] = [e for e in traj.events if e.kind == "rejected"]
    assert rejected.detail.startswith("malformed verdict: invalid JSON")
    assert "after one retry: accepted_prefix 9 outside 0..2" in rejected.detail
    assert [s.author for s in traj.steps] == ["strong"] and traj.termination is Termination.AGENT_STOP
