"""What the API reports: token usage by role, the resource report, percentiles, and the running totals."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..costs.hardware import Hardware
from ..costs.ledger import Ledger
from ..telemetry.resources import report_from_ledger
from .config import AppConfig
from .records import Commit, ProtocolEvent, Record
from .session import Session, summary
from .wire import step_dict


def usage_by_role(ledger: Ledger) -> dict[str, dict[str, Any]]:
    """Measured token usage per role (engine usage, or the token model's for simulated engines)."""
    out = {}
    for role in ("weak", "strong"):
        t = ledger.totals(role)  # type: ignore[arg-type]
        out[role] = {"calls": t.calls, "prompt_tokens": t.prompt_tokens, "cached_prompt_tokens": t.cached_prompt_tokens,
                     "decode_tokens": t.decode_tokens, "wall_s": round(t.wall_s, 6)}
    return out


def resource_report(ledger: Ledger, hardware: Hardware) -> dict[str, Any]:
    """The session's resource report on the profile's deployment, which it names under ``hardware``
    (GPU-s, HBM bytes and FLOPs are estimated; each field says so)."""
    report = report_from_ledger(ledger, hardware.deployments()).model_dump(mode="json")
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
    Overhead and log-wait samples are bounded to the most recent ``keep``."""

    def __init__(self, keep: int = 200_000):
        self.committed_steps = self.fallbacks = self.redrafts = 0
        self.cpu_at_start = time.process_time()
        self.finished: dict[str, int] = {}
        self.overheads: deque[float] = deque(maxlen=keep)
        self.log_waits: deque[float] = deque(maxlen=keep)

    def count(self, record: Record) -> None:
        match record:
            case Commit(steps=steps):
                self.committed_steps += len(steps)
            case ProtocolEvent(t="verifier_fallback"):
                self.fallbacks += 1
            case ProtocolEvent(t="redraft"):
                self.redrafts += 1


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
            "fallbacks": m.fallbacks, "redrafts": m.redrafts,
            # CPU time of the coordinator's whole process (all threads, Ray's included) since it started
            "process_cpu_s": round(time.process_time() - m.cpu_at_start, 3)}


def trajectory_report(s: Session, cfg: AppConfig) -> dict[str, Any]:
    """``GET /v1/sessions/{id}``: the session's summary, committed steps, tokens by role, and the resource
    report estimated on the profile's hardware."""
    return {**summary(s), "method": s.request.method or cfg.defaults.method,
            "task_id": s.task.id, "opening": s.task.instruction, "reward": s.reward,
            "steps": [step_dict(x) for x in s.steps], "usage": usage_by_role(s.ledger),
            "resources": resource_report(s.ledger, cfg.hardware)}
