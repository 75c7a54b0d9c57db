"""The tau2 adapter on the real airline and retail environments (telecom: test_tau2_telecom.py)."""

import asyncio

import pytest

from specagent_ray.bench.quality.tau2_parts import simulated_parts
from specagent_ray.sim.gold import SimSettings
from specagent_ray.sim.policies import ErrorRates
from specagent_ray.protocol import METHODS, Effect, SpecConfig, ToolCall
from specagent_ray.tools.tau2 import Grader, Tau2Domain, Tau2Tools


@pytest.fixture(scope="module")
def airline():
    return Tau2Domain.load("airline")


@pytest.mark.parametrize("tool, effect", [
    ("get_user_details", Effect.READ), ("search_direct_flight", Effect.READ), ("calculate", Effect.READ),
    ("book_reservation", Effect.WRITE), ("cancel_reservation", Effect.WRITE),
    ("transfer_to_human_agents", Effect.WRITE), ("no_such_tool", Effect.WRITE),
])
def test_classification_follows_tau2_tool_types(airline, tool, effect):
    assert Tau2Tools(airline).classify(ToolCall(tool, {})) is effect


def test_every_tau2_tool_is_classified_from_its_tag(airline):
    for name, tag in airline.tool_types.items():
        expected = Effect.READ if tag == "read" or name == "calculate" else Effect.WRITE
        assert airline.effect(name) is expected


@pytest.mark.parametrize("call, reason", [
    (ToolCall("cancel_everything", {}), "unknown tool"),
    (ToolCall("get_user_details", {}), "'user_id' is a required property"),
    (ToolCall("get_user_details", {"user_id": 7}), "is not of type 'string'"),
    (ToolCall("book_reservation", {"cabin": "first"}), "book_reservation"),
])
def test_validation_against_tool_schemas(airline, call, reason):
    got = Tau2Tools(airline).validate(call)
    assert got is not None and reason in got


def test_valid_call_passes_and_executes(airline):
    tools = Tau2Tools(airline)
    call = ToolCall("get_user_details", {"user_id": "mia_li_3668"})
    assert tools.validate(call) is None
    obs = asyncio.run(tools.execute(call))
    assert not obs.error and "mia_li_3668" in obs.content


def test_tool_failure_is_an_error_observation(airline):
    obs = asyncio.run(Tau2Tools(airline).execute(ToolCall("get_user_details", {"user_id": "nobody"})))
    assert obs.error and "Error" in obs.content


def test_environments_do_not_share_state(airline):
    a, b = Tau2Tools(airline), Tau2Tools(airline)
    cancel = ToolCall("cancel_reservation", {"reservation_id": "EHGLP3"})
    asyncio.run(a.execute(cancel))
    assert a.env.get_db_hash() != b.env.get_db_hash()


def test_grader_rewards_gold_and_punishes_a_wrong_write(airline):
    grader = Grader(airline)
    zero = SimSettings(strong=ErrorRates(), weak=ErrorRates())
    task, parts = simulated_parts(airline, "2", 0, zero)  # gold: send_certificate(noah_muller_9847, 50)
    traj = asyncio.run(METHODS["strong"](task, parts, SpecConfig()))
    assert grader.reward("2", traj, task.instruction) == 1.0
    wrong = SimSettings(strong=ErrorRates(wrong_arg=1.0), weak=ErrorRates())
    task, parts = simulated_parts(airline, "2", 0, wrong)
    traj = asyncio.run(METHODS["strong"](task, parts, SpecConfig()))
    assert grader.reward("2", traj, task.instruction) == 0.0


def test_specagent_on_tau2_never_executes_a_rejected_write(airline):
    """Weak always writes a wrong argument; a verifier that never falsely accepts stops every one."""
    from specagent_ray.sim.policies import VerifierRates

    settings = SimSettings(weak=ErrorRates(wrong_arg=1.0), strong=ErrorRates(),
                           verifier=VerifierRates(false_accept=0.0, false_reject=0.0, fused_repair=0.5))
    task, parts = simulated_parts(airline, "2", 0, settings)
    traj = asyncio.run(METHODS["specagent"](task, parts, SpecConfig()))
    writes = [c for c in parts.tools.executed if airline.effect(c.name) is Effect.WRITE]
    assert writes == [ToolCall("send_certificate", {"user_id": "noah_muller_9847", "amount": 50})]
    assert traj.count("rejected") >= 1 and Grader(airline).reward("2", traj, task.instruction) == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("domain, n", [("airline", 50), ("retail", 114), ("telecom", 2285)])
def test_zero_error_strong_only_solves_every_task(domain, n):
    """Every task tau2 ships (telecom: all 2,285, not only the 114 of its base split)."""
    d = Tau2Domain.load(domain)
    grader = Grader(d)
    zero = SimSettings(strong=ErrorRates(), weak=ErrorRates())

    async def solve(task_id):
        task, parts = simulated_parts(d, task_id, 0, zero)
        traj = await METHODS["strong"](task, parts, SpecConfig())
        return grader.reward(task_id, traj, task.instruction)

    rewards = [asyncio.run(solve(t)) for t in d.tasks]
    assert len(rewards) == n
    assert sum(rewards) == n



