"""A world that satisfies the paper's Assumption 2, run through the real loop (SIMULATED).

The weak policy always drafts n-1 reads and then a write, so every reviewed block has length n.
The verifier accepts each step independently with probability p; a rejection carries a valid fused
repair with probability 1 - rho, otherwise the strong policy writes the repair. Weight reads are
counted in decode tokens (Assumption 1): a verdict decodes ``verdict_tokens`` (v), a strong step
``step_tokens`` (d). Proposition 1 predicts the strong traffic per committed step relative to
Strong-only; ``measure`` reads the same ratio off the ledger.

The three-tier chain (``measure_chain``): a Bernoulli mid verifier reviews each block first, accepting each
step with probability q, and escalates it to the Bernoulli strong verifier by a low confidence (with
probability e_a after a full accept, e_r after a rejection) or by a fused repair that fails ``valid()``
(probability ``invalid``); a missing repair is settled, and the strong policy writes the step.
``theory.chain_traffic`` predicts the strong and mid traffic per committed step; the measurement needs the
loop's mid verifier (``Parts.mid``) and says so where the loop has none.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from dataclasses import dataclass, fields
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from ...costs.ledger import Ledger
from ...costs.theory import ChainTraffic, chain_traffic, r_u
from ...models.scripted import ScriptedUser
from ...protocol.runtime import Parts, SpecConfig
from ...protocol.speculation import run_specagent
from ...protocol.types import (
    Action,
    Effect,
    History,
    Observation,
    Proposal,
    Review,
    Step,
    Task,
    ToolCall,
    Usage,
    Verdict,
)
from ...tools.scripted import InMemoryTools, ToolSpec, object_schema
from ...arguments import floats

READ = Action.tool("read", id="x")
WRITE = Action.tool("write", id="x")
INVALID = Action.tool("read")  # fails valid(): the required id is missing
HAS_MID = "mid" in {f.name for f in fields(Parts)}  # whether the loop has the chain's mid verifier yet
LOW, HIGH = 0.0, 1.0  # the Bernoulli mid's confidences, either side of the chain's escalate_below


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


def report_theory(console: Console, ps: Sequence[float], n: int, steps: int, escalate: Sequence[float] = ()) -> int:
    """Proposition 1's table; with ``escalate``, the chain's next to it (``report_chain``)."""
    t = Table(title=f"Proposition 1, Monte-Carlo through the real loop (simulated, n={n}, {steps} steps/point)")
    for col in ("p_u", "v/d", "rho", "R_u predicted", "R_u measured", "|diff|"):
        t.add_column(col, justify="right")
    for p in ps:
        x = measure(p, n=n, steps=steps)
        t.add_row(f"{p:.2f}", f"{x.v_over_d:.3f}", f"{x.rho:.2f}", f"{x.predicted:.4f}", f"{x.measured:.4f}",
                  f"{abs(x.predicted - x.measured):.4f}")
    console.print(t)
    if escalate:
        report_chain(console, ps, escalate, n, steps)
    return 0


@dataclass
class BernoulliMid:
    """The chain's mid verifier: accepts each step i.i.d. with probability q; after a rejection its fused
    repair fails ``valid()`` with probability ``invalid`` (the loop escalates), is missing with probability
    ``missing`` (settled: the strong policy writes the step), else is a valid read; its confidence is LOW
    (escalate) with probability ``e_accept`` after a full accept and ``e_reject`` after a rejection."""

    q: float
    e_accept: float
    e_reject: float
    invalid: float
    rng: random.Random
    usage: Usage
    missing: float = 0.0

    async def verify(self, history: History, block: Sequence[Step]) -> Review:
        j = 0
        while j < len(block) and self.rng.random() < self.q:
            j += 1
        rejected, u = j < len(block), self.rng.random()
        repair = None if not rejected or self.invalid <= u < self.invalid + self.missing else (
            INVALID if u < self.invalid else READ)
        low = self.rng.random() < (self.e_reject if rejected else self.e_accept)
        verdict = Verdict(j, "rejected" if rejected else "", repair)
        return Review(verdict, self.usage, confidence=LOW if low else HIGH)


@dataclass(frozen=True)
class ChainWorld:
    """The chain's Bernoulli world: strong acceptance p, mid acceptance q, the mid's low-confidence rates
    after a full accept and a rejection, and the shares of its repairs that are invalid or missing."""

    p: float
    q: float
    e_accept: float
    e_reject: float
    invalid: float = 0.0
    missing: float = 0.0
    n: int = 4
    rho: float = 0.3

    def predict(self, v_over_d: float, vm_over_d: float) -> ChainTraffic:
        """``theory.chain_traffic`` for this world: the loop escalates an invalid mid repair, so e_r grows to
        1 - (1 - e_r)(1 - invalid), and of the settled rejections missing / (1 - invalid) need a strong repair."""
        settled = 1 - self.invalid
        return chain_traffic(self.p, self.n, v_over_d, self.rho, e_accept=self.e_accept,
                             e_reject=1 - (1 - self.e_reject) * settled, p_mid=self.q, vm_over_d=vm_over_d,
                             rho_mid=self.missing / settled if settled > 0 else 0.0)


@dataclass(frozen=True)
class ChainPoint:
    """The chain's strong and mid traffic per committed step (decode tokens over a strong step's) and its
    escalation rate (strong verifies per mid verify), predicted and measured off the ledger."""

    world: ChainWorld
    predicted: ChainTraffic
    measured_strong: float
    measured_mid: float
    measured_escalation: float
    committed_steps: int


def chain_config(n: int, session_steps: int) -> SpecConfig:
    """The loop's config with a chain whose mid may settle reads and writes and escalates below 0.5."""
    from ...protocol.review import ChainRule
    from ...protocol.types import Tier

    rule = ChainRule(settles=frozenset({Tier.READ, Tier.WRITE}), escalate_below=(LOW + HIGH) / 2)
    return SpecConfig(k=n, max_steps=session_steps, chain=rule)


