"""Roofline probe: MEASURED decode, verify-prefill and verdict costs of random-weight decoders on this device.

For two named dense shapes (the drafter's, qwen3-4b, and a strong stand-in: the largest that fits) built
by ``device.py``, and per batch size, it measures:

- ``decode_step_s``: one decode step of the whole batch at a short context (``--context`` positions);
- ``verify_prefill_s``: one prefill of a history plus a drafted block (``--history`` + ``--block`` tokens);
- ``verdict_decode_s``: the ``--verdict``-token decode that follows it;

each with the DRAM bytes the project's NVML sampler (GPM DRAM bandwidth) saw over it. From the table come
the decode knee (Assumption 1), v/d and kappa (``costs/measured_gpus.py`` defines them), printed next to the
ESTIMATED figures of the shipped GPU profile. A device-to-device copy of known size checks the sampler.
The result is a GPU profile YAML marked measured (``costs/measured_gpus.py`` reads and writes it).

Guarantees: a phase that does not fit in memory, or would start after ``--time-budget-s``, is recorded as
skipped with the reason (never dropped), so the profile is always written; a DRAM figure
is None with a reason wherever the sampler cannot measure it (CPU, no NVML, no GPM); a CPU run never
writes into ``costs/data``. Entry points (``command.py``: flags and the report): ``specagent-ray bench roofline``
and ``python -m specagent_ray.bench.roofline`` (PyTorch, no vLLM, no Ray).
"""

from __future__ import annotations

import datetime as dt
import gc
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from rich.console import Console

from ...costs import measured_gpus as pf
from .device import (
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
