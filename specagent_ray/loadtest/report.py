"""What a load run reports: one summary (JSON), one row per session (CSV), latency against load (PNG),
and the table the command prints. Every figure is measured by the client over HTTP, except the verifier
batch sizes, which the server reports (``/v1/stats``, counted over the run)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..serve.sessions.reports import percentiles
from .run import LoadResult, SessionRecord

QS = (50, 95, 99)
BUCKET_S = 5.0


def load_summary(result: LoadResult) -> dict[str, Any]:
    cfg, load = result.config, result.load()
    wall = max(result.wall_s, 1e-9)
    done = [r for r in load if r.outcome == "done"]
    steps = sum(r.steps for r in load)
    errors, examples = errors_by_kind(result)
    engines = (result.stats_before or {}).get("engines", "unknown")
    return {
        "measured": True,
        "engines": engines,
        "simulated_engines": engines == "sim",
        "config": {"url": cfg.url, "mode": cfg.mode, "concurrency": cfg.concurrency, "rate": cfg.rate,
                   "sessions": cfg.sessions, "duration_s": cfg.duration_s, "drain_s": cfg.drain_s,
                   "tasks": [f"{s}:{t}" for s, t in cfg.workload.mix], "method": cfg.workload.method,
                   "baseline_method": cfg.baseline_method, "max_errors": cfg.max_errors},
        "stopped_because": result.stopped_because,
        "wall_s": round(result.wall_s, 3),
        "sessions": {"started": len(load), "done": len(done), "errors": sum(errors.values()),
                     "unfinished": sum(r.outcome in ("unfinished", "aborted") for r in load), "shed": result.shed,
                     "throttled_429s": sum(r.throttled for r in load)},
        "sessions_per_min": round(60 * len(done) / wall, 2),
        "committed_steps": steps,
        "steps_per_s": round(steps / wall, 2),
        "client_cpu_ms_per_step": (round(1000 * result.client_cpu_s / steps, 3)
                                   if result.client_cpu_s is not None and steps else None),
        **latencies(result),
        "errors_by_kind": dict(errors.most_common()),
        "error_examples": examples,
        "verify_batch_sizes": verify_batches(result.stats_before, result.stats_after),
        "strong_tokens": savings(done, [r for r in result.baseline() if r.outcome == "done"], cfg.baseline_method),
        "stages": stages(result),
        "timeline": timeline(result),
    }


def latencies(result: LoadResult) -> dict[str, Any]:
    """Step and session latency percentiles: from Locust's statistics (its STEP and SESSION entries) when
    Locust ran the load, else from the session records."""
    stats = result.locust
    if stats is not None:
        return {"step_latency_s": percentiles(stats.times_s("STEP"), QS),
                "session_latency_s": percentiles(stats.times_s("SESSION"), QS), "latency_source": "locust"}
    load = result.load()
    return {"step_latency_s": percentiles([x for r in load for x in r.step_latencies], QS),
            "session_latency_s": percentiles([r.end_s - r.start_s for r in load if r.outcome == "done"
                                              and r.end_s is not None], QS), "latency_source": "records"}


def errors_by_kind(result: LoadResult) -> tuple[Counter[str], dict[str, str]]:
    """Failed sessions by error kind, with the first message of each: Locust's SESSION failures when
    Locust ran the load, else the session records."""
    errors: Counter[str] = Counter()
    examples: dict[str, str] = {}
    if result.locust is not None:
        for f in result.locust.failures:
            if f["type"] == "SESSION":
                errors[f["kind"]] += f["occurrences"]
                examples.setdefault(f["kind"], f["message"])
        return errors, examples
    for r in result.load():
        if r.error_kind:
            errors[r.error_kind] += 1
            examples.setdefault(r.error_kind, r.error or "")
    return errors, examples


def verify_batches(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """Verifier batches formed during the run: ``{size: count}`` and the mean requests per batch."""
    if not after:
        return {"sizes": {}, "batches": 0, "mean": None, "note": "the server's stats were unavailable after the run"}
    old = Counter({int(k): v for k, v in ((before or {}).get("batch_sizes", {}).get("verify", {})).items()})
    new = Counter({int(k): v for k, v in after.get("batch_sizes", {}).get("verify", {}).items()})
    sizes = {k: v for k, v in sorted((new - old).items()) if v > 0}
    batches = sum(sizes.values())
    return {"sizes": sizes, "batches": batches,
            "mean": round(sum(k * v for k, v in sizes.items()) / batches, 3) if batches else None}


def savings(load: list[SessionRecord], baseline: list[SessionRecord], method: str) -> dict[str, Any]:
    """Strong-model tokens of the load sessions against the baseline method on the same (task, trial)s."""
    by_index = {r.index: r for r in load}
    pairs = [(by_index[b.index], b) for b in baseline if b.index in by_index]
    if not pairs:
        return {"pairs": 0, "note": "no baseline sessions completed (use --baseline-sessions N > 0)"}

    def total(rs: list[SessionRecord], attr: str) -> int:
        return sum(getattr(r, attr) for r in rs)

    spec, base = [p[0] for p in pairs], [p[1] for p in pairs]
    out: dict[str, Any] = {"pairs": len(pairs), "baseline_method": method}
    for attr in ("strong_decode", "strong_prompt", "strong_calls"):
        a, b = total(spec, attr), total(base, attr)
        out[attr] = {"load": a, "baseline": b, "ratio": round(a / b, 4) if b else None}
    d = out["strong_decode"]
    out["decode_saving"] = round(1 - d["ratio"], 4) if d["ratio"] is not None else None
    return out


def stages(result: LoadResult) -> list[dict[str, Any]]:
    """Per closed-loop stage (one without ``--concurrency`` levels): steps/s and the latency of the steps
    delivered inside the stage's window (the drain after the last stage is not part of any)."""
    delivered = list(_delivered_steps(result))
    out = []
    for begin, end, level in result.levels:
        latencies = [latency for t, latency in delivered if begin <= t < end]
        flight = [snap["in_flight"] for snap in result.timeline if begin <= snap["t"] < end]
        out.append({"concurrency": level, "from_s": round(begin, 3), "to_s": round(end, 3),
                    "steps": len(latencies), "steps_per_s": round(len(latencies) / max(end - begin, 1e-9), 2),
                    "in_flight_mean": round(sum(flight) / len(flight), 1) if flight else None,
                    "step_latency_s": percentiles(latencies, QS)})
    return out


