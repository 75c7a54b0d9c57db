"""Safety property: a weak-authored WRITE reaches a tool only with an accepting verdict.

Hypothesis drives the real loop with random scripts: weak and strong outputs mixing valid reads and
writes, parallel actions of several calls, schema-breaking calls, unknown tools, messages, stops and
malformed output, and random verdicts including out-of-range prefixes, booleans, strings, malformed
output and per-call answers of every shape (with parallel calls on or off). Approval is call by call. A referee tool
adapter checks provenance, by object identity, at the moment a write would run. It runs on a synthetic
tool table and on the real tables of tau2 telecom (where the user's own tools are unknown to the agent)
and of a BFCL case (its reviewed READ/WRITE table and its function docs).
"""

from __future__ import annotations

import asyncio
import functools

import pytest

from hypothesis import HealthCheck, example, given, settings, strategies as st

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import (
    Action, Effect, MalformedOutput, Observation, Parts, SpecConfig, Task, ToolCall, Verdict, run_specagent,
)
from specagent_ray.tools.schema import SchemaValidator
from specagent_ray.tools.scripted import object_schema

SCHEMAS = {"read": object_schema(id="string"), "write": object_schema(id="string", amount="integer")}
EFFECTS = {"read": Effect.READ, "write": Effect.WRITE}

COMMON = {
    "message": lambda: Action.message("hello"),
    "empty_message": lambda: Action.message(""),
    "stop": Action.stop,
    "malformed": lambda: MalformedOutput("bad json"),
}
# Each kind builds a fresh object, so identity tells who authored an action.
KINDS = {
    "read": lambda: Action.tool("read", id="a"),
    "write": lambda: Action.tool("write", id="a", amount=1),
    "bad_args": lambda: Action.tool("write", id="a", amount="one"),
    "missing_arg": lambda: Action.tool("write", id="a"),
    "unknown": lambda: Action.tool("drop_table", name="users"),
    "parallel_reads": lambda: Action.parallel([ToolCall("read", {"id": "a"}), ToolCall("read", {"id": "b"})]),
    "parallel_writes": lambda: Action.parallel([ToolCall("write", {"id": "a", "amount": 1}),
                                                ToolCall("write", {"id": "b", "amount": 2})]),
    "mixed": lambda: Action.parallel([ToolCall("read", {"id": "a"}), ToolCall("write", {"id": "a", "amount": 1})]),
    "parallel_bad": lambda: Action.parallel([ToolCall("write", {"id": "a", "amount": 1}),
                                             ToolCall("write", {"id": "b", "amount": "two"})]),
    **COMMON,
}
TELECOM = {
    "read": lambda: Action.tool("get_customer_by_id", customer_id="C1001"),
    "write": lambda: Action.tool("refuel_data", customer_id="C1001", line_id="L1001", gb_amount=2.0),
    "bad_args": lambda: Action.tool("refuel_data", customer_id="C1001", line_id="L1001", gb_amount="two"),
    "missing_arg": lambda: Action.tool("refuel_data", customer_id="C1001"),
    "unknown": lambda: Action.tool("toggle_airplane_mode"),  # the user's tool: never the agent's
    "parallel_reads": lambda: Action.parallel([ToolCall("get_customer_by_id", {"customer_id": "C1001"}),
                                               ToolCall("get_customer_by_id", {"customer_id": "C1002"})]),
    "parallel_writes": lambda: Action.parallel([
        ToolCall("refuel_data", {"customer_id": "C1001", "line_id": "L1001", "gb_amount": 2.0}),
        ToolCall("refuel_data", {"customer_id": "C1001", "line_id": "L1002", "gb_amount": 1.0})]),
    "mixed": lambda: Action.parallel([ToolCall("get_customer_by_id", {"customer_id": "C1001"}), ToolCall(
        "refuel_data", {"customer_id": "C1001", "line_id": "L1001", "gb_amount": 2.0})]),
    "parallel_bad": lambda: Action.parallel([
        ToolCall("refuel_data", {"customer_id": "C1001", "line_id": "L1001", "gb_amount": 2.0}),
        ToolCall("toggle_airplane_mode", {})]),
    **COMMON,
}
BFCL = {
    "read": lambda: Action.tool("ls", a=True),
    "write": lambda: Action.tool("mkdir", dir_name="temp"),
    "bad_args": lambda: Action.tool("mkdir", dir_name="temp", mode=7),
    "missing_arg": lambda: Action.tool("mkdir"),
    "unknown": lambda: Action.tool("place_order", order_type="Buy", symbol="AAPL", price=1.0, amount=1),
    "parallel_reads": lambda: Action.parallel([ToolCall("ls", {"a": True}), ToolCall("ls", {"a": False})]),
    "parallel_writes": lambda: Action.parallel([ToolCall("mkdir", {"dir_name": "a"}),
                                                ToolCall("mkdir", {"dir_name": "b"})]),
    "mixed": lambda: Action.parallel([ToolCall("ls", {"a": True}), ToolCall("mkdir", {"dir_name": "temp"})]),
    "parallel_bad": lambda: Action.parallel([ToolCall("mkdir", {"dir_name": "a"}), ToolCall("mkdir", {})]),
    **COMMON,
}


