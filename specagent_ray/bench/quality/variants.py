"""The beyond-the-paper variants of SpecAgent as bench methods, and what they are judged by.

A variant is a base method (``protocol.baselines.METHODS``) with some of three mechanisms switched on:
- ``parallel``: the gold path's independent calls as parallel actions, and the loop taking them
  (``SimSettings.parallel``, ``SpecConfig.parallel_calls``);
- ``tiers``: the domain's tier table on the tools (``Tau2Domain.tiers``), so critical calls get their second
  check (``SpecConfig.critical``, the strong policy's agreement);
- ``chain``: a simulated mid verifier in front of the strong one (``sim.gold.mid_judge``,
  ``SpecConfig.chain``), priced on ``Hardware.mid_model``.
Plain method names are variants with nothing switched on, so every table row comes from one code path.

``critical_writes`` counts the CRITICAL calls (by the domain's table, whether or not the run knew it) that a
trajectory executed with effect (a call the tool refused with an error changed nothing), and which of them
match no gold call of the task: wrong critical writes (SIMULATED).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...protocol.review import ChainRule
from ...protocol.runtime import SpecConfig
from ...protocol.types import ActionKind, Tier, Trajectory
from ...sim.gold import SimSettings

# The chain's rule in the bench (stated, not tuned): the mid settles plain writes, and escalates under a
# confidence of 0.5, which with its stated AUC of 0.75 sends about a third of its right verdicts and two
# thirds of its wrong ones to the strong verifier (docs/simulation.md).
BENCH_CHAIN = ChainRule(settles=frozenset({Tier.WRITE}), escalate_below=0.5)
MID_MODEL = "qwen3.5-35b-a3b"  # chosen by the total (docs/benchmarks.md, "Savings in total")


@dataclass(frozen=True)
class Variant:
    method: str
    parallel: bool = False
    tiers: bool = False
    chain: bool = False

    def spec(self, base: SpecConfig) -> SpecConfig:
        spec = replace(base, parallel_calls=True) if self.parallel else base
        return replace(spec, chain=BENCH_CHAIN) if self.chain else spec

    def sim(self, base: SimSettings) -> SimSettings:
        return replace(base, parallel=True, parallel_writes=True) if self.parallel else base


VARIANTS: dict[str, Variant] = {
    "specagent+parallel": Variant("specagent", parallel=True),
    "specagent+tiers": Variant("specagent", tiers=True),
    "specagent+chain": Variant("specagent", chain=True),
    "specagent+all": Variant("specagent", parallel=True, tiers=True, chain=True),
}
TABLE = ("strong", "specagent", *VARIANTS)  # the rows of the beyond-the-paper table, in order


def variant_of(method: str) -> Variant:
    return VARIANTS.get(method) or Variant(method)


def critical_writes(trajectory: Trajectory, tier_of, gold_keys: set[str]) -> tuple[int, int]:
    """(critical calls executed, those matching no gold call), by the domain's tier table ``tier_of``."""
    done = wrong = 0
    for step in trajectory.steps:
        if step.action.kind is not ActionKind.TOOL or step.observation is None:
            continue
        parts = step.observation.parts or (step.observation,)
        for call, seen in zip(step.action.calls, parts, strict=True):
            if tier_of(call) is Tier.CRITICAL and not seen.error:
                done += 1
                wrong += call.key() not in gold_keys
    return done, wrong
