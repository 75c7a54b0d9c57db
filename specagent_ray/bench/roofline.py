"""Roofline probe: MEASURED decode, verify-prefill and verdict costs of random-weight decoders on this device.

For two named dense shapes (the drafter's, qwen3-4b, and a strong stand-in: the largest that fits) built
by ``roofline_device.py``, and per batch size, it measures:

- ``decode_step_s``: one decode step of the whole batch at a short context (``--context`` positions);
- ``verify_prefill_s``: one prefill of a history plus a drafted block (``--history`` + ``--block`` tokens);
- ``verdict_decode_s``: the ``--verdict``-token decode that follows it;

each with the DRAM bytes the project's NVML sampler (GPM DRAM bandwidth) saw over it. From the table come
the decode knee (Assumption 1), v/d and kappa (``costs/profiles.py`` defines them), printed next to the
ESTIMATED figures of the shipped GPU profile. A device-to-device copy of known size checks the sampler.
The result is a GPU profile YAML marked measured (``costs/profiles.py`` reads and writes it).

Guarantees: a phase that does not fit in memory, or would start after ``--time-budget-s``, is recorded as
skipped with the reason (never dropped), so the profile is always written; a DRAM figure
is None with a reason wherever the sampler cannot measure it (CPU, no NVML, no GPM); a CPU run never
writes into ``costs/data``. Entry points: ``specagent-ray bench roofline`` and ``python -m
specagent_ray.bench.roofline`` (PyTorch, no vLLM, no Ray).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..costs import profiles as pf
from .roofline_device import (
    SHAPES,
    DramMeter,
    Shape,
    Stepper,
    Weights,
    build_weights,
    copy_check,
    matmul_rate,
    need_bytes,
    new_cache,
    prefill,
    random_ids,
    timed,
)

GIB = 1 << 30
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


STRONG_CANDIDATES = ("qwen3-32b", "qwen3-14b", "qwen3-8b", "qwen3-4b")
DEFAULTS = {  # lengths in tokens; copy in bytes
    "cuda": {"weak": "qwen3-4b", "strong": "auto", "history": 5000, "block": 600, "verdict": 40, "context": 32,
             "min_phase_s": 0.5, "copy_bytes": 4 * GIB, "matmul_n": 8192, "time_budget_s": 390.0},
    "cpu": {"weak": "tiny", "strong": "tiny-wide", "history": 48, "block": 16, "verdict": 4, "context": 8,
            "min_phase_s": 0.05, "copy_bytes": 16 << 20, "matmul_n": 256, "time_budget_s": 0.0},
}


@dataclass(frozen=True)
class ProbeConfig:
    """One run's settings (lengths in tokens, sizes in bytes); ``config_from_args`` fills the defaults."""

    device: str
    weak: str
    strong: str
    batches: tuple[int, ...]
    history: int
    block: int
    verdict: int
    context: int
    min_phase_s: float
    copy_bytes: int
    matmul_n: int
    step_tokens: int = 700
    tolerance: float = 1.2
    copies: int | None = None
    graphs: bool = True
    memory_budget: int | None = None
    gpu_profile: str | None = None
    nvml_index: int = 0
    seed: int = 0
    time_budget_s: float = 0.0  # 0: none; else phases not started within it are skipped

    @property
    def elem(self) -> int:
        return 2 if self.device == "cuda" else 4  # bf16 on a GPU, float32 on the CPU


# -- phases -------------------------------------------------------------------------------------------------
ROW_KEYS = ("decode_step_s", "decode_dram_bytes", "decode_reps", "verify_prefill_s", "verify_prefill_dram_bytes",
            "verdict_decode_s", "verdict_dram_bytes")


