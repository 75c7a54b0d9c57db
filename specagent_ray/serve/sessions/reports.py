"""What the API reports: token usage by role, the resource report, percentiles, and the running totals."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ...costs.hardware import Hardware
from ...costs.ledger import Ledger, decoding
from ...telemetry.resources import report_from_ledger
from ..core.config import AppConfig
from ..log.records import Commit, ModelCalls, ProtocolEvent, Record
from ..log.wire import step_dict
from .session import Session, summary

log = logging.getLogger(__name__)
ROLES = ("weak", "mid", "strong")  # "mid": the three-tier chain's mid verifier, reported where it had calls
ALWAYS = ("weak", "strong")  # the roles every report names, with zeros where they had no calls


def usage_by_role(ledger: Ledger) -> dict[str, dict[str, Any]]:
    """Measured token usage per role (engine usage, or the token model's for simulated engines).
    ``calls`` counts every call; ``prefill_calls`` those of them that only prefilled ahead of a verify. The
    mid verifier's row is there only where the session ran the three-tier chain."""
    out = {}
    for role in reported(ledger.calls):
        t = ledger.totals(role)  # type: ignore[arg-type]
        out[role] = {"calls": t.calls, "prefill_calls": t.calls - len(decoding(ledger.calls, role)),
                     "prompt_tokens": t.prompt_tokens, "cached_prompt_tokens": t.cached_prompt_tokens,
                     "predicted_cached_tokens": t.predicted_cached_tokens, "decode_tokens": t.decode_tokens,
                     "wall_s": round(t.wall_s, 6)}
    return out


def reported(calls: Iterable[Any]) -> tuple[str, ...]:
    """The roles a report names: weak and strong always, mid where it had calls."""
    return ROLES if any(c.role == "mid" for c in calls) else ALWAYS


def resource_report(ledger: Ledger, hardware: Hardware, measured: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The session's resource report on the profile's deployment, which it names under ``hardware``:
    GPU-s and HBM bytes MEASURED for the roles in ``measured`` (the GPU meter's share), ESTIMATED for the
    rest, FLOPs estimated; each field says which."""
    report = report_from_ledger(ledger, hardware.deployments(), measured).model_dump(mode="json")
    return {**report, "hardware": hardware.model_dump()}


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 90, 99)) -> dict[str, float | int | None]:
    """Nearest-rank percentiles (``p50``...) and the count; None where there are no values."""
    ordered = sorted(values)
    out: dict[str, float | int | None] = {"n": len(ordered)}
    for q in qs:
        out[f"p{q:g}"] = ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))] \
            if ordered else None
    return out


class Metrics:
    """Running totals for the coordinator's ``stats()``, kept as records are appended (no rescans).
    Overhead, log-wait and per-session cache-share samples are bounded to the most recent ``keep``.
    ``on_session`` sees each finished session (Prometheus, ``telemetry/metrics.py``)."""

    def __init__(self, keep: int = 200_000):
        self.committed_steps = self.fallbacks = self.redrafts = 0
        self.cpu_at_start = time.process_time()
        self.finished: dict[str, int] = {}
        self.overheads: deque[float] = deque(maxlen=keep)
        self.log_waits: deque[float] = deque(maxlen=keep)
        self.cache = {role: [0, 0, 0] for role in ALWAYS}  # prompt, cached (delivered), predicted cached tokens
        self.session_shares: dict[str, deque[float]] = {role: deque(maxlen=keep) for role in ROLES}
        self.on_session: Callable[[Session], None] = lambda s: None

    def count(self, record: Record) -> None:
        match record:
            case Commit(steps=steps, calls=calls):
                self.committed_steps += len(steps)
                self._calls(calls)
            case ModelCalls(calls=calls):
                self._calls(calls)
            case ProtocolEvent(t="verifier_fallback"):
                self.fallbacks += 1
            case ProtocolEvent(t="redraft"):
                self.redrafts += 1

    def _calls(self, calls: Iterable[Any]) -> None:
        for c in calls:
            total, u = self.cache.setdefault(c.role, [0, 0, 0]), c.usage
            total[0] += u[0]
            total[1] += u[1]
            total[2] += u[3] if len(u) > 3 else 0

    def finish(self, s: Session) -> None:
        """A session ended: count it by status, keep its delivered cache share per role."""
        self.finished[s.status] = self.finished.get(s.status, 0) + 1
        for role in reported(s.ledger.calls):
            t = s.ledger.totals(role)  # type: ignore[arg-type]
            if t.prompt_tokens:
                self.session_shares[role].append(t.cached_prompt_tokens / t.prompt_tokens)
        try:
            self.on_session(s)
        except Exception:  # noqa: BLE001 - a metrics exporter never fails a session's end
            log.warning("metrics for session %s not recorded", getattr(s, "id", "?"), exc_info=True)

    def cache_stats(self) -> dict[str, Any]:
        """Per role: prompt tokens, the cached share delivered and predicted, the gap (predicted minus
        delivered: cache the layout promised and the engines did not give), and the delivered share's p10
        over finished sessions (the sessions the cache serves worst)."""
        return {role: cache_row(prompt, cached, predicted, percentiles(self.session_shares.get(role, ()), (10, 50)))
                for role, (prompt, cached, predicted) in self.cache.items()}


def cache_row(prompt: int, cached: int, predicted: int, sessions: dict[str, Any]) -> dict[str, Any]:
    """One role's cache figures: tokens, delivered and predicted shares, their gap, the sessions' shares."""
    share = lambda n: round(n / prompt, 4) if prompt else None
    return {"prompt_tokens": prompt, "cached_tokens": cached, "predicted_cached_tokens": predicted,
            "cached_share": share(cached), "predicted_share": share(predicted), "gap": share(predicted - cached),
            "session_cached_share": sessions}


def combined_cache(shards: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Shards' ``cache_stats()`` as one: tokens summed, shares of the sums; the per-session share's
    percentiles are the worst (lowest) shard's, as sessions' shares do not add up."""
    out = {}
    for role in {r for s in shards for r in s}:
        rows = [s[role] for s in shards if role in s]
        tokens = (sum(r[k] for r in rows) for k in ("prompt_tokens", "cached_tokens", "predicted_cached_tokens"))
        sessions = [r["session_cached_share"] for r in rows]
        low = {k: min((x[k] for x in sessions if x.get(k) is not None), default=None) for k in ("p10", "p50")}
        out[role] = cache_row(*tokens, {"n": sum(x["n"] for x in sessions), **low})
    return out


def merged(counters: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """Histograms (size -> count) added up, by size."""
    out: dict[int, int] = {}
    for c in counters:
        for size, n in c.items():
            out[size] = out.get(size, 0) + n
    return dict(sorted(out.items()))


def shard_stats(c: Any) -> dict[str, Any]:
    """One coordinator shard's ``/v1/stats``: sessions by status, verifier batch sizes, coordinator
    overhead per committed step, the session log's health and the process's CPU time."""
    m = c.metrics
    batches = {name: merged(b.sizes for b in group) for name, group in c.engines.batchers().items()}
    return {"engines": c.cfg.engines.kind, "shard": c.shard,
            "sessions": {"running": len(c.admission), **m.finished},
            "in_memory": len(c.sessions),
            "committed_steps": m.committed_steps, "overhead_s": percentiles(m.overheads),
            "intent_log_wait_s": percentiles(m.log_waits), "batch_sizes": batches,
            "queued": c.engines.queued(), "log_flushes": c.log.flushes, "resumed": c.recovery.resumed,
            "log": {"epoch": c.log.epoch, "flushes": c.log.flushes, "compactions": c.log.compactions,
                    "fenced": c.fenced, "problems": c.recovery.problems, "broken_sessions": dict(c.recovery.broken)},
            "fallbacks": m.fallbacks, "redrafts": m.redrafts, "cache": m.cache_stats(),
            # engine calls by kind (serve/engines/priority.py), from asked to answered; "write": a staged write's wait
            "engine_wait_s": {kind: percentiles(w) for kind, w in c.engines.priority.waits.items()},
            **({"prefill_ahead": dict(ahead.counts)} if (ahead := getattr(c.engines, "ahead", None)) else {}),
            "speculation": c.runner.block_sizes.stats(),  # the K each block was given (adaptive, table)
            # CPU time of the coordinator's whole process (all threads, Ray's included) since it started
            "process_cpu_s": round(time.process_time() - m.cpu_at_start, 3)}


async def shard_usage(c: Any, tenant: str | None = None, since: str | None = None) -> dict[str, Any]:
    """Usage by tenant and day from one shard's session log (``usage.py``), read off the event loop."""
    from .usage import tenant_usage

    return await asyncio.to_thread(lambda: tenant_usage(c.log.all_sessions(), c.cfg.hardware, tenant, since))


def trajectory_report(s: Session, cfg: AppConfig, measured: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``GET /v1/sessions/{id}``: the session's summary, committed steps, tokens by role, and the resource
    report: measured where the GPU meter gave a share, else estimated on the profile's hardware."""
    return {**summary(s), "method": s.request.method or cfg.defaults.method,
            "task_id": s.task.id, "opening": s.task.instruction, "reward": s.reward,
            "steps": [step_dict(x) for x in s.steps], "usage": usage_by_role(s.ledger),
            "resources": resource_report(s.ledger, cfg.hardware, measured)}
