"""What one benchmark trajectory yields, as stored in the results JSON (pydantic, extra keys refused)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from pydantic import BaseModel, ConfigDict

from ..costs.deployment import RoleDeployment
from ..costs.ledger import Ledger
from ..costs.model import CallCost, ledger_cost
from ..costs.specs import GpuProfile, ModelSpec
from ..protocol.types import Trajectory
from ..telemetry.resources import ResourceReport


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoleUsage(Frozen):
    """One role's calls in one trajectory. Tokens and wall time: measured (from the ledger).
    flops / hbm_* / gpu_latency_s: ESTIMATED from the model spec and GPU profile."""

    calls: int
    prompt_tokens: int
    cached_prompt_tokens: int
    decode_tokens: int
    flops: float
    hbm_low: float
    hbm_high: float
    gpu_latency_s: float


class BlockStats(Frozen):
    """How the speculation went: reviewed blocks and steps, accepted steps, and repairs."""

    reviewed_blocks: int = 0
    reviewed_steps: int = 0
    accepted_steps: int = 0
    rejections: int = 0
    fused_repairs: int = 0
    strong_repairs: int = 0
    invalid_actions: int = 0
    speculation_hits: int = 0
    escalations: int = 0
    block_lengths: tuple[int, ...] = ()  # each reviewed block's length, in order


class TrialResult(Frozen):
    method: str
    task_id: str
    trial: int
    reward: float
    termination: str
    committed_steps: int
    wall_s: float  # measured
    strong: RoleUsage
    weak: RoleUsage
    blocks: BlockStats
    resources: ResourceReport | None = None  # the product's per-request report (estimated without a GPU)
    repair_prompt_tokens: int = 0  # prompt tokens of strong repair calls ...
    repair_cached_tokens: int = 0  # ... and the part the engine served from its prefix cache
    flops_paper_layout: float = 0.0  # strong + weak FLOPs had repair prompts shared no prefix (estimated)
    mid: RoleUsage | None = None  # the chain's mid verifier, when the run had one
    critical_writes: int = 0  # CRITICAL calls executed, by the domain's tier table (bench/quality/variants.py)
    wrong_critical_writes: int = 0  # ... of which match no gold call (SIMULATED)
    label: str = "simulated"


def role_usage(ledger: Ledger, role: str, spec: ModelSpec, gpu: GpuProfile, n_gpus: int,
               hidden: frozenset[str] = frozenset()) -> RoleUsage:
    """``hidden`` purposes run concurrently with another model's call: they cost compute, not latency."""
    t = ledger.totals(role)  # type: ignore[arg-type]
    cost: CallCost = ledger_cost(ledger, role, spec, gpu, n_gpus)  # type: ignore[arg-type]
    latency = cost.gpu_latency_s
    if hidden:
        latency -= ledger_cost(ledger, role, spec, gpu, n_gpus, purposes=hidden).gpu_latency_s  # type: ignore[arg-type]
    return RoleUsage(calls=t.calls, prompt_tokens=t.prompt_tokens, cached_prompt_tokens=t.cached_prompt_tokens,
                     decode_tokens=t.decode_tokens, flops=cost.flops, hbm_low=cost.hbm_low,
                     hbm_high=cost.hbm_high, gpu_latency_s=latency)


def block_stats(trajectory: Trajectory) -> BlockStats:
    reviewed = accepted = rejections = 0
    lengths = []
    for e in trajectory.events:
        if e.kind == "accepted":
            j, n = map(int, e.detail.split("/"))
            reviewed, accepted, rejections = reviewed + n, accepted + j, rejections + (j < n)
            lengths.append(n)
    return BlockStats(
        reviewed_blocks=trajectory.count("accepted"), reviewed_steps=reviewed, accepted_steps=accepted,
        rejections=rejections, fused_repairs=trajectory.count("fused_repair"),
        strong_repairs=trajectory.count("strong_repair"), invalid_actions=trajectory.count("invalid_action"),
        speculation_hits=trajectory.count("speculation_hit"), escalations=trajectory.count("escalated"),
        block_lengths=tuple(lengths),
    )


def paper_layout(ledger: Ledger) -> Ledger:
    """The ledger as the paper's prompt layout would have made it: a repair prompt shares no prefix with
    the verify prompt before it, so none of it is served from cache (ours share a byte-identical block)."""
    return Ledger([replace(c, usage=replace(c.usage, cached_prompt_tokens=0)) if c.purpose == "repair" else c
                   for c in ledger.calls])


def paper_layout_strong_flops(ledger: Ledger, strong: RoleDeployment) -> float:
    """The strong FLOPs had the run used the paper's layout: its repair prompts prefilled in full (estimated)."""
    return ledger_cost(paper_layout(ledger), "strong", strong.spec, strong.gpu, strong.n_gpus).flops  # type: ignore[arg-type]


def repair_cache(ledger: Ledger) -> dict[str, int]:
    """Prompt and cached-prompt tokens of the strong repair calls, as the engine (or token model) reported."""
    repairs = [c.usage for c in ledger.calls if c.purpose == "repair"]
    return {"repair_prompt_tokens": sum(u.prompt_tokens for u in repairs),
            "repair_cached_tokens": sum(u.cached_prompt_tokens for u in repairs)}


def by_method(results: Iterable[TrialResult]) -> dict[str, list[TrialResult]]:
    """The results grouped by method, each group in the order given."""
    out: dict[str, list[TrialResult]] = {}
    for r in results:
        out.setdefault(r.method, []).append(r)
    return out
