"""Usage by tenant and day, from the session log (``GET /v1/usage``, operator keys only).

Everything is read from the records the log holds (archives of finished sessions, the snapshot, the
segments after it), so it survives coordinator restarts, and each shard answers for its own namespace.
Per (tenant, UTC day): tokens by role (prompt, cached, decode), calls, strong calls (prefills ahead of a
verify apart), ESTIMATED GPU-seconds and HBM bytes of every role (`hbm_bytes`; `by_role` splits both;
`strong_hbm_bytes` is the strong model alone) and FLOPs (the cost model on the profile's
hardware, per call, as the sessions' resource reports price them: a day's figures are the sum of its
calls'), sessions created and sessions ended by status. A call counts on the day of the record that
carries it (``at``, stamped by the coordinator; a record from before that stamp counts on its session's
creation day, and a session from before that on day 1970-01-01).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ...costs.hardware import Hardware
from ...costs.ledger import Ledger, decoding
from ...telemetry.resources import combine_sources, report_from_ledger
from ..log.wire import call_from

CALLS = ("commit", "calls")  # the records that carry model calls


def day_of(at: float | None) -> str:
    return dt.datetime.fromtimestamp(at or 0, dt.timezone.utc).date().isoformat()


def tenant_usage(sessions: Iterable[list[dict[str, Any]]], hardware: Hardware, tenant: str | None = None,
                 since: str | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """{tenant: {day: figures}} over the sessions' records, for one tenant or all, from day ``since`` on."""
    ledgers: dict[tuple[str, str], Ledger] = defaultdict(Ledger)
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for records in sessions:
        created = next((r for r in records if r.get("t") == "created"), None)
        if created is None:
            continue
        owner = created.get("owner", "local")
        if tenant is not None and owner != tenant:
            continue
        start = created.get("at")
        counts[(owner, day_of(start))]["sessions_created"] += 1
        for r in records:
            day = day_of(r.get("at", start))
            if r.get("t") in CALLS:
                for call in r.get("calls", []):
                    ledgers[(owner, day)].record(call_from(call))
            elif r.get("t") == "final":
                counts[(owner, day)][f"sessions_{r.get('status')}"] += 1
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for key in sorted(set(ledgers) | set(counts)):
        owner, day = key
        if since is not None and day < since:
            continue
        out[owner][day] = {**figures(ledgers.get(key, Ledger()), hardware), **counts.get(key, {})}
    return dict(out)


def figures(ledger: Ledger, hardware: Hardware) -> dict[str, Any]:
    """One (tenant, day)'s calls: tokens by role, calls, and the ESTIMATED resources, also by role (where
    a GPU meter measured a role, ``with_measured`` puts its figures in their place)."""
    deployments = hardware.deployments()
    report = report_from_ledger(ledger, deployments)
    tokens = {role: {"calls": t.calls, "prompt": t.prompt, "cached": t.cached, "decode": t.decode}
              for role, t in report.tokens.items()}
    by_role = {}
    for role in report.tokens:
        alone = report_from_ledger(Ledger([c for c in ledger.calls if c.role == role]), deployments)
        by_role[role] = {"gpu_seconds": alone.gpu_seconds, "gpu_seconds_source": "estimated",
                         "hbm_bytes": alone.hbm_bytes, "hbm_source": "estimated"}
    strong = len(decoding(ledger.calls))
    return {"tokens": tokens, "strong_calls": strong, "prefill_calls": report.strong_calls - strong,
            "gpu_seconds": report.gpu_seconds, "gpu_seconds_source": "estimated", "by_role": by_role,
            "hbm_bytes": report.hbm_bytes, "hbm_source": "estimated",  # every role; by_role has the split
            "strong_hbm_bytes": report.hbm_bytes_by_role.get("strong", 0.0), "strong_hbm_source": "estimated",
            "flops": report.flops, "label": "estimated (cost model on the profile's hardware; tokens as recorded)"}


def with_measured(usage: dict[str, dict[str, Any]], measured: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The shards' usage with each (tenant, day, role) the GPU meter measured in place of its estimate:
    ``{tenant: {day: {role: {gpu_seconds, dram_bytes}}}}`` (``telemetry/meter_book.py``). A role's figure
    says its source; a sum over roles is ``measured``, ``estimated`` or ``mixed``, never unlabelled. DRAM
    bytes the meter could not read leave that role's HBM estimated."""
    for tenant, days in usage.items():
        for day, f in days.items():
            for role, m in measured.get(tenant, {}).get(day, {}).items():
                if role not in f.get("by_role", {}):
                    continue
                row = f["by_role"][role]
                row.update(gpu_seconds=m["gpu_seconds"], gpu_seconds_source="measured")
                if m.get("dram_bytes") is not None:
                    row.update(hbm_bytes=m["dram_bytes"], hbm_source="measured")
            rows = f.get("by_role", {}).values()
            f["gpu_seconds"] = sum(r["gpu_seconds"] for r in rows)
            f["gpu_seconds_source"] = combine_sources(r["gpu_seconds_source"] for r in rows)
            if "hbm_bytes" in f:  # usage written before totals were kept has none to correct
                f["hbm_bytes"] = sum(r["hbm_bytes"] for r in rows)
                f["hbm_source"] = combine_sources(r["hbm_source"] for r in rows)
            if (strong := f.get("by_role", {}).get("strong")) is not None:
                f["strong_hbm_bytes"], f["strong_hbm_source"] = strong["hbm_bytes"], strong["hbm_source"]
            f["label"] = f"GPU-s {f['gpu_seconds_source']} (by_role says which role is which); tokens as recorded"
    return usage


def merged(shards: Iterable[Mapping[str, Mapping[str, Mapping[str, Any]]]]) -> dict[str, dict[str, Any]]:
    """The shards' usage added up: every shard owns other sessions, so nothing is counted twice."""
    out: dict[str, dict[str, Any]] = {}
    for shard in shards:
        for owner, days in shard.items():
            for day, f in days.items():
                out.setdefault(owner, {})[day] = _add(out.get(owner, {}).get(day), f)
    return out


def _add(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if isinstance(a, dict):
        return {k: _add(a.get(k), b.get(k)) if k in b else a[k] for k in a} | {k: v for k, v in b.items() if k not in a}
    return a + b if isinstance(a, (int, float)) and not isinstance(a, bool) else a
