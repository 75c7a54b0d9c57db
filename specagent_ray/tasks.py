"""The task sets a session or a bench run is graded on (benchmarks: tau2 domains, BFCL categories), behind
one interface, ``Benchmark``: its tasks, its simulated world (``sim/``) and its own grader.

A domain name picks one: a tau2 domain (``airline``, ``retail``, ``telecom``) or a BFCL v4 multi-turn
category as ``bfcl-<category>``. Whoever runs a benchmark task (the bench's workers, the sim engines,
the coordinator's sources and users) asks the ``Benchmark`` instead of testing the name.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol

from .protocol.interfaces import User
from .protocol.types import ActionKind, Step, Task, Trajectory

# The system prompt's policy for real models on BFCL (it has no policy document of its own).
BFCL_POLICY = ("You operate the user's applications through the functions below. Do what each request asks, "
               "calling functions as needed, then end your turn with a message to the user. When a request "
               "lacks information a function needs, or no function can do it, ask the user instead of guessing.")


class Benchmark(Protocol):
    """A benchmark's tasks, its simulated world and its own grader."""

    name: str  # the domain name that picked it
    policy: str  # what the agent's system prompt says it must follow

    def task_ids(self) -> tuple[str, ...]:
        """The benchmark's task set, in its order (tau2's base split; every BFCL case of the category)."""

    def knows(self, task_id: str) -> bool:
        """Whether the benchmark has this task (in or outside its task set)."""

    def task(self, task_id: str) -> Task:
        """The task as the scripted user opens it (KeyError: no such task)."""

    def sim_models(self, task_id: str, trial: int, settings: Any) -> tuple:
        """The weak policy, strong policy and verifier of one SIMULATED run (``sim/gold.py``)."""

    def scripted_user(self, task: Task, committed: Sequence[Step], run_user: Any = None) -> User:
        """The SIMULATED user of ``task``, resumed after ``committed``; ``run_user`` runs the user's own
        tools (dual-control domains)."""

    def grade(self, task: Task, trajectory: Trajectory) -> float:
        """The benchmark's own reward for a finished run (blocking)."""


class Tau2Benchmark:
    """A tau2 domain: tau2's environments and its own evaluator."""

    def __init__(self, name: str):
        from .tools.tau2 import Grader, Tau2Domain

        self.domain = Tau2Domain.load(name)
        self.name, self.policy = name, self.domain.policy
        self.grader = Grader(self.domain)

    def task_ids(self) -> tuple[str, ...]:
        return self.domain.base

    def knows(self, task_id: str) -> bool:
        return task_id in self.domain.tasks

    def task(self, task_id: str) -> Task:
        from .sim.gold import first_user_message

        tau2_task = self.domain.tasks[task_id]
        return Task(task_id, first_user_message(tau2_task), tau2_task)

    def sim_models(self, task_id: str, trial: int, settings: Any) -> tuple:
        from .sim.gold import simulated_models

        return simulated_models(self.domain, task_id, trial, settings)

    def scripted_user(self, task: Task, committed: Sequence[Step], run_user: Any = None) -> User:
        from .sim.gold import user_requests
        from .sim.users import GoldUser

        return GoldUser(user_requests(self.domain, task.id), run_user)

    def grade(self, task: Task, trajectory: Trajectory) -> float:
        return self.grader.reward(task.id, trajectory, task.instruction)


class BfclBenchmark:
    """A BFCL v4 multi-turn category: BFCL's backends and its multi-turn checker."""

    def __init__(self, category: str):
        from .tools.bfcl import load_cases

        self.cases = load_cases(category)  # RuntimeError naming the install command without bfcl-eval
        self.name, self.policy = f"bfcl-{category}", BFCL_POLICY

    def task_ids(self) -> tuple[str, ...]:
        return tuple(self.cases)

    def knows(self, task_id: str) -> bool:
        return task_id in self.cases

    def task(self, task_id: str) -> Task:
        case = self.cases[task_id]
        return Task(case.id, case.turns[0], case)

    def sim_models(self, task_id: str, trial: int, settings: Any) -> tuple:
        from .sim.gold import bfcl_models

        return bfcl_models(self.name, task_id, trial, settings)

    def scripted_user(self, task: Task, committed: Sequence[Step], run_user: Any = None) -> User:
        from .sim.users import BfclUser

        answered = sum(s.action.kind is ActionKind.MESSAGE and s.observation is not None for s in committed)
        return BfclUser(task.context, answered)

    def grade(self, task: Task, trajectory: Trajectory) -> float:
        from .tools.bfcl import reward

        return reward(self.cases[task.id], trajectory)


@functools.cache
def benchmark(domain: str) -> Benchmark:
    """The benchmark a domain name names, loaded once per process."""
    if domain.startswith("bfcl-"):
        return BfclBenchmark(domain.removeprefix("bfcl-"))
    return Tau2Benchmark(domain)
