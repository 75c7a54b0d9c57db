"""Prefill ahead of the verify (serve/engines/prefill_ahead.py) and the priorities the OpenAI engine client sends,
against a recording backend. Real vLLM's cached tokens: tests/integration/test_engines.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import types

import pytest

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.backend import BackendError, Completion
from specagent_ray.protocol.types import Action, Effect, History, Observation, Step, Task, Usage
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.core.config import CoordinatorConfig, Endpoint, OpenAIEngines
from specagent_ray.serve.engines.engine_client import OpenAIEngineClient

VERDICT = '{"accepted_prefix": 1, "reason": "", "repair": null}'
ACTION = '{"kind": "tool", "name": "lookup", "arguments": {}}'


class Backend:
    """Answers a verdict where the schema asks for one, else an action."""

    def __init__(self, fail: bool = False):
        self.fail, self.calls = fail, []

    async def complete(self, messages, json_schema, max_tokens, temperature=0.0, headers=None, priority=None):
        self.calls.append({"messages": messages, "schema": json_schema, "max_tokens": max_tokens,
                           "priority": priority, "headers": headers})
        if self.fail:
            raise BackendError("verifier down")
        text = VERDICT if "accepted_prefix" in json.dumps(json_schema) else ACTION
        return Completion(text, Usage(100, 10, 1), "stop", "m")


def client(prefill_ahead=True, send_priority=True, kv_tokens=None, shards=1):
    engines = OpenAIEngines(drafter=Endpoint(url="http://127.0.0.1:9/v1", model="d", send_priority=send_priority),
                            verifier=Endpoint(url="http://127.0.0.1:9/v1", model="v", send_priority=send_priority),
                            prefill_ahead=prefill_ahead, verifier_kv_tokens=kv_tokens)
    c = OpenAIEngineClient(engines, CoordinatorConfig(batch_window_ms=1), {}, shards)
    c.drafter, c.verifier = Backend(), Backend()
    if c.ahead:
        c.ahead.backend = c.verifier
    return c


def session(sid="s1"):
    return types.SimpleNamespace(id=sid, outside=contextlib.nullcontext, ledger=Ledger(),
                                 request=types.SimpleNamespace(instructions=None, context=None))


CATALOG = Catalog({"lookup": {"type": "object", "properties": {}}, "book": {"type": "object", "properties": {}}},
                  {"lookup": Effect.READ, "book": Effect.WRITE}, "Be careful.")
H = History(Task("t", "Book me a flight."))
READ = Step(Action.tool("lookup"), Observation("found"), "weak", Effect.READ)
STAGED = Step(Action.tool("book"), None, "weak", Effect.WRITE)  # no observation: staged


async def settle(c):
    await asyncio.gather(*list(c.ahead.tasks))


async def test_a_block_start_prefills_the_leading_block_at_the_lowest_priority():
    c, s = client(), session()
    weak, _, judge = c.models(s, CATALOG)  # type: ignore[arg-type]
    await weak.propose(H)  # a block starts
    await settle(c)
    prefill, = c.verifier.calls
    assert prefill["max_tokens"] == 1 and prefill["schema"] is None
    assert prefill["headers"]["x-session-id"] == "s1"
    await weak.propose(H, [READ])  # the same block goes on: nothing more
    await judge.verify(H, [READ, STAGED])
    _, verify = c.verifier.calls
    assert verify["messages"][: len(prefill["messages"])] == prefill["messages"]  # the verify's leading block
    assert prefill["priority"] > c.drafter.calls[0]["priority"] > verify["priority"]  # prefill after drafts
    assert [(r.role, r.purpose) for r in s.ledger.calls] == [("strong", "prefill")]
    assert c.ahead.counts == {"sent": 1, "skipped": 0, "rewarmed": 0, "failed": 0}


async def test_a_history_the_last_verify_covered_is_not_prefilled_again():
    c, s = client(), session()
    weak, _, judge = c.models(s, CATALOG)  # type: ignore[arg-type]
    await weak.propose(H)
    await settle(c)
    await judge.verify(H, [READ, READ])
    accepted = History(H.task, (READ, READ))  # the whole block accepted: H' is a prefix of that prompt
    await weak.propose(accepted)
    assert c.ahead.counts["skipped"] == 1 and len(c.verifier.calls) == 2
    executed = History(H.task, (READ, READ, Step(Action.tool("book"), Observation("ok"), "weak", Effect.WRITE)))
    await weak.propose(executed)  # a write ran since: its result is new to the verifier
    await settle(c)
    assert c.ahead.counts["sent"] == 2 and len(c.verifier.calls) == 3


async def test_a_failed_prefill_never_reaches_the_session_and_is_tried_again():
    c, s = client(), session()
    c.verifier.fail = True
    weak, _, _ = c.models(s, CATALOG)  # type: ignore[arg-type]
    proposal = await weak.propose(H)
    await settle(c)
    assert proposal.action.call.name == "lookup" and c.ahead.counts["failed"] == 1 and not s.ledger.calls
    await weak.propose(H)  # not known to be cached: asked again
    await settle(c)
    assert c.ahead.counts["failed"] == 2


async def test_off_means_no_prefill_and_no_priorities_where_the_engines_do_not_take_them():
    c, s = client(prefill_ahead=False, send_priority=False), session()
    weak, _, judge = c.models(s, CATALOG)  # type: ignore[arg-type]
    await weak.propose(H)
    await judge.verify(H, [READ])
    assert c.ahead is None and len(c.verifier.calls) == 1
    assert c.verifier.calls[0]["priority"] is None and c.drafter.calls[0]["priority"] is None
    assert len(c.priority.waits["draft"]) == 1 and len(c.priority.waits["strong"]) == 1  # still ordered, measured


async def test_a_staged_write_and_its_repair_go_before_drafts_and_other_verifies():
    c = client(prefill_ahead=False)
    a, b = session("a"), session("b")
    weak_a, strong_a, judge_a = c.models(a, CATALOG)  # type: ignore[arg-type]
    _, _, judge_b = c.models(b, CATALOG)  # type: ignore[arg-type]
    await judge_a.verify(H, [READ, STAGED])
    await judge_b.verify(H, [READ])
    await strong_a.propose(H, (), "no")  # the repair of a's staged write
    await weak_a.propose(H)
    write, other, repair = (x["priority"] for x in c.verifier.calls)
    draft = c.drafter.calls[0]["priority"]
    assert write < other and repair < other and other < draft
    assert c.priority.strong_kind("a") == "strong"  # drafting again: a no longer waits on its write


@pytest.mark.parametrize("field", ["prefill_ahead", "send_priority"])
def test_both_switches_are_off_unless_a_profile_turns_them_on(field):
    engines = OpenAIEngines(drafter=Endpoint(url="http://x/v1", model="d"), verifier=Endpoint(url="http://x/v1", model="v"))
    assert getattr(engines if field == "prefill_ahead" else engines.verifier, field) is False


async def test_after_a_pause_longer_than_the_trust_the_prefix_is_warmed_again():
    """vLLM may have evicted it meanwhile: the block start prefills H again (the keep-warm)."""
    c, s = client(), session()
    now = [0.0]
    c.ahead.clock = lambda: now[0]
    c.ahead.trust_s = 30.0
    weak, _, judge = c.models(s, CATALOG)  # type: ignore[arg-type]
    await judge.verify(H, [READ])
    accepted = History(H.task, (READ,))
    now[0] = 29.0
    await weak.propose(accepted)
    assert c.ahead.counts["skipped"] == 1
    now[0] = 29.0 + 31.0  # the skip does not refresh the trust; the verify 60 s ago is too old now
    await weak.propose(accepted)
    await settle(c)
    assert c.ahead.counts["rewarmed"] == 1 and len(c.verifier.calls) == 2


@pytest.mark.parametrize("shards", [1, 2])
async def test_once_other_sessions_filled_half_the_verifier_kv_the_prefix_is_warmed_again(shards):
    """However soon: vLLM evicts least recently used blocks, and new KV of other sessions pushes this
    one's out. Each verifier call here computes 100 - 10 + 1 = 91 new tokens; a shard counts on its
    share of the KV."""
    c, s = client(kv_tokens=800 * shards, shards=shards), session()  # trusted while < 400 new tokens
    weak, _, judge = c.models(s, CATALOG)  # type: ignore[arg-type]
    _, _, other = c.models(session("s2"), CATALOG)  # type: ignore[arg-type]
    await judge.verify(H, [READ])
    accepted = History(H.task, (READ,))
    for _ in range(3):  # with s1's own verify: 4 x 91 = 364 new tokens since s1's verify was sent
        await other.verify(H, [READ, READ])
    await weak.propose(accepted)
    assert c.ahead.counts["skipped"] == 1
    await other.verify(H, [READ, READ])  # 455
    await weak.propose(accepted)
    await settle(c)
    assert c.ahead.counts["rewarmed"] == 1
    assert c.ahead.computed == 5 * 91 + 91  # five verifies, and the prefill's own new KV


async def test_a_malformed_verdict_s_new_kv_counts_too():
    """Random weights answer malformed verdicts; their prompts still fill the verifier's KV."""
    c, s = client(kv_tokens=10_000), session()
    _, _, judge = c.models(s, CATALOG)  # type: ignore[arg-type]

    async def garbled(*args, **kw):
        return Completion("not a verdict", Usage(100, 10, 1), "stop", "m")
    c.verifier.complete = garbled
    with pytest.raises(Exception):  # noqa: B017,PT011 - the retries' malformed verdict or the fallback's error
        await judge.verify(H, [READ, STAGED])
    assert c.ahead.computed >= 91


@pytest.mark.parametrize("send_priority", [False, True])
async def test_a_verify_waits_for_its_sessions_prefill_still_running(send_priority):
    """Sent alongside, the verify would compute H again (vLLM caches a block once it is computed); but
    where priorities are sent the engine serves the verify first, and waiting would invert them."""
    c, s = client(send_priority=send_priority), session()
    gate, order = asyncio.Event(), []
    answer = c.verifier.complete

    async def slow(messages, json_schema, max_tokens, temperature=0.0, headers=None, priority=None):
        if max_tokens == 1:
            await gate.wait()
        order.append("prefill" if max_tokens == 1 else "verify")
        return await answer(messages, json_schema, max_tokens, temperature, headers, priority)

    c.verifier.complete = slow
    weak, _, judge = c.models(s, CATALOG)  # type: ignore[arg-type]
    await weak.propose(H)
    verify = asyncio.ensure_future(judge.verify(H, [READ]))
    await asyncio.sleep(0.05)
    assert verify.done() == send_priority and order == ([] if not send_priority else ["verify"])
    gate.set()
    await verify
    await settle(c)
    assert order == (["prefill", "verify"] if not send_priority else ["verify", "prefill"]) and not c.ahead._running
