"""Resource reports per request and per session, every figure labelled measured or estimated.

GPU-seconds and HBM bytes are MEASURED where an NVML sampler attributed them to the request (see
:mod:`.attribution`), per model role; otherwise they are ESTIMATED from the ledger's tokens by the analytic
cost model (:func:`specagent_ray.costs.model.ledger_cost`): GPU-s = roofline ``gpu_latency_s * n_gpus``,
HBM = the midpoint of the (low, high) read interval. FLOPs are always estimated. Tokens and calls are
measured (engine usage). Measured HBM is GPM DRAM traffic (reads and writes); the estimate counts reads.

Source labels: ``measured`` when every role that made calls was measured, ``estimated`` when none was,
``mixed`` otherwise (e.g. a measured self-hosted strong model next to an estimated cloud weak model).
Sessions combine the same way. A report never shows a 0 labelled measured for a role that made calls:
a measurement that saw no tokens of the request is treated as no measurement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..costs.model import HasCalls, ledger_cost
from ..costs.deployment import RoleDeployment
from .attribution import Attributed

Source = Literal["measured", "estimated", "mixed"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoleTokens(_Frozen):
    """One role's measured calls and tokens. ``cached`` is the part of ``prompt`` the engine served from
    cache (delivered); ``predicted_cached`` the part the prompt layout predicts (each prompt's prefix shared
    with the session's previous prompt to the engine); a gap between the two is cache lost or misrouted."""

    model: str
    calls: int = 0
    prompt: int = 0
    cached: int = 0
    decode: int = 0
    predicted_cached: int = 0


class ResourceReport(_Frozen):
    """Resources of one request or session. Each GPU/HBM figure carries its source label."""

    gpu_seconds: float = Field(ge=0)
    gpu_seconds_source: Source
    hbm_bytes: float = Field(ge=0)
    hbm_source: Source
    hbm_bytes_by_role: dict[str, float] = Field(default_factory=dict, description="hbm_bytes per role")
    flops: float = Field(ge=0)
    flops_source: Literal["estimated"] = "estimated"
    tokens: dict[str, RoleTokens]
    strong_calls: int = Field(ge=0)
    dollars: float | None = None  # cloud list price of the priced roles; None if no role is priced


def combine_sources(sources: Iterable[Source]) -> Source:
    """``measured`` if all are, ``estimated`` if all are (or there are none), else ``mixed`` (a ``mixed``
    input makes the result ``mixed``)."""
    seen = set(sources)
    if seen == {"measured"}:
        return "measured"
    if not seen or seen == {"estimated"}:
        return "estimated"
    return "mixed"


def _observed(m: Attributed | None) -> Attributed | None:
    return m if m is not None and m.tokens > 0 else None


def report_from_ledger(
    ledger: HasCalls,
    deployments: Mapping[str, RoleDeployment],
    measured: Mapping[str, Attributed] | None = None,
) -> ResourceReport:
    """The report for one request's ledger. ``measured`` maps role -> that request's attributed share
    (omit a role, or pass None, where no sampler ran). Raises ValueError for a role with calls but no
    deployment."""
    measured = measured or {}
    roles = sorted({c.role for c in ledger.calls})
    missing = [r for r in roles if r not in deployments]
    if missing:
        raise ValueError(f"no deployment for roles {missing}")
    gpu_s = flops = 0.0
    by_role: dict[str, float] = {}
    gpu_src: list[Source] = []
    hbm_src: list[Source] = []
    tokens: dict[str, RoleTokens] = {}
    dollars: float | None = None
    for role in roles:
        dep = deployments[role]
        est = ledger_cost(ledger, role, dep.spec, dep.gpu, dep.n_gpus)  # type: ignore[arg-type]
        m = _observed(measured.get(role))
        gpu_s += m.gpu_seconds if m else est.gpu_latency_s * dep.n_gpus
        gpu_src.append("measured" if m else "estimated")
        dram = m.dram_bytes if m else None
        by_role[role] = dram if dram is not None else est.hbm_point
        hbm_src.append("measured" if dram is not None else "estimated")
        flops += est.flops
        mine = [c.usage for c in ledger.calls if c.role == role]
        t = RoleTokens(model=dep.spec.name, calls=len(mine), prompt=sum(u.prompt_tokens for u in mine),
                       cached=sum(u.cached_prompt_tokens for u in mine), decode=sum(u.decode_tokens for u in mine),
                       predicted_cached=sum(u.predicted_cached_tokens for u in mine))
        tokens[role] = t
        if dep.pricing is not None:
            p = dep.pricing
            cost = ((t.prompt - t.cached) * p.prompt_per_mtok + t.cached * p.cached_per_mtok
                    + t.decode * p.decode_per_mtok) / 1e6
            dollars = cost if dollars is None else dollars + cost
    return ResourceReport(
        gpu_seconds=gpu_s, gpu_seconds_source=combine_sources(gpu_src), hbm_bytes=sum(by_role.values()),
        hbm_source=combine_sources(hbm_src), hbm_bytes_by_role=by_role, flops=flops, tokens=tokens,
        strong_calls=tokens["strong"].calls if "strong" in tokens else 0, dollars=dollars,
    )


def _add_tokens(a: RoleTokens, b: RoleTokens) -> RoleTokens:
    if a.model != b.model:
        raise ValueError(f"one role served by two models: {a.model!r} and {b.model!r}")
    return RoleTokens(model=a.model, calls=a.calls + b.calls, prompt=a.prompt + b.prompt,
                      cached=a.cached + b.cached, decode=a.decode + b.decode,
                      predicted_cached=a.predicted_cached + b.predicted_cached)


def session_report(reports: Iterable[ResourceReport]) -> ResourceReport:
    """Sum of request reports; sources combine by :func:`combine_sources`; dollars sum over the reports
    that have them (None if none has)."""
    reports = list(reports)
    tokens: dict[str, RoleTokens] = {}
    for r in reports:
        for role, t in r.tokens.items():
            tokens[role] = _add_tokens(tokens[role], t) if role in tokens else t
    priced = [r.dollars for r in reports if r.dollars is not None]
    return ResourceReport(
        gpu_seconds=sum(r.gpu_seconds for r in reports),
        gpu_seconds_source=combine_sources(r.gpu_seconds_source for r in reports),
        hbm_bytes=sum(r.hbm_bytes for r in reports),
        hbm_source=combine_sources(r.hbm_source for r in reports),
        hbm_bytes_by_role={role: sum(r.hbm_bytes_by_role.get(role, 0.0) for r in reports)
                           for role in sorted({k for r in reports for k in r.hbm_bytes_by_role})},
        flops=sum(r.flops for r in reports), tokens=tokens,
        strong_calls=sum(r.strong_calls for r in reports), dollars=sum(priced) if priced else None,
    )
