"""What the API reports about sessions: token usage by role, the resource report, and percentiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..costs.ledger import Ledger
from ..telemetry.resources import report_from_ledger


def usage_by_role(ledger: Ledger) -> dict[str, dict[str, Any]]:
    """Measured token usage per role (engine usage, or the token model's for simulated engines)."""
    out = {}
    for role in ("weak", "strong"):
        t = ledger.totals(role)  # type: ignore[arg-type]
        out[role] = {"calls": t.calls, "prompt_tokens": t.prompt_tokens, "cached_prompt_tokens": t.cached_prompt_tokens,
                     "decode_tokens": t.decode_tokens, "wall_s": round(t.wall_s, 6)}
    return out


def resource_report(ledger: Ledger, hardware: Any) -> dict[str, Any]:
    """The session's resource report on the named deployment (GPU-s, HBM bytes and FLOPs are
    estimated; each field says so)."""
    return report_from_ledger(ledger, hardware.deployments()).model_dump(mode="json")


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 90, 99)) -> dict[str, float | int | None]:
    """Nearest-rank percentiles (``p50``...) and the count; None where there are no values."""
    ordered = sorted(values)
    out: dict[str, float | int | None] = {"n": len(ordered)}
    for q in qs:
        out[f"p{q:g}"] = ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))] \
            if ordered else None
    return out
