"""A parallel write in a served session: each accepted call gets its own intent and key, made durable before
it runs; a crash between two accepted writes of one action runs neither twice; a committed parallel step
settles all its keys, also after a restart."""

from __future__ import annotations

import pytest

from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import Action, Effect, Parts, SpecConfig, Task, Verdict, run_specagent
from specagent_ray.protocol.types import Observation, ToolCall
from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.sessions.runner import SessionTools
from specagent_ray.serve.sessions.session import Session
from specagent_ray.tools.scripted import object_schema

W1, W2 = ToolCall("refund", {"id": "a", "amount": 5}), ToolCall("refund", {"id": "b", "amount": 7})
READ = ToolCall("lookup", {"id": "a"})
CATALOG = Catalog({"refund": object_schema(id="string", amount="integer"), "lookup": object_schema(id="string")},
                  {"refund": Effect.WRITE, "lookup": Effect.READ})


class Crash(BaseException):
    """The coordinator's process dies here: nothing after it runs, the session log keeps what it had."""


class ToolHost:
    """Runs each key's write once and answers a spent key with its first result, as the real one does. With
    ``crash=(call, when)`` the coordinator dies around that call: before it runs, or after it ran but
    before the answer came back."""

    def __init__(self, crash: tuple[ToolCall, str] | None = None):
        self.crash, self.runs, self.results = crash, {}, {}
        self.effects: dict[str, int] = {}  # call -> how often it really ran, under any key

    async def run(self, call: ToolCall, key: str | None) -> Observation:
        if self.crash and self.crash[0] == call and self.crash[1] == "before":
            self.crash = None
            raise Crash
        if key is not None and key in self.results:
            return self.results[key]
        self.runs[key or call.key()] = self.runs.get(key or call.key(), 0) + 1
        self.effects[call.key()] = self.effects.get(call.key(), 0) + 1
        obs = Observation(f"done {call.arguments['id']}")
        if key is not None:
            self.results[key] = obs
        if self.crash and self.crash[0] == call and self.crash[1] == "after":
            self.crash = None
            raise Crash
        return obs


def session(records: list[dict]) -> Session:
    request = CreateSession(tool_source="airline", task_id="0", user="client", message="hi")
    return Session("s1", request, Task("0", "hi"), log=lambda sid, record, data: records.append(data))


async def nothing() -> None:
    return None


async def run(s: Session, host: ToolHost, weak, verdicts) -> None:
    tools = SessionTools(s, CATALOG, host.run, nothing)
    parts = Parts(ScriptedPolicy(weak), ScriptedPolicy([Action.stop()]), ScriptedVerifier(verdicts), tools,
                  ScriptedUser(), s.ledger, journal=s)
    await run_specagent(s.task, parts, SpecConfig(k=3, parallel_calls=True))


async def restarted(records: list[dict], host: ToolHost) -> tuple[Session, list[dict]]:
    """The session rebuilt from ``records`` after a restart, its intents finished; and the records it added."""
    added: list[dict] = []
    s = session(added)
    s.restore(records)
    await SessionTools(s, CATALOG, host.run, nothing).finish_intents()
    return s, added


async def test_a_committed_parallel_write_settles_every_key_and_a_restart_runs_none_again():
    records, host = [], ToolHost()
    s = session(records)
    await run(s, host, [Action.parallel([READ, W1, W2]), Action.stop()], [])
    step = next(x for x in s.steps if x.effect is Effect.WRITE and x.action.more)
    assert step.action.calls == (READ, W1, W2) and step.author == "weak"
    assert [i.author for i in s.intents.values()] == ["weak", "weak"]
    assert next(r for r in records if r["t"] == "commit" and r["steps"][0]["action"].get("more"))["keys"] == \
        [[None, "s1:w0", "s1:w1"]]
    again, added = await restarted(records, host)
    assert again.unresolved_intents() == [] and added == [] and host.runs == {"s1:w0": 1, "s1:w1": 1, READ.key(): 1}
    assert [x.action for x in again.steps] == [x.action for x in s.steps]


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("crash_at", [W1, W2])
async def test_a_crash_between_the_accepted_writes_of_one_action_runs_neither_twice(crash_at, when):
    records, host = [], ToolHost(crash=(crash_at, when))
    with pytest.raises(Crash):
        await run(session(records), host, [Action.parallel([W1, W2])], [])
    again, added = await restarted(records, host)
    assert again.unresolved_intents() == []
    assert host.effects == {c.key(): 1 for c in (W1, W2)[:len(host.effects)]}  # each write ran once, in order
    committed = [x.action.call for x in again.steps]
    assert committed == [c for c in (W1, W2) if c.key() in host.effects] and all(x.author == "weak" for x in again.steps)
    third, more = await restarted(records + added, host)  # and a second restart runs nothing
    assert third.unresolved_intents() == [] and more == [] and all(n == 1 for n in host.effects.values())


async def test_a_rejected_call_of_a_parallel_write_never_gets_an_intent():
    records, host = [], ToolHost()
    s = session(records)
    await run(s, host, [Action.parallel([W1, W2]), Action.stop()], [Verdict(1, "not b", calls=(True, False))])
    assert [i.call.arguments["id"] for i in s.intents.values()] == ["a"]
    assert host.runs == {"s1:w0": 1}


async def test_a_strong_write_that_repeats_a_call_the_weak_model_ran_is_labelled_strong():
    records, host = [], ToolHost()
    s = session(records)
    tools = SessionTools(s, CATALOG, host.run, nothing)
    invalid = Action.tool("refund", id="a")  # no amount: refused, so the strong model repairs
    parts = Parts(ScriptedPolicy([Action.parallel([W1]), invalid]), ScriptedPolicy([Action.parallel([W1]), Action.stop()]),
                  ScriptedVerifier([]), tools, ScriptedUser(), s.ledger, journal=s)
    await run_specagent(s.task, parts, SpecConfig(k=3))
    assert [i.author for i in s.intents.values()] == ["weak", "strong"]