def _size(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB / 8 else f"{n / (1 << 20):.2f} MiB"


def _budget(cfg: ProbeConfig) -> int:
    import torch

    if cfg.memory_budget is not None:
        return cfg.memory_budget
    if cfg.device == "cuda":
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info()[0] - GIB
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2


def verify_window(cfg: ProbeConfig) -> int:
    """KV positions of the verify phase: history + block + verdict, rounded up to 16 (aligned for the
    attention kernels; the verdict's steps mask the positions past them)."""
    return -(-(cfg.history + cfg.block + cfg.verdict) // 16) * 16


def _decode(w: Weights, cfg: ProbeConfig, b: int, meter: DramMeter, sync) -> tuple[dict[str, Any], str | None]:
    cache = new_cache(w, b, cfg.context)  # the step at the last position attends to all `context`
    prefill(w, random_ids(w, b, cfg.context - 1), cache)
    step = Stepper(w, cache, b, cfg.context - 1, cfg.graphs, advance=False)  # the same position, replayed
    s, dram, reps, reason = timed(step, meter, sync, cfg.min_phase_s, 100_000)
    return {"decode_step_s": s, "decode_dram_bytes": dram, "decode_reps": reps}, reason


def _verify(w: Weights, cfg: ProbeConfig, b: int, meter: DramMeter, sync) -> tuple[dict[str, Any], str | None]:
    t = cfg.history + cfg.block
    cache, ids = new_cache(w, b, verify_window(cfg)), random_ids(w, b, t)
    p_s, p_dram, _, r1 = timed(lambda: prefill(w, ids, cache), meter, sync, cfg.min_phase_s, 20)
    step = Stepper(w, cache, b, t, cfg.graphs, advance=True)

    def verdict() -> None:
        step.at.fill_(t)
        for _ in range(cfg.verdict):
            step()

    v_s, v_dram, _, r2 = timed(verdict, meter, sync, cfg.min_phase_s, 100)
    return {"verify_prefill_s": p_s, "verify_prefill_dram_bytes": p_dram, "verdict_decode_s": v_s,
            "verdict_dram_bytes": v_dram}, r1 or r2


def probe_batch(w: Weights, cfg: ProbeConfig, b: int, meter: DramMeter, sync, deadline: float = math.inf
                ) -> dict[str, Any]:
    """One table row. A phase that would not fit (estimated), ran out of memory or would start after
    ``deadline`` (perf_counter) is left None and named under ``skipped`` with the reason; ``dram_reason``
    says why DRAM bytes are None, if they are."""
    import torch

    row: dict[str, Any] = {"batch": b, **dict.fromkeys(ROW_KEYS), "skipped": {}, "dram_reason": None}
    t = cfg.history + cfg.block
    for name, run, window, tokens in (("decode", _decode, cfg.context, cfg.context - 1),
                                      ("verify", _verify, verify_window(cfg), t)):
        need, budget = need_bytes(w.shape, b, window, tokens, cfg.elem, cfg.device == "cpu"), _budget(cfg)
        if time.perf_counter() > deadline:
            row["skipped"][name] = f"time budget of {cfg.time_budget_s:g} s spent"
            continue
        if need > budget:
            row["skipped"][name] = f"needs about {_size(need)} beyond the weights, {_size(budget)} free (estimated)"
            continue
        try:
            figures, reason = run(w, cfg, b, meter, sync)
        except torch.OutOfMemoryError as exc:
            row["skipped"][name] = f"out of memory: {str(exc).splitlines()[0][:160]}"
        else:
            row.update(figures)
            row["dram_reason"] = row["dram_reason"] or reason
        if cfg.device == "cuda":
            gc.collect()  # what an out-of-memory error's frames held
            torch.cuda.empty_cache()
    return row


def probe_shape(shape: Shape, cfg: ProbeConfig, meter: DramMeter, sync, console: Console,
                deadline: float = math.inf) -> dict[str, Any]:
    """Every batch of one shape, on freshly drawn weights (freed afterwards)."""
    import torch

    w = build_weights(shape, cfg.device, cfg.elem, max(verify_window(cfg), cfg.context), cfg.seed)
    warm = min(64, cfg.history)
    prefill(w, random_ids(w, 1, warm), new_cache(w, 1, warm))
    attention, rows = "fused GQA kernel" if w.fused_gqa else "K/V expanded per query head", []
    for b in cfg.batches:
        rows.append(probe_batch(w, cfg, b, meter, sync, deadline))
        console.log(f"{shape.name} batch {b}: done" + (f" (skipped: {', '.join(rows[-1]['skipped'])})"
                                                        if rows[-1]["skipped"] else ""))
    del w
    if cfg.device == "cuda":
        torch.cuda.empty_cache()
    return {"shape": {f.name: getattr(shape, f.name) for f in fields(shape)}, "params": shape.params(),
            "weight_bytes": shape.params() * cfg.elem, "kv_bytes_per_token": shape.kv_per_token(cfg.elem),
            "attn_flops_per_position": shape.attn_flops(), "prefill_attention": attention, "rows": rows}


def pick_strong(cfg: ProbeConfig, memory_bytes: int) -> str:
    """``cfg.strong``, or for ``auto`` the largest dense shape whose weights fill at most 55 % of memory."""
    if cfg.strong != "auto":
        return cfg.strong
    return next((n for n in STRONG_CANDIDATES if SHAPES[n].params() * cfg.elem <= 0.55 * memory_bytes), cfg.weak)


def device_info(cfg: ProbeConfig, meter: DramMeter) -> dict[str, Any]:
    import torch

    if cfg.device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        driver = meter.driver or f"unknown ({meter.reason})"
        return {"device": props.name, "memory_bytes": props.total_memory, "driver": driver, "cuda": torch.version.cuda}
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"device": f"cpu ({platform.machine()}, {os.cpu_count()} threads)", "memory_bytes": memory,
            "driver": "none (CPU run)", "cuda": None}


def run_probe(cfg: ProbeConfig, console: Console, api: Any = None, clock: Callable[[], float] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run every measurement; (the GPU profile entry, the measured block) of the profile file."""
    import torch

    started = time.perf_counter()
    deadline = started + cfg.time_budget_s if cfg.time_budget_s > 0 else math.inf
    sync = torch.cuda.synchronize if cfg.device == "cuda" else (lambda: None)
    torch.manual_seed(cfg.seed)
    gpu_name = cfg.gpu_profile or (pf.match_gpu(torch.cuda.get_device_name()) if cfg.device == "cuda" else None)
    shipped = pf.shipped_gpu(gpu_name)  # for the estimates, and the sampler's peak if NVML cannot say
    with torch.inference_mode():
        meter = DramMeter.open(cfg.device, cfg.nvml_index, api, clock, shipped.hbm_bytes_per_s if shipped else None)
        try:
            info = device_info(cfg, meter)
            copy = copy_check(cfg.device, cfg.copy_bytes, cfg.copies, cfg.min_phase_s, meter, sync)
            mm = matmul_rate(cfg.device, cfg.elem, cfg.matmul_n, sync)
            console.log(f"copy and matmul done on {info['device']}")
            strong = pick_strong(cfg, info["memory_bytes"])
            shapes = {n: probe_shape(SHAPES[n], cfg, meter, sync, console, deadline)
                      for n in dict.fromkeys((cfg.weak, strong))}
        finally:
            meter.close()
    settings = {k: getattr(cfg, k) for k in ("history", "block", "verdict", "context", "step_tokens", "tolerance",
                                             "min_phase_s", "elem", "time_budget_s")}
    measured = {"label": pf.LABEL, "device": info["device"], "driver": info["driver"],
                "date": dt.date.today().isoformat(), "torch": str(torch.__version__), "cuda": info["cuda"],
                "device_type": cfg.device, "cuda_graphs": cfg.graphs and cfg.device == "cuda",
                "settings": {**settings, "batches": list(cfg.batches)}, "dram_source": meter.reason or "nvml-gpm",
                "copy_check": copy, "matmul": mm, "weak": cfg.weak, "strong": strong, "shapes": shapes}
    measured["derived"] = pf.derive(measured, shipped)
    measured["wall_s"] = round(time.perf_counter() - started, 1)
    gpu = {"name": f"{pf.slug(info['device'])}-measured", "hbm_bytes_per_s": copy["copy_bytes_per_s"],
           "peak_flops": mm["flops_per_s"], "memory_bytes": info["memory_bytes"],
           "source": f"MEASURED by `specagent-ray bench roofline` on {info['device']} (driver {info['driver']}, "
                     f"torch {torch.__version__}) on {measured['date']}: hbm_bytes_per_s is a device-to-device "
                     f"copy's bytes read + written per second, peak_flops a {cfg.matmul_n}^3 matrix product's "
                     "FLOP/s; achieved rates, below the datasheet peaks."}
    return gpu, measured


# -- report and command ---------------------------------------------------------------------------------------
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


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The probe's flags (shared by ``specagent-ray bench roofline`` and ``python -m``)."""
    a = p.add_argument
    a("--device", choices=["auto", "cuda", "cpu"], default="auto", help="auto: cuda when PyTorch sees a GPU")
    a("--weak", help=f"the drafter's shape (GPU qwen3-4b, CPU tiny); one of {', '.join(SHAPES)}")
    a("--strong", help="the strong stand-in's shape, or auto: the largest dense shape that fits (GPU auto, CPU tiny-wide)")
    a("--batches", type=_ints, default=(1, 4, 16, 64, 256), help="batch sizes, comma-separated")
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


if __name__ == "__main__":
    raise SystemExit(main())