@functools.cache
def world(name: str):
    """(action kinds, validator, classify) of a tool table, built once: a validator checks its schemas
    when it is built, which costs more than the example it serves."""
    if name == "telecom":
        from specagent_ray.tools.tau2 import Tau2Domain

        d = Tau2Domain.load("telecom")
        return TELECOM, SchemaValidator(d.tool_schemas), lambda call: d.effect(call.name)
    if name == "bfcl":
        from specagent_ray.tools.bfcl import effect, load_cases

        case = load_cases("base")["multi_turn_base_0"]  # TwitterAPI and GorillaFileSystem
        return BFCL, SchemaValidator(case.tools(typed=False)), lambda call: effect(call.name)
    return KINDS, SchemaValidator(SCHEMAS), lambda call: EFFECTS.get(call.name, Effect.WRITE)


class Referee:
    """Tool adapter that fails the example if a write runs without provenance. It notes each violation and
    ``check`` asserts there were none: an exception raised here would reach the run as the tool's failure,
    which the runtime turns into an error observation (so an ``assert`` here could never fail a test)."""

    def __init__(self, validator: SchemaValidator | None = None, classify=None) -> None:
        self.validator = validator or SchemaValidator(SCHEMAS)
        self._classify = classify or (lambda call: EFFECTS.get(call.name, Effect.WRITE))
        self.strong: set[int] = set()
        self.approved: set[int] = set()
        self.writes = 0
        self.violations: list[str] = []

    def classify(self, call: ToolCall) -> Effect:
        return self._classify(call)

    def validate(self, call: ToolCall) -> str | None:
        return self.validator.check(call)

    async def execute(self, call: ToolCall) -> Observation:
        if self.validate(call) is not None:
            self.violations.append(f"invalid call executed: {call}")
        if self.classify(call) is Effect.WRITE:
            if id(call) not in self.strong and id(call) not in self.approved:
                self.violations.append(f"unverified weak write: {call}")
            self.writes += 1
        return Observation("ok")


class WatchedStrong(ScriptedPolicy):
    def __init__(self, items, referee: Referee):
        super().__init__(items)
        self.referee = referee

    async def propose(self, history, draft=(), feedback=None):
        proposal = await super().propose(history, draft, feedback)
        self.referee.strong.update(id(c) for c in proposal.action.calls)
        return proposal


class WatchedVerifier(ScriptedVerifier):
    """Marks the staged calls approved only for a verdict that accepts the whole block: all of them, or with
    per-call answers (one bool per staged call, else none) those answered True. Written from the rule, not
    from ``Verdict.checked``, so that a bug there is caught here."""

    def __init__(self, items, referee: Referee):
        super().__init__(items)
        self.referee = referee

    async def verify(self, history, block):
        review = await super().verify(history, block)
        v = review.verdict
        j = v.accepted_prefix
        if type(j) is int and j == len(block) and block and block[-1].staged:
            staged, answers = block[-1].action.calls, v.calls
            if answers is None:
                answers = (True,) * len(staged)
            if type(answers) is tuple and len(answers) == len(staged) and all(type(a) is bool for a in answers):
                self.referee.approved.update(id(c) for c, ok in zip(staged, answers) if ok)
        if isinstance(v.repair, Action):
            self.referee.strong.update(id(c) for c in v.repair.calls)  # a fused repair is the strong model's step
        return review


kind = st.sampled_from(sorted(KINDS))
prefix = st.one_of(st.integers(-2, 8), st.booleans(), st.just("1"), st.none())
per_call = st.one_of(st.none(), st.tuples(st.booleans(), st.booleans()),  # well formed for two staged calls
                     st.lists(st.one_of(st.booleans(), st.just(1), st.none()), max_size=3).map(tuple))
verdict = st.one_of(
    st.tuples(prefix, st.one_of(st.none(), kind), per_call).map(
        lambda t: MalformedOutput("no prefix") if t[0] is None else
        Verdict(t[0], "r", None if t[1] in (None, "malformed") else KINDS[t[1]](), calls=t[2])),
    st.just("malformed"),
)


