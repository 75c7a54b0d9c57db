"""The planner's inputs from stored ``bench tau2`` runs: acceptance, the block-length mix, call tokens.

p, rho, f (and the mean n) come from :func:`specagent_ray.results.summaries.theory_check`, the bench's own
Proposition 1/2 check, so that the planner and the bench agree on what they mean; the block-length mix from
each trajectory's ``blocks.block_lengths`` (a mix of floor/ceil of the mean n where a run lacks them). Call
shapes are per-call means: a strong step from the Strong-only runs; a verify from SpecAgent's strong calls
less its separate repairs (whose prompt tokens the run records; their decode is taken as a strong step's);
a draft from SpecAgent's weak calls. All are SIMULATED token counts when the run used simulated policies.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ..costs.planner import Acceptance, CallShape, Shapes
from ..results.summaries import TheoryCheck, theory_check
from ..results.trial import RoleUsage, TrialResult


@dataclass(frozen=True)
class BenchInputs:
    acceptance: Acceptance
    shapes: Shapes
    steps_per_session: float
    source: str
    theory: TheoryCheck
    strong_hbm_per_step: dict[str, float]  # per method, the bench's own (simulated tokens, estimated HBM)


def load_results(paths: Sequence[Path]) -> list[TrialResult]:
    """Every trajectory of the given ``bench tau2`` JSON files. ValueError naming the file on a bad one."""
    out: list[TrialResult] = []
    for path in paths:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
            out += [TrialResult.model_validate(r) for r in doc["results"]]
        except FileNotFoundError:
            raise ValueError(f"no bench results file {path}") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValidationError) as exc:
            raise ValueError(f"{path} is not a `bench tau2` results JSON: {str(exc).splitlines()[0]}") from None
    return out


def _per_call(usages: Sequence[RoleUsage]) -> CallShape:
    calls = sum(u.calls for u in usages)
    if calls == 0:
        raise ValueError("no calls to take a call shape from")
    return CallShape(sum(u.prompt_tokens for u in usages) / calls, sum(u.cached_prompt_tokens for u in usages) / calls,
                     sum(u.decode_tokens for u in usages) / calls)


def shapes_from(results: Sequence[TrialResult], method: str = "specagent") -> Shapes:
    """Mean call shapes of the runs (see the module docstring). ValueError without both methods' calls."""
    so = [r for r in results if r.method == "strong"]
    sa = [r for r in results if r.method == method]
    step = _per_call([r.strong for r in so])
    repairs = sum(r.blocks.strong_repairs for r in sa)
    rep_prompt, rep_cached = sum(r.repair_prompt_tokens for r in sa), sum(r.repair_cached_tokens for r in sa)
    calls = sum(r.strong.calls for r in sa) - repairs
    if calls <= 0:
        raise ValueError(f"the {method} runs made no verify calls")
    prompt = (sum(r.strong.prompt_tokens for r in sa) - rep_prompt) / calls
    cached = (sum(r.strong.cached_prompt_tokens for r in sa) - rep_cached) / calls
    decode = (sum(r.strong.decode_tokens for r in sa) - repairs * step.decode) / calls
    verify = CallShape(prompt, min(cached, prompt), max(0.0, decode))
    repair = (CallShape(rep_prompt / repairs, min(rep_cached, rep_prompt) / repairs, step.decode) if repairs
              else CallShape(verify.prompt, verify.prompt, step.decode))
    draft = _per_call([r.weak for r in sa])
    return Shapes(step, verify, repair, draft, max_context=2 * max(step.prompt, verify.prompt) + step.decode)


def acceptance_from(results: Sequence[TrialResult], method: str = "specagent") -> tuple[Acceptance, TheoryCheck]:
    """p, the block-length mix, rho and f of the runs, with the bench's theory check they come from."""
    tc = theory_check(results, method)
    if tc is None:
        raise ValueError(f"the runs need both strong and {method} trajectories with reviewed blocks")
    lengths = Counter(n for r in results if r.method == method for n in getattr(r.blocks, "block_lengths", ()))
    if lengths:
        return Acceptance.from_counts(tc.p, lengths, tc.rho, tc.reviewed_share), tc
    return Acceptance.from_mean(tc.p, tc.n, tc.rho, tc.reviewed_share), tc


def strong_hbm_per_step(results: Sequence[TrialResult], method: str) -> float:
    """The runs' strong HBM per committed step: simulated tokens, ESTIMATED HBM (midpoint, per call)."""
    rs = [r for r in results if r.method == method]
    steps = sum(r.committed_steps for r in rs)
    return sum((r.strong.hbm_low + r.strong.hbm_high) / 2 for r in rs) / steps if steps else float("nan")


def inputs_from_results(results: Sequence[TrialResult], source: str, method: str = "specagent") -> BenchInputs:
    acc, tc = acceptance_from(results, method)
    sa = [r for r in results if r.method == method]
    steps = sum(r.committed_steps for r in sa) / len(sa)
    return BenchInputs(acc, shapes_from(results, method), max(1.0, steps), source, tc,
                       {m: strong_hbm_per_step(results, m) for m in ("strong", method)})


def from_bench(paths: Sequence[Path]) -> BenchInputs:
    """The planner's inputs from one or more ``bench tau2`` results files (pooled)."""
    return inputs_from_results(load_results(paths), ", ".join(str(p) for p in paths))
