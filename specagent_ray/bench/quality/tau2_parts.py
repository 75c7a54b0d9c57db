"""Wiring simulated parts to a real tau2 task (SIMULATED policies, real tau2 environment).

The simulated world itself (gold scripts, ``SimSettings``, the seeded models) lives in ``sim.gold``,
where the sim engines find it too; the scripted customer is ``sim.users.GoldUser``.
"""

from __future__ import annotations

from ...costs.ledger import Ledger
from ...protocol.runtime import Parts
from ...protocol.types import Task
from ...sim.gold import SimSettings, simulated_models, user_requests
from ...sim.users import GoldUser
from ...tasks import benchmark
from ...tools.tau2 import Tau2Domain, Tau2Tools

__all__ = ["SimSettings", "simulated_parts", "simulated_task"]


def simulated_task(domain: Tau2Domain, task_id: str) -> Task:
    """The task as the scripted customer opens it (the benchmark's own ``task``)."""
    return benchmark(domain.name).task(task_id)


def simulated_parts(domain: Tau2Domain, task_id: str, trial: int, settings: SimSettings,
                    tools: Tau2Tools | None = None) -> tuple[Task, Parts]:
    """A task and fresh parts for one run: real tau2 tools in the task's initial state, simulated models,
    the scripted user (who runs their own tools in dual-control domains), an empty ledger."""
    tools = tools or Tau2Tools(domain, task=domain.tasks[task_id])
    weak, strong, verifier = simulated_models(domain, task_id, trial, settings,
                                              lambda a: all(tools.validate(c) is None for c in a.calls))
    user = GoldUser(user_requests(domain, task_id), tools.execute_user)
    return simulated_task(domain, task_id), Parts(weak, strong, verifier, tools, user, Ledger())
