"""``specagent-ray bench roofline`` (and ``python -m specagent_ray.bench.roofline``): the probe's flags, its run
from them (``probe.py`` measures), the profile written and the report printed."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ...costs import measured_gpus as pf
from ...arguments import ints
from .device import SHAPES
from .probe import DEFAULTS, ProbeConfig, run_probe

HELP = """Measures, on this device with PyTorch alone (no vLLM, no download), random-weight decoders of two
named shapes: the drafter's (qwen3-4b) and the largest dense Qwen3 shape whose weights fill at most 55 %
of the GPU. At each batch size: time and DRAM bytes (NVML GPM) of one decode step, of one verify prefill
(a 5,000-token history plus a 600-token block) and of the 40-token verdict decode after it; plus a
device-to-device copy (achieved bandwidth, and the NVML sampler's bytes against the known size) and a
bf16 matrix product (achieved FLOP/s). Derives the decode knee (Assumption 1), v/d and kappa, printed next
to the ESTIMATED figures of the shipped GPU profile.

Time: about 2-4 minutes on an H200; phases not started within --time-budget-s (390 s) are skipped, so
a GPU run ends well inside 8 minutes. Seconds on the CPU, where every length is scaled down and tiny
shapes run. Writes: a GPU run to specagent_ray/costs/data/measured/<device>.yaml, a
CPU run to results/roofline-cpu.yaml (a CPU run is refused under costs/data). Lengths above are the GPU
defaults; each flag below overrides one."""


def _f(x: float | None, scale: float = 1.0, fmt: str = ".3g") -> str:
    return "—" if x is None else format(x * scale, fmt)


def print_report(console: Console, gpu: dict[str, Any], measured: dict[str, Any], out: Path) -> None:
    """The table per shape and the summary; every column says measured or estimated."""
    d, where = measured["derived"], measured["device"]
    console.width = max(console.width, 172)  # thirteen columns: wider than a terminal, rather than truncated
    est = f"estimated on the shipped '{d['gpu_profile']}' profile" if d["gpu_profile"] else "no shipped profile: no estimates"
    for name, shape in measured["shapes"].items():
        t = Table(title=f"{name} ({shape['params'] / 1e9:.3g} B params), measured on {where}; est. = {est}")
        for col in ("batch", "decode ms/step", "est.", "decode GB/step", "prefill s", "est.", "prefill GB",
                    "verdict s", "v/d (time)", "est.", "v/d (bytes)", "prefill/step", "skipped"):
            t.add_column(col, justify="left" if col == "skipped" else "right")
        for r in shape["rows"]:
            x = d["shapes"][name]["rows"][r["batch"]]
            t.add_row(str(r["batch"]), _f(r["decode_step_s"], 1e3), _f(x.get("est_decode_step_s"), 1e3),
                      _f(r["decode_dram_bytes"], 1e-9), _f(r["verify_prefill_s"]), _f(x.get("est_verify_prefill_s")),
                      _f(r["verify_prefill_dram_bytes"], 1e-9), _f(r["verdict_decode_s"]), _f(x["v_over_d_time"]),
                      _f(x.get("est_v_over_d")), _f(x["v_over_d_bytes"]), _f(x["prefill_in_decode_steps"]),
                      ", ".join(r["skipped"]))
        console.print(t)
        for r in shape["rows"]:
            for phase, why in r["skipped"].items():
                console.print(f"  skipped: {name} batch {r['batch']} {phase}: {escape(why)}", soft_wrap=True)
    s = Table(title=f"Roofline summary: measured on {where}; {est}")
    for col in ("figure", "measured", "estimated", "measured / estimated"):
        s.add_column(col, justify="left" if col == "figure" else "right")
    shipped = pf.shipped_gpu(d["gpu_profile"])
    copy = measured["copy_check"]
    rows = [("copy bandwidth, bytes/s (read + write)", copy["copy_bytes_per_s"], shipped and shipped.hbm_bytes_per_s),
            ("matrix product, FLOP/s", measured["matmul"]["flops_per_s"], shipped and shipped.peak_flops),
            ("balance point, sequences (from the two rates above)", d["microbench_knee"], d["estimated_knee"])]
    for name in measured["shapes"]:
        knee = d["shapes"][name]["knee"] or {}
        rows += [(f"{name}: decode bandwidth-bound up to batch", knee.get("bandwidth_bound_up_to"), d["estimated_knee"]),
                 (f"{name}: decode knee, interpolated", knee.get("interpolated"), d["estimated_knee"])]
    rows += [(f"kappa at batch {b} ({measured['weak']} / {measured['strong']})", k["measured"], k["estimated"])
             for b, k in d["kappa"].items()]
    rows.append(("NVML sampler DRAM bytes / copied bytes (ideal: 1)", copy["sampler_over_expected"], None))
    for label, m, e in rows:
        s.add_row(label, _f(m), _f(e), _f(pf.ratio(m, e)))
    console.print(s)
    if copy["sampler_reason"]:
        console.print(f"DRAM bytes not measured: {escape(copy['sampler_reason'])}")
    console.print(f"wrote {out}: profile {gpu['name']} (label: measured; {where}; driver {measured['driver']}; "
                  f"{measured['date']}; {measured['wall_s']} s)", soft_wrap=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The probe's flags (shared by ``specagent-ray bench roofline`` and ``python -m``)."""
    a = p.add_argument
    a("--device", choices=["auto", "cuda", "cpu"], default="auto", help="auto: cuda when PyTorch sees a GPU")
    a("--weak", help=f"the drafter's shape (GPU qwen3-4b, CPU tiny); one of {', '.join(SHAPES)}")
    a("--strong", help="the strong stand-in's shape, or auto: the largest dense shape that fits (GPU auto, CPU tiny-wide)")
    a("--batches", type=ints, default=(1, 4, 16, 64, 256), help="batch sizes, comma-separated")
    a("--history", type=int, help="history tokens of the verify prefill (GPU 5000, CPU 48)")
    a("--block", type=int, help="tokens of the drafted 6-step block (GPU 600, CPU 16)")
    a("--verdict", type=int, help="verdict decode tokens after the prefill (GPU 40, CPU 4)")
    a("--context", type=int, help="positions one timed decode step attends to (GPU 32, CPU 8)")
    a("--step-tokens", type=int, default=700, help="decode tokens of one strong step: d in v/d (the token model's 700)")
    a("--tolerance", type=float, default=1.2, help="decode counts as bandwidth-bound while its step time stays "
      "within this factor of batch 1's")
    a("--min-phase-s", type=float, help="each phase repeats to fill this long, one sampler window (GPU 0.5, CPU 0.05)")
    a("--copy-mib", type=int, help="size of the copy check's buffer (GPU 4096, CPU 16)")
    a("--copies", type=int, help="copies in the copy check (default: enough for twice --min-phase-s)")
    a("--matmul-n", type=int, help="size of the matrix product (GPU 8192, CPU 256)")
    a("--memory-budget-mib", type=float, help="memory a phase may use beyond the weights (default: what is free)")
    a("--gpu-profile", help="shipped GPU profile for the ESTIMATED figures (default: matched from the GPU's name)")
    a("--nvml-index", type=int, help="the GPU's NVML index (default: the first of CUDA_VISIBLE_DEVICES, else 0)")
    a("--no-cuda-graphs", action="store_true", help="launch each decode step from Python (slower at small batch)")
    a("--seed", type=int, default=0, help="seed of the random weights and tokens")
    a("--time-budget-s", type=float, help="phases not started within this many seconds are skipped, so the "
      "profile is always written (GPU 390, CPU 0: none)")
    a("--out", type=Path, help="the profile YAML (GPU: specagent_ray/costs/data/measured/<device>.yaml, "
      "CPU: results/roofline-cpu.yaml; a CPU run is refused under costs/data)")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``roofline`` under ``specagent-ray bench``."""
    p = sub.add_parser("roofline", help="MEASURED decode/prefill roofline of random-weight decoders on this "
                       "device (PyTorch only)", description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(run=run_from_args)
    return p


def config_from_args(args: argparse.Namespace) -> ProbeConfig:
    """The run's settings: the device's defaults where a flag is not given. ValueError on a bad value."""
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but PyTorch sees no CUDA device")
    d = DEFAULTS[device]
    pick = lambda name: d[name] if getattr(args, name) is None else getattr(args, name)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    cfg = ProbeConfig(
        device=device, weak=pick("weak"), strong=pick("strong"), batches=args.batches, history=pick("history"),
        block=pick("block"), verdict=pick("verdict"), context=pick("context"), min_phase_s=pick("min_phase_s"),
        copy_bytes=d["copy_bytes"] if args.copy_mib is None else args.copy_mib << 20, matmul_n=pick("matmul_n"),
        step_tokens=args.step_tokens, tolerance=args.tolerance, copies=args.copies, graphs=not args.no_cuda_graphs,
        memory_budget=None if args.memory_budget_mib is None else int(args.memory_budget_mib * (1 << 20)),
        gpu_profile=args.gpu_profile, seed=args.seed, time_budget_s=pick("time_budget_s"),
        nvml_index=args.nvml_index if args.nvml_index is not None else int(visible) if visible.isdigit() else 0)
    unknown = [n for n in (cfg.weak, cfg.strong) if n not in SHAPES and n != "auto"]
    if unknown or cfg.weak == "auto":
        raise ValueError(f"unknown shape {unknown or ['auto']}; known: {', '.join(SHAPES)} (auto for --strong)")
    if not cfg.batches or min(cfg.batches + (cfg.history, cfg.block, cfg.verdict, cfg.context - 1, cfg.step_tokens)) < 1:
        raise ValueError("batches and every length must be >= 1 (--context >= 2)")
    pf.shipped_gpu(cfg.gpu_profile)  # an unknown profile fails before anything runs
    return cfg


def run_from_args(args: argparse.Namespace, console: Console) -> int:
    """Measure, write the profile, print the tables. A CPU run aimed at costs/data is refused up front."""
    cfg = config_from_args(args)
    if args.out is not None:
        pf.check_out(args.out, cfg.device)
    gpu, measured = run_probe(cfg, console)
    out = args.out or pf.default_out(cfg.device, measured["device"])
    pf.check_out(out, cfg.device)
    pf.write_profile(out, gpu, measured)
    print_report(console, gpu, measured, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m specagent_ray.bench.roofline``: the same command without the rest of the CLI."""
    p = argparse.ArgumentParser(prog="python -m specagent_ray.bench.roofline", description=HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    console = Console(width=max(Console().width, 160))
    try:
        return run_from_args(p.parse_args(argv), console)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return 2