def check_copy_on_read(domain: str, limit: int | None) -> None:
    """Gold actions run in a copy-on-read environment and in a full copy of the DB leave identical DB
    hashes, and the shared pristine DB is never changed."""
    import pickle

    from specagent_ray.tools.tau2 import _shared_db

    d = Tau2Domain.load(domain)
    pristine_hash = d._make_env(db=pickle.loads(d._pristine)).get_db_hash()
    tasks = [t for t in d.tasks.values() if any(d.effect(a.name) is Effect.WRITE
                                                for a in t.evaluation_criteria.actions or ())][:limit]
    assert len(tasks) >= min(limit or 20, 20)
    for task in tasks:
        lazy, full = Tau2Tools(d), Tau2Tools(d, env=d._make_env(db=pickle.loads(d._pristine)))
        for action in task.evaluation_criteria.actions or ():
            call = ToolCall(action.name, action.arguments)
            assert asyncio.run(lazy.execute(call)) == asyncio.run(full.execute(call)), (task.id, action.name)
        assert lazy.env.get_db_hash() == full.env.get_db_hash(), task.id
    shared = d._make_env(db=pickle.loads(pickle.dumps(_shared_db(domain, d._pristine))))
    assert shared.get_db_hash() == pristine_hash


@pytest.mark.parametrize("domain", [pytest.param("airline", marks=pytest.mark.slow), "retail"])  # 6 s CPU
def test_copy_on_read_environments_end_in_the_same_db_as_full_copies(domain):
    check_copy_on_read(domain, limit=6)


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_copy_on_read_environments_match_full_copies_on_every_task(domain):
    check_copy_on_read(domain, limit=None)


def test_a_parallel_step_reaches_tau2_as_one_assistant_message_with_each_call_and_its_result(airline):
    from specagent_ray.protocol.types import Action, Observation, Step
    from specagent_ray.tools.tau2 import to_tau2_messages

    calls = [ToolCall("get_user_details", {"user_id": "mia_li_3668"}),
             ToolCall("get_reservation_details", {"reservation_id": "NO6JO3"})]
    tools = Tau2Tools(airline)
    parts = tuple(asyncio.run(tools.execute(c)) for c in calls)
    step = Step(Action.parallel(calls), Observation.of_calls(calls, parts), "weak", Effect.READ)
    single = Step(Action.parallel(calls[:1]), parts[0], "weak", Effect.READ)
    messages = to_tau2_messages(_trajectory([single, step]), "hi")
    assistant = [m for m in messages if m.role == "assistant"]
    assert [len(m.tool_calls) for m in assistant] == [1, 2]
    assert [c.name for c in assistant[1].tool_calls] == [c.name for c in calls]
    results = [m for m in messages if m.role == "tool"]
    assert [r.id for r in results] == ["call_0", "call_1_0", "call_1_1"]
    assert [r.content for r in results[1:]] == [p.content for p in parts]


def _trajectory(steps):
    from specagent_ray.protocol.types import History, Task, Termination, Trajectory

    history = History(Task("t", "hi"))
    return Trajectory(history.commit(tuple(steps)), Termination.AGENT_STOP, [])


@pytest.mark.parametrize("weak_errs", [False, True])
def test_parallel_gold_writes_run_once_each_and_a_rejected_call_never_runs(weak_errs):
    """Retail task 11's gold path holds a group of independent writes. Parallel calls on, a judge without
    noise: every gold write runs exactly once, and a weak write with a wrong argument (always, with
    ``weak_errs``) never runs; the task is solved."""
    from dataclasses import replace

    from specagent_ray.sim.policies import VerifierRates

    retail = Tau2Domain.load("retail")
    settings = replace(SimSettings(strong=ErrorRates(), weak=ErrorRates(wrong_arg=1.0 if weak_errs else 0.0),
                                   verifier=VerifierRates(false_accept=0.0, false_reject=0.0)), parallel=True)
    task, parts = simulated_parts(retail, "11", 0, settings)
    traj = asyncio.run(METHODS["specagent"](task, parts, SpecConfig(parallel_calls=True)))
    gold = [ToolCall(a.name, a.arguments) for a in retail.tasks["11"].evaluation_criteria.actions
            if retail.effect(a.name) is Effect.WRITE]
    writes = [c for c in parts.tools.executed if retail.effect(c.name) is Effect.WRITE]
    assert sorted(w.key() for w in writes) == sorted(g.key() for g in gold)
    assert Grader(retail).reward("11", traj, task.instruction) == 1.0
    if weak_errs:  # one call of the group was wrong: the others ran, it was repaired
        assert traj.count("calls_accepted") >= 1 and traj.count("rejected") >= 1
    else:
        assert any(s.action.more and s.effect is Effect.WRITE for s in traj.steps)  # the group ran as one step
