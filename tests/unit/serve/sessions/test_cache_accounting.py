"""Delivered against predicted prefix-cache hits: the prompt layout's prediction (``PromptTrail``), the
coordinator's running sums and per-session shares (``reports.Metrics``), and old logs without it."""

from __future__ import annotations

import types

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.llm import PromptTrail
from specagent_ray.protocol.interfaces import CallRecord
from specagent_ray.protocol.types import Usage
from specagent_ray.serve.log.records import parse
from specagent_ray.serve.sessions.reports import Metrics
from specagent_ray.serve.log.wire import call_dict, call_from


def test_the_prediction_is_the_prefix_the_previous_prompt_shares():
    trail = PromptTrail()
    system = {"role": "system", "content": "policy " * 200}
    assert trail.predicted([system, {"role": "user", "content": "a"}], 1000) == 0  # nothing sent before
    again = trail.predicted([system, {"role": "user", "content": "b"}], 1000)
    assert 950 < again < 1000  # all but the last message's tail
    assert trail.predicted([{"role": "system", "content": "other " * 200}], 1000) < 50  # a new conversation


def test_running_sums_and_session_shares_by_role():
    m = Metrics()
    seen = []
    m.on_session = seen.append
    calls = [call_dict(CallRecord("strong", "verify", Usage(1000, 600, 5, 900), 0.1)),
             call_dict(CallRecord("weak", "draft", Usage(500, 400, 5, 400), 0.1))]
    m.count(parse({"t": "calls", "calls": calls}))
    m.count(parse({"t": "calls", "calls": [{**calls[0], "usage": [1000, 200, 5]}]}))  # an older log's record
    ledger = Ledger()
    for c in calls:
        ledger.record(call_from(c))
    session = types.SimpleNamespace(status="done", ledger=ledger)
    m.finish(session)
    stats = m.cache_stats()
    assert stats["strong"]["prompt_tokens"] == 2000 and stats["strong"]["cached_tokens"] == 800
    assert stats["strong"]["predicted_cached_tokens"] == 900 and stats["strong"]["gap"] == 0.05
    assert stats["weak"]["cached_share"] == 0.8 and stats["weak"]["gap"] == 0.0
    assert stats["strong"]["session_cached_share"] == {"n": 1, "p10": 0.6, "p50": 0.6}
    assert m.finished == {"done": 1} and seen == [session]


def test_a_call_round_trips_with_its_prediction():
    call = CallRecord("strong", "prefill", Usage(10, 3, 1, 7), 0.5)
    assert call_from(call_dict(call)) == call
    assert call_from({"role": "strong", "purpose": "verify", "usage": [10, 3, 1], "wall_s": 0.1}).usage == Usage(10, 3, 1, 0)


def test_a_failing_metrics_exporter_never_fails_a_sessions_end():
    m = Metrics()

    def broken(session):
        raise ValueError("value must be >0, got 0")  # what Ray's Counter.inc(0) raises

    m.on_session = broken
    m.finish(types.SimpleNamespace(id="s", status="done", ledger=Ledger()))
    assert m.finished == {"done": 1}


def test_usage_counts_prefills_apart_from_the_calls_that_decode():
    from specagent_ray.serve.sessions.reports import usage_by_role

    ledger = Ledger()
    for purpose in ("prefill", "verify", "repair"):
        ledger.record(CallRecord("strong", purpose, Usage(100, 50, 1), 0.1))
    strong = usage_by_role(ledger)["strong"]
    assert strong["calls"] == 3 and strong["prefill_calls"] == 1 and strong["prompt_tokens"] == 300