def scenarios(examples: int):
    return lambda f: settings(max_examples=examples, deadline=None, derandomize=True,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])(
        given(weak=st.lists(kind, max_size=25), strong=st.lists(kind, max_size=10),
              verdicts=st.lists(verdict, max_size=10), k=st.integers(1, 6), max_steps=st.integers(1, 20),
              review_messages=st.booleans(), parallel=st.booleans(), caps=st.one_of(st.none(), st.lists(st.integers(-1, 8), max_size=12)))(f))


@pytest.mark.slow
@scenarios(10_000)
def test_no_weak_write_reaches_a_tool_without_an_accepting_verdict(**scenario):
    check(**scenario)


@example(weak=["read", "parallel_writes"], strong=["stop"], verdicts=[Verdict(2, "r", None, (True, False))], k=3,
         max_steps=5, review_messages=False, parallel=True, caps=None)  # one staged call accepted, one not
@example(weak=["mixed"], strong=[], verdicts=[Verdict(0, "r", None, (True, True))], k=2, max_steps=3,
         review_messages=False, parallel=True, caps=None)  # per-call answers on a rejected block
@scenarios(300)
def test_no_weak_write_reaches_a_tool_quick(**scenario):
    check(**scenario)


@pytest.mark.parametrize("table, examples", [("telecom", 100), ("bfcl", 100),
                                             pytest.param("telecom", 3_000, marks=pytest.mark.slow),
                                             pytest.param("bfcl", 3_000, marks=pytest.mark.slow)])
def test_no_weak_write_reaches_a_real_tool_table(table, examples):
    @scenarios(examples)
    def run(**scenario):
        check(**scenario, table=table)
    run()


class ScriptedCaps:
    """A speculation controller that answers the given caps in turn (0: the strong policy writes the step;
    out of range on purpose), then the configured K."""

    def __init__(self, caps, k):
        self.caps, self.k, self.last = list(caps), k, None

    def next_k(self, history):
        self.last = self.caps.pop(0) if self.caps else 99
        return self.last

    def drafted(self, block, staged):
        assert 1 <= min(self.last, self.k) and len(block) <= min(self.last, self.k)  # 0 drafts nothing

    def reviewed(self, block, accepted, separate_repair):
        assert block[-1].staged and 0 <= accepted <= len(block)


def check(weak, strong, verdicts, k, max_steps, review_messages, parallel=False, table="synthetic", caps=None):
    kinds, validator, classify = world(table)
    referee = Referee(validator, classify)
    verdicts = [MalformedOutput("unparseable") if v == "malformed" else v for v in verdicts]
    verdicts = [Verdict(v.accepted_prefix, v.reason, _in(kinds, v.repair), v.calls) if isinstance(v, Verdict) else v
                for v in verdicts]
    parts = Parts(ScriptedPolicy([kinds[w]() for w in weak]), WatchedStrong([kinds[s]() for s in strong], referee),
                  WatchedVerifier(verdicts, referee), referee, ScriptedUser(), Ledger(),
                  block_size=None if caps is None else ScriptedCaps(caps, k))
    traj = asyncio.run(run_specagent(Task("t", "x"), parts, SpecConfig(
        k=k, max_steps=max_steps, review_messages=review_messages, parallel_calls=parallel)))
    assert referee.violations == []
    assert len(traj.steps) <= max_steps
    for step in traj.steps:  # and every committed weak write was reviewed and accepted, call by call
        if step.author == "weak" and step.effect is Effect.WRITE:
            assert all(id(c) in referee.approved for c in step.action.calls)
        assert parallel or len(step.action.calls) <= 1
    if table != "synthetic":  # the real table's kinds classify as intended
        assert classify(kinds["read"]().call) is Effect.READ and classify(kinds["write"]().call) is Effect.WRITE
        assert all(validator.check(kinds[k]().call) for k in ("bad_args", "missing_arg", "unknown"))
        assert all(validator.check(c) is None for k in ("parallel_reads", "parallel_writes", "mixed")
                   for c in kinds[k]().calls)
        assert any(validator.check(c) for c in kinds["parallel_bad"]().calls)


def _in(kinds, repair):
    """A verdict's repair, rebuilt in the table's own kinds (strategies draw the synthetic ones)."""
    if not isinstance(repair, Action):
        return repair
    for name, make in KINDS.items():
        if name in kinds and isinstance(make(), Action) and make().key() == repair.key():
            return kinds[name]()
    return repair