async def _measure_chain(w: ChainWorld, steps: int, seed: int, tokens: tuple[int, int, int],
                         session_steps: int = 200) -> ChainPoint:
    if not HAS_MID:
        raise NotImplementedError("the loop has no mid verifier yet (protocol.runtime.Parts has no `mid`)")
    step_tokens, verdict_tokens, mid_tokens = tokens
    rng, ledger = random.Random(seed), Ledger()
    weak = strong = BlockPolicy(w.n, Usage(1000, 900, step_tokens))
    verifier = BernoulliVerifier(w.p, w.rho, rng, Usage(1000, 900, verdict_tokens))
    mid = BernoulliMid(w.q, w.e_accept, w.e_reject, w.invalid, rng, Usage(1000, 900, mid_tokens), w.missing)
    committed, config = 0, chain_config(w.n, session_steps)
    while committed < steps:
        parts = Parts(weak, strong, verifier, bernoulli_tools(), ScriptedUser(), ledger, mid=mid)
        committed += len((await run_specagent(Task("mc", ""), parts, config)).steps)
    verifies = {r: sum(1 for c in ledger.calls if c.role == r and c.purpose == "verify") for r in ("strong", "mid")}
    per_step = committed * step_tokens
    return ChainPoint(w, w.predict(verdict_tokens / step_tokens, mid_tokens / step_tokens),
                      ledger.totals("strong").decode_tokens / per_step,
                      ledger.totals("mid").decode_tokens / per_step,
                      verifies["strong"] / max(1, verifies["mid"]), committed)


def measure_chain(world: ChainWorld, steps: int = 30_000, seed: int = 0, step_tokens: int = 200,
                  verdict_tokens: int = 30, mid_tokens: int = 30) -> ChainPoint:
    """The chain's Proposition predicted and measured through the real loop (SIMULATED).
    NotImplementedError where the loop has no mid verifier (``HAS_MID``)."""
    return asyncio.run(_measure_chain(world, steps, seed, (step_tokens, verdict_tokens, mid_tokens)))


def report_chain(console: Console, ps: Sequence[float], escalate: Sequence[float], n: int, steps: int,
                 invalid: float = 0.1, missing: float = 0.1) -> None:
    """The chain's strong traffic per committed step next to Proposition 1's, predicted and (where the loop
    has a mid verifier) measured: q = p, e_a = e_r = e, mid repairs invalid / missing at the given shares."""
    t = Table(title=f"The chain's Proposition, Monte-Carlo through the real loop (simulated, n={n}, {steps} "
                    f"steps/point, v/d = v_m/d = 0.15, rho 0.3, q = p, mid repair invalid {invalid:.2f} / missing "
                    f"{missing:.2f}; traffic in decode tokens per strong step)")
    for col in ("p_u", "e", "R_u (Prop. 1)", "R_chain predicted", "R_chain measured", "|diff|",
                "mid predicted", "mid measured", "escalated pred. / meas."):
        t.add_column(col, justify="right")
    for p in ps:
        for e in escalate:
            w = ChainWorld(p, p, e, e, invalid, missing, n)
            pred = w.predict(0.15, 0.15)
            row = [f"{p:.2f}", f"{e:.2f}", f"{r_u(p, n, 0.15, 0.3):.4f}", f"{pred.strong:.4f}"]
            if not HAS_MID:
                t.add_row(*row, "n/a: the loop has no mid verifier yet", "", f"{pred.mid:.4f}", "n/a",
                          f"{pred.escalation:.3f} / n/a")
                continue
            x = measure_chain(w, steps=steps, step_tokens=200, verdict_tokens=30, mid_tokens=30)
            t.add_row(*row, f"{x.measured_strong:.4f}", f"{abs(pred.strong - x.measured_strong):.4f}",
                      f"{pred.mid:.4f}", f"{x.measured_mid:.4f}",
                      f"{pred.escalation:.3f} / {x.measured_escalation:.3f}")
    console.print(t)


class TimedTools(InMemoryTools):
    """Adds up time spent inside tools, so throughput can exclude it."""

    tool_s: float = 0.0

    async def execute(self, call: ToolCall) -> Observation:
        import time

        start = time.perf_counter()
        out = await super().execute(call)
        self.tool_s += time.perf_counter() - start
        return out


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("theory", help="Monte-Carlo check of Proposition 1 through the real loop",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--p", type=floats, default=(0.5, 0.7, 0.9))
    p.add_argument("--n", type=int, default=4, help="block length")
    p.add_argument("--steps", type=int, default=30_000, help="committed steps per point")
    p.add_argument("--escalate", type=floats, default=(),
                   help="the three-tier chain's escalation rates e (e.g. 0.2,0.5): its Proposition, predicted "
                        "and measured, next to Proposition 1's")
    p.set_defaults(run=run_from_args)
    return p


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    return report_theory(console, args.p, args.n, args.steps, args.escalate)
