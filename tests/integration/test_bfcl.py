"""BFCL v4 multi-turn: the backends as the tool environment, the reviewed READ/WRITE table, and BFCL's own
multi-turn checker as the grader (bfcl-eval installed with --no-deps)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
import inspect

import pytest

from specagent_ray.bench.quality.bfcl_parts import bfcl_parts
from specagent_ray.tasks import benchmark
from specagent_ray.sim.gold import SimSettings
from specagent_ray.sim.policies import ErrorRates
from specagent_ray.protocol import METHODS, SpecConfig
from specagent_ray.protocol.types import Action, ActionKind, Effect, History, Observation, Step, Task, ToolCall
from specagent_ray.protocol.types import Termination, Trajectory
from specagent_ray.tools.bfcl import (
    CATEGORIES, EFFECTS, BfclTools, backend_class, call_string, effect, function_docs, load_cases, parse_call, reward,
)

ZERO = replace(SimSettings.for_domain("bfcl-base"), strong=ErrorRates(), weak=ErrorRates())  # its own style


def grade(domain: str, case_id: str, trajectory) -> float:
    bench = benchmark(domain)
    return bench.grade(bench.task(case_id), trajectory)


def test_every_function_of_every_backend_is_in_the_reviewed_table_and_nothing_else():
    for cls, table in EFFECTS.items():
        public = {n for n, _ in inspect.getmembers(backend_class(cls), inspect.isfunction) if not n.startswith("_")}
        assert public == set(table), (cls, public ^ set(table))
    assert set(function_docs()) == {f for table in EFFECTS.values() for f in table}  # every documented one too


@pytest.mark.parametrize("name, expected", [
    ("ls", Effect.READ), ("cat", Effect.READ), ("get_stock_info", Effect.READ), ("check_tire_pressure", Effect.READ),
    ("mkdir", Effect.WRITE), ("rm", Effect.WRITE), ("cd", Effect.WRITE), ("book_flight", Effect.WRITE),
    ("send_message", Effect.WRITE), ("get_current_speed", Effect.WRITE),  # draws from the backend's random state
    ("format_disk", Effect.WRITE),  # not in the table: a WRITE
])
def test_classification(name, expected):
    assert effect(name) is expected


def replay(case, calls_per_turn):
    """A committed trajectory that runs the given calls turn by turn, each turn closed by a message."""
    tools, steps = BfclTools(case), []
    for turn in calls_per_turn:
        for text in turn:
            call = parse_call(text)
            steps.append(Step(Action(ActionKind.TOOL, call), asyncio.run(tools.execute(call)), "strong", effect(call.name)))
        steps.append(Step(Action.message("Done."), Observation("next"), "strong", Effect.WRITE))
    return Trajectory(History(Task(case.id, case.turns[0]), tuple(steps)), Termination.USER_STOP)


@pytest.mark.parametrize("every", [pytest.param(1, marks=pytest.mark.slow), 8])  # all 200 in the slow tier
def test_the_gold_calls_pass_bfcls_checker_and_one_missing_write_fails_it(every):
    cases = load_cases("base")
    assert len(cases) == 200
    some = list(cases.values())[::every]
    assert sum(reward(c, replay(c, c.ground_truth)) for c in some) == len(some)
    case = next(c for c in cases.values() if effect(parse_call(c.ground_truth[-1][-1]).name) is Effect.WRITE)
    assert reward(case, replay(case, case.ground_truth[:-1] + (case.ground_truth[-1][:-1],))) == 0.0


def test_a_backend_keeping_an_argument_list_cannot_rewrite_the_committed_call():
    case = load_cases("base")["multi_turn_base_90"]  # post_tweet(mentions=[...]) then mention(...) on that tweet
    tools = BfclTools(case)
    calls = [parse_call(c) for turn in case.ground_truth for c in turn]
    before = [call_string(c) for c in calls]
    for call in calls:
        asyncio.run(tools.execute(call))
    assert [call_string(c) for c in calls] == before


def test_only_the_cases_own_functions_run():
    tools = BfclTools(load_cases("base")["multi_turn_base_0"])  # a file system case: no trading functions
    stray = ToolCall("place_order", {"order_type": "Buy", "symbol": "AAPL", "price": 1.0, "amount": 1})
    assert "unknown tool" in tools.validate(stray)
    assert asyncio.run(tools.execute(stray)).error
    assert "Additional properties" in tools.validate(ToolCall("ls", {"a": True, "rm_rf": "/"}))
    for bad in (ToolCall("mkdir", {}), ToolCall("mkdir", {"dir_name": "x", "mode": 7}), ToolCall("cd", {"folder": 7})):
        obs = asyncio.run(tools.execute(bad))  # even unvalidated: an error observation, no crash
        assert obs.error and obs.content.startswith("Error"), (bad, obs)


def test_zero_error_strong_only_scores_base_cases_through_the_protocol():
    cases = list(load_cases("base"))[::5]  # every fifth here; all 200 of every category in the slow tier
    rewards = []
    for case_id in cases:
        task, parts = bfcl_parts("bfcl-base", case_id, 0, ZERO)
        rewards.append(grade("bfcl-base", case_id, asyncio.run(METHODS["strong"](task, parts, SpecConfig(max_steps=200)))))
    assert rewards == [1.0] * 40


@pytest.mark.slow
@pytest.mark.parametrize("category", CATEGORIES)
def test_zero_error_strong_only_scores_every_case_of_every_category(category):
    domain = f"bfcl-{category}"
    rewards = [grade(domain, c, asyncio.run(METHODS["strong"](*bfcl_parts(domain, c, 0, ZERO), SpecConfig(max_steps=200))))
               for c in load_cases(category)]
    assert rewards == [1.0] * 200


def test_asking_the_user_is_the_gold_step_where_a_parameter_is_missing_and_the_verifier_is_told_so():
    from specagent_ray.sim.gold import ASK, bfcl_gold_script as gold_script
    from specagent_ray.models.prompts import verify_instruction

    case = next(c for c in load_cases("miss_param").values() if () in c.ground_truth)
    script = gold_script(case)
    assert Action.message(ASK) in script.items
    draft = [Step(Action.message(ASK), None, "weak", Effect.WRITE)]
    assert "Asking the user for something the task needs" in verify_instruction(draft)


def test_bench_bfcl_runs_and_names_its_files(tmp_path, capsys):
    from specagent_ray.cli import main

    code = main(["bench", "bfcl", "--category", "base", "--tasks", "multi_turn_base_0,multi_turn_base_1",
                 "--trials", "1", "--methods", "strong,specagent", "--workers", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "bfcl base: quality" in out and "BFCL's evaluator" in out
    assert (tmp_path / "bfcl-base-seed0.json").exists() and (tmp_path / "bfcl-base-seed0.png").exists()
