"""Simulated parts for a BFCL v4 multi-turn case (SIMULATED policies, BFCL's real backends and checker).

The gold script and the seeded models are ``sim.gold``'s (``bfcl_gold_script``, ``bfcl_models``); the
scripted user, who answers each agent message with the case's next turn, is ``sim.users.BfclUser``.
"""

from __future__ import annotations

from ...costs.ledger import Ledger
from ...protocol.runtime import Parts
from ...protocol.types import Task
from ...sim.gold import SimSettings
from ...sim.users import BfclUser
from ...tasks import benchmark
from ...tools.bfcl import BfclTools


def bfcl_parts(domain: str, case_id: str, trial: int, settings: SimSettings) -> tuple[Task, Parts]:
    """A case and fresh parts for one run: BFCL's backends, simulated models, the scripted user."""
    bench = benchmark(domain)
    task = bench.task(case_id)
    weak, strong, verifier = bench.sim_models(case_id, trial, settings)
    return task, Parts(weak, strong, verifier, BfclTools(task.context), BfclUser(task.context), Ledger())
