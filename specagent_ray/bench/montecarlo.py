"""A world that satisfies the paper's Assumption 2, run through the real loop (SIMULATED).

The weak policy always drafts n-1 reads and then a write, so every reviewed block has length n.
The verifier accepts each step independently with probability p; a rejection carries a valid fused
repair with probability 1 - rho, otherwise the strong policy writes the repair. Weight reads are
counted in decode tokens (Assumption 1): a verdict decodes ``verdict_tokens`` (v), a strong step
``step_tokens`` (d). Proposition 1 predicts the strong traffic per committed step relative to
Strong-only; ``measure`` reads the same ratio off the ledger.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Sequence

from rich.console import Console
from rich.table import Table

from ..costs.ledger import Ledger
from ..costs.theory import r_u
from ..models.scripted import ScriptedUser
from ..protocol.runtime import Parts, SpecConfig
from ..protocol.speculation import run_specagent
from ..protocol.types import Action, Effect, History, Observation, Proposal, Review, Step, Task, ToolCall, Usage, Verdict
from ..tools.scripted import InMemoryTools, ToolSpec, object_schema

READ = Action.tool("read", id="x")
WRITE = Action.tool("write", id="x")


def bernoulli_tools() -> InMemoryTools:
    return InMemoryTools({
        "read": ToolSpec(Effect.READ, object_schema(id="string")),
        "write": ToolSpec(Effect.WRITE, object_schema(id="string")),
    })


@dataclass
class BlockPolicy:
    """Drafts n-1 reads then a write (weak), or writes a read-only repair step (strong)."""

    n: int
    usage: Usage

    async def propose(self, history: History, draft: Sequence[Step] = (), feedback: str | None = None) -> Proposal:
        return Proposal(WRITE if len(draft) == self.n - 1 else READ, self.usage)


@dataclass
class BernoulliVerifier:
    """Accepts each step i.i.d. with probability p; fused repair with probability 1 - rho."""

    p: float
    rho: float
    rng: random.Random
    usage: Usage

    async def verify(self, history: History, block: Sequence[Step]) -> Review:
        j = 0
        while j < len(block) and self.rng.random() < self.p:
            j += 1
        repair = READ if j < len(block) and self.rng.random() >= self.rho else None
        return Review(Verdict(j, "rejected" if j < len(block) else "", repair), self.usage)


@dataclass(frozen=True)
class TheoryPoint:
    p: float
    n: int
    v_over_d: float
    rho: float
    predicted: float
    measured: float
    committed_steps: int


async def _measure(p: float, n: int, rho: float, steps: int, seed: int, step_tokens: int,
                   verdict_tokens: int, session_steps: int = 200) -> TheoryPoint:
    rng = random.Random(seed)
    ledger = Ledger()
    weak = BlockPolicy(n, Usage(1000, 900, step_tokens))
    strong = BlockPolicy(n, Usage(1000, 900, step_tokens))
    verifier = BernoulliVerifier(p, rho, rng, Usage(1000, 900, verdict_tokens))
    committed = 0
    while committed < steps:
        parts = Parts(weak, strong, verifier, bernoulli_tools(), ScriptedUser(), ledger)
        traj = await run_specagent(Task("mc", ""), parts, SpecConfig(k=n, max_steps=session_steps))
        committed += len(traj.steps)
    strong_decode = ledger.totals("strong").decode_tokens
    return TheoryPoint(p, n, verdict_tokens / step_tokens, rho, r_u(p, n, verdict_tokens / step_tokens, rho),
                       strong_decode / (committed * step_tokens), committed)


def measure(p: float, n: int = 4, rho: float = 0.3, steps: int = 30_000, seed: int = 0,
            step_tokens: int = 200, verdict_tokens: int = 30) -> TheoryPoint:
    """Proposition 1 predicted and measured at one acceptance probability (SIMULATED)."""
    return asyncio.run(_measure(p, n, rho, steps, seed, step_tokens, verdict_tokens))


def report_theory(console: Console, ps: Sequence[float], n: int, steps: int) -> int:
    t = Table(title=f"Proposition 1, Monte-Carlo through the real loop (simulated, n={n}, {steps} steps/point)")
    for col in ("p_u", "v/d", "rho", "R_u predicted", "R_u measured", "|diff|"):
        t.add_column(col, justify="right")
    for p in ps:
        x = measure(p, n=n, steps=steps)
        t.add_row(f"{p:.2f}", f"{x.v_over_d:.3f}", f"{x.rho:.2f}", f"{x.predicted:.4f}", f"{x.measured:.4f}",
                  f"{abs(x.predicted - x.measured):.4f}")
    console.print(t)
    return 0


class TimedTools(InMemoryTools):
    """Adds up time spent inside tools, so throughput can exclude it."""

    tool_s: float = 0.0

    async def execute(self, call: ToolCall) -> Observation:
        import time

        start = time.perf_counter()
        out = await super().execute(call)
        self.tool_s += time.perf_counter() - start
        return out
