"""tau2 telecom, the dual-control domain: the user has tools of their own. The agent can neither
validate nor run them; the scripted user runs them on their side of the same environment when the agent
asks; grading is tau2's own (environment assertions, ACTION) over the messages, user calls included."""

import asyncio
from dataclasses import replace

import pytest

from specagent_ray.bench.quality.tau2_parts import simulated_parts
from specagent_ray.sim.gold import SimSettings
from specagent_ray.sim.policies import ErrorRates
from specagent_ray.sim.users import GoldUser
from specagent_ray.protocol import METHODS, Effect, SpecConfig, ToolCall
from specagent_ray.protocol.types import Observation, UserToolCall
from specagent_ray.serve.log.records import StepJson
from specagent_ray.serve.log.wire import observation_dict, observation_from
from specagent_ray.tools.tau2 import Grader, Tau2Domain, Tau2Tools

ZERO = replace(SimSettings.for_domain("telecom"), strong=ErrorRates(), weak=ErrorRates())  # its own style
AIRPLANE = ToolCall("toggle_airplane_mode", {})


@pytest.fixture(scope="module")
def telecom():
    return Tau2Domain.load("telecom")


def user_side_task(d):
    """A base task whose gold path has the user act and is graded on environment assertions."""
    return next(t for t in d.base if any(a.requestor == "user" for a in d.tasks[t].evaluation_criteria.actions or ())
                and d.tasks[t].evaluation_criteria.env_assertions)


def solve(d, task_id, settings=ZERO, user=None):
    task, parts = simulated_parts(d, task_id, 0, settings)
    if user is not None:
        parts = replace(parts, user=user)
    traj = asyncio.run(METHODS["strong"](task, parts, SpecConfig()))
    return Grader(d).reward(task_id, traj, task.instruction), parts, traj


def test_the_domain_ships_its_base_split_and_the_users_own_tools(telecom):
    assert len(telecom.base) == 114 and len(telecom.tasks) == 2285
    assert {"toggle_airplane_mode", "reboot_device", "check_status_bar"} <= set(telecom.user_tool_schemas)
    assert not set(telecom.user_tool_schemas) & set(telecom.tool_schemas)  # the two sides share no tool


def test_the_agent_can_neither_validate_nor_run_a_user_tool(telecom):
    tools = Tau2Tools(telecom, task=telecom.tasks[user_side_task(telecom)])
    assert tools.classify(AIRPLANE) is Effect.WRITE and "unknown tool" in tools.validate(AIRPLANE)
    obs = asyncio.run(tools.execute(AIRPLANE))  # even if a caller skipped validation: tau2 refuses it
    assert obs.error and not tools.user_executed
    with pytest.raises(ValueError, match="not a user tool"):
        tools.execute_user(ToolCall("get_customer_by_id", {"customer_id": "C1001"}))


def test_environments_start_in_their_tasks_initial_state_as_tau2_sets_it(telecom):
    from tau2.domains.telecom.environment import get_environment

    for task_id in telecom.base[:10]:
        task = telecom.tasks[task_id]
        ours, native = telecom.new_environment(task=task), get_environment()
        s = task.initial_state
        native.set_state(s.initialization_data, s.initialization_actions, s.message_history or [])
        assert ours.get_db_hash() == native.get_db_hash() and ours.get_user_db_hash() == native.get_user_db_hash()


def test_gold_with_the_users_own_calls_scores_1_and_without_them_0(telecom):
    task_id = user_side_task(telecom)
    reward, parts, traj = solve(telecom, task_id)
    assert reward == 1.0 and parts.tools.user_executed and not any(
        c.name in telecom.user_tool_schemas for c in parts.tools.executed)
    calls = [u for s in traj.steps if s.observation for u in s.observation.user_calls]
    assert [u.call for u in calls] == parts.tools.user_executed  # graded from the trajectory itself
    reward, _, _ = solve(telecom, task_id, user=GoldUser())  # a user who never acts on their phone
    assert reward == 0.0


def test_a_user_call_survives_the_session_logs_json(telecom):
    obs = Observation("Done.", user_calls=(UserToolCall(AIRPLANE, "Airplane mode is now OFF.", False),))
    assert observation_from(observation_dict(obs)) == obs
    assert "user_calls" not in observation_dict(Observation("Thank you."))  # other domains: unchanged form
    step = {"action": {"kind": "message", "text": "Please toggle it."}, "observation": observation_dict(obs),
            "author": "strong", "effect": "write"}
    assert StepJson.model_validate(step).model_dump(mode="json")["observation"] == observation_dict(obs)


def test_zero_error_strong_only_solves_every_base_task(telecom):
    rewards = [solve(telecom, t)[0] for t in telecom.base]
    assert rewards == [1.0] * 114


def test_calls_the_user_made_before_their_first_message_are_graded_too(telecom):
    task_id = next(t for t in telecom.base if (telecom.tasks[t].evaluation_criteria.actions or [None])[0] is not None
                   and telecom.tasks[t].evaluation_criteria.actions[0].requestor == "user"
                   and telecom.tasks[t].evaluation_criteria.env_assertions)  # the user acts first
    first = telecom.tasks[task_id].evaluation_criteria.actions[0]
    task, parts = simulated_parts(telecom, task_id, 0, ZERO)
    early = parts.tools.execute_user(ToolCall(first.name, dict(first.arguments)))  # before the conversation
    gold = GoldUser([ToolCall(a.name, dict(a.arguments)) for a in telecom.tasks[task_id].evaluation_criteria.actions
                     if a.requestor == "user"][1:], parts.tools.execute_user)
    traj = asyncio.run(METHODS["strong"](task, replace(parts, user=gold), SpecConfig()))
    grader = Grader(telecom)
    assert grader.reward(task_id, traj, task.instruction, (early,)) == 1.0
    try:
        without = grader.reward(task_id, traj, task.instruction)
    except ValueError:  # tau2 cannot replay a record that misses the user's early call
        without = 0.0
    assert without == 0.0