def _delivered_steps(result: LoadResult) -> Iterator[tuple[float, float]]:
    """(delivery time, step latency) for every committed step of the load phase."""
    for r in result.load():
        latencies = iter(r.step_latencies)
        for t, n in r.commits:
            for _ in range(n):
                yield t, next(latencies)


def timeline(result: LoadResult) -> list[dict[str, Any]]:
    """Per ``BUCKET_S`` seconds: sessions in flight (mean of the samples) and the latency of the steps
    committed in that bucket."""
    buckets: dict[int, list[float]] = {}
    for t, latency in _delivered_steps(result):
        buckets.setdefault(int(t // BUCKET_S), []).append(latency)
    flights: dict[int, list[float]] = {}
    for snap in result.timeline:
        flights.setdefault(int(snap["t"] // BUCKET_S), []).append(snap["in_flight"])
    out = []
    for b in sorted(set(buckets) | set(flights)):
        lat = percentiles(buckets.get(b, []), QS)
        inflight = flights.get(b, [])
        out.append({"t": b * BUCKET_S, "in_flight": round(sum(inflight) / len(inflight), 1) if inflight else None,
                    "steps": lat["n"], "p50_s": lat["p50"], "p95_s": lat["p95"], "p99_s": lat["p99"]})
    return out


def write_outputs(result: LoadResult, summary: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "loadtest.json", out / "sessions.csv"]
    paths[0].write_text(json.dumps(summary, indent=2) + "\n")
    with paths[1].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "phase", "method", "tool_source", "task_id", "trial", "session_id", "outcome",
                    "error_kind", "error", "start_s", "end_s", "steps", "step_latency_mean_s", "throttled",
                    "strong_calls", "strong_prompt", "strong_decode", "weak_decode"])
        for r in result.records:
            mean = sum(r.step_latencies) / len(r.step_latencies) if r.step_latencies else ""
            w.writerow([r.index, r.phase, r.method, r.tool_source, r.task_id, r.trial, r.session_id or "", r.outcome,
                        r.error_kind or "", r.error or "", round(r.start_s, 4),
                        "" if r.end_s is None else round(r.end_s, 4), r.steps, mean, r.throttled,
                        r.strong_calls, r.strong_prompt, r.strong_decode, r.weak_decode])
    png = plot(summary, out / "latency.png")
    return paths + ([png] if png else [])


def plot(summary: dict[str, Any], path: Path) -> Path | None:
    """Step latency against load: over time with sessions in flight, and p50/p99 against sessions in flight."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None  # the bench extra is not installed; the JSON and CSV hold the same figures
    flight = [r for r in summary["timeline"] if r["in_flight"] is not None]
    rows = [r for r in flight if r["p50_s"] is not None]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    left.plot([r["t"] for r in flight], [r["in_flight"] for r in flight], color="tab:gray",
              label="sessions in flight")
    left.set_xlabel("time since start (s)")
    left.set_ylabel("sessions in flight")
    lat = left.twinx()
    for q, style in (("p50_s", "-"), ("p99_s", "--")):
        lat.plot([r["t"] for r in rows], [r[q] for r in rows], style, color="tab:blue", label=f"step latency {q[:3]}")
    lat.set_ylabel("step latency (s)")
    left.legend(loc="upper left")
    lat.legend(loc="upper right")
    for q, marker in (("p50_s", "o"), ("p99_s", "^")):
        right.scatter([r["in_flight"] for r in rows], [r[q] for r in rows], marker=marker, s=12, alpha=0.35,
                      label=f"{q[:3]}, {BUCKET_S:g} s buckets")
    levels = [st for st in summary["stages"] if st["step_latency_s"]["n"]]
    for q, marker in (("p50", "o"), ("p99", "^")):
        right.plot([st["in_flight_mean"] for st in levels], [st["step_latency_s"][q] for st in levels],
                   marker=marker, markersize=9, label=f"{q} per stage (concurrency " +
                   ", ".join(str(st["concurrency"]) for st in levels) + ")")
    right.set_xlabel("sessions in flight")
    right.set_ylabel("step latency (s)")
    right.legend(fontsize=8)
    engines = "SIMULATED engines" if summary["simulated_engines"] else f"engines: {summary['engines']}"
    fig.suptitle(f"Step latency against load, measured over HTTP ({engines}; {summary['config']['mode']} loop, "
                 f"{BUCKET_S:g} s buckets)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def print_summary(console: Console, s: dict[str, Any]) -> None:
    engines = "SIMULATED engines" if s["simulated_engines"] else f"engines: {s['engines']}"
    table = Table(title=f"Load test, {s['config']['mode']} loop against {s['config']['url']} "
                        f"(measured over HTTP; {engines})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    ss = s["sessions"]
    rows = [("sessions started / done", f"{ss['started']} / {ss['done']}"),
            ("errors", str(ss["errors"])), ("unfinished at the bound", str(ss["unfinished"])),
            ("shed (open loop, client cap)", str(ss["shed"])), ("429s waited out", str(ss["throttled_429s"])),
            ("wall s", f"{s['wall_s']:.1f}"), ("sessions / min", f"{s['sessions_per_min']:.1f}"),
            ("committed steps", str(s["committed_steps"])), ("committed steps / s", f"{s['steps_per_s']:.1f}")]
    if s.get("client_cpu_ms_per_step") is not None:
        rows.append(("load client CPU ms / step (all its processes)", f"{s['client_cpu_ms_per_step']:.2f}"))
    for name, key in (("step latency", "step_latency_s"), ("session latency", "session_latency_s")):
        p = s[key]
        rows.append((f"{name} p50 / p95 / p99 ms", " / ".join(_ms(p[f"p{q}"]) for q in QS)))
    vb = s["verify_batch_sizes"]
    if vb["batches"]:
        top = ", ".join(f"{k}:{v}" for k, v in sorted(vb["sizes"].items())[-6:])
        rows.append(("verify requests / batch (mean)", f"{vb['mean']:.2f}"))
        rows.append(("verify batch sizes (largest six, size:count)", top))
    st = s["strong_tokens"]
    if st.get("pairs"):
        d, p = st["strong_decode"], st["strong_prompt"]
        rows.append((f"strong decode tokens vs {st['baseline_method']} ({st['pairs']} paired sessions)",
                     f"{d['load']} / {d['baseline']} = {d['ratio']} (saving {st['decode_saving']:.1%})"))
        rows.append(("strong prompt tokens (same pairs)", f"{p['load']} / {p['baseline']} = {p['ratio']}"))
    if len(s["stages"]) > 1:
        for st in s["stages"]:
            p = st["step_latency_s"]
            rows.append((f"stage {st['concurrency']} sessions ({st['from_s']:g}-{st['to_s']:g} s): steps/s, "
                         f"step p50 / p99 ms", f"{st['steps_per_s']:.1f}; {_ms(p['p50'])} / {_ms(p['p99'])}"))
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    console.print(f"stopped because: {s['stopped_because']}")
    if s["errors_by_kind"]:
        console.print("[red]errors by kind[/red] (first message of each):")
        for kind, n in s["errors_by_kind"].items():
            console.print(f"  {kind}: {n}  e.g. {s['error_examples'].get(kind, '')[:200]}", markup=False)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000 * v:.1f}"
