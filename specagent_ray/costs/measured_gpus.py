"""MEASURED GPU profiles: the roofline probe's derived figures and the YAML file they are kept in.

A measured profile file (written by ``specagent-ray bench roofline``) has exactly two top-level keys:

- ``gpus``: one entry in the schema of ``data/gpus.yaml`` (:class:`~specagent_ray.costs.specs.GpuProfile`).
  Its rates are MEASURED achieved rates (a device-to-device copy's bytes read + written per second, a large
  matrix product's FLOP/s), so they sit below the datasheet peaks of the shipped profiles;
- ``measured``: where and how it was measured (``label: measured``, ``device``, ``driver``, ``date``,
  ``torch``), the raw table per model shape and batch size, and the figures derived from it.

Pure functions, no torch. Definitions, so that the measured figures mean what ``costs/theory.py`` means:

- the decode knee (Assumption 1): decode is bandwidth-bound while the time of one decode step of the whole
  batch stays flat as the batch grows; the knee is where it starts to rise;
- ``v/d``: one verdict (the verify prefill plus the verdict decode) over one strong step decoded in full
  (``step_tokens`` decode steps), in time or in DRAM bytes;
- ``kappa``: the weak model's decode step time over the strong model's at the same batch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from .specs import GpuProfile, gpu_names, load_gpu

#: The shipped data (``gpus.yaml``, ``models.yaml``): a CPU run must never write here.
SHIPPED_DIR = Path(__file__).resolve().parent / "data"
#: Where a GPU run writes its profile by default.
MEASURED_DIR = SHIPPED_DIR / "measured"
LABEL = "measured"


@dataclass(frozen=True, slots=True)
class Knee:
    """Where decode stops being bandwidth-bound, MEASURED from decode step times against batch size.

    ``bandwidth_bound_up_to``: the largest measured batch such that it and every smaller measured batch
    decode within ``tolerance`` x the batch-1 step time. ``first_above``: the smallest measured batch above
    that (None if none is). ``interpolated``: where the flat batch-1 line meets the compute-bound line
    through the largest measured batch, ``t1 * b_max / t(b_max)``; None unless ``t(b_max)`` is above the
    tolerance (then the knee lies beyond the measured range).
    """

    bandwidth_bound_up_to: int
    first_above: int | None
    interpolated: float | None


def find_knee(step_s: Mapping[int, float | None], tolerance: float = 1.2) -> Knee | None:
    """The decode knee from ``{batch: seconds per decode step}``; skipped batches (None) are ignored.

    None when batch 1 was not measured (no reference). Raises ValueError for a tolerance <= 1."""
    if tolerance <= 1:
        raise ValueError(f"tolerance must be > 1, got {tolerance}")
    points = sorted((b, t) for b, t in step_s.items() if t is not None and t > 0)
    if not points or points[0][0] != 1:
        return None
    t1, limit = points[0][1], points[0][1] * tolerance
    up_to, first_above = 1, None
    for b, t in points:
        if t > limit:
            first_above = b
            break
        up_to = b
    b_max, t_max = points[-1]
    interpolated = t1 * b_max / t_max if t_max > limit else None
    return Knee(up_to, first_above, interpolated)


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or None when either is unknown or ``den`` is not positive."""
    if num is None or den is None or den <= 0:
        return None
    return num / den


def v_over_d(prefill: float | None, verdict: float | None, verdict_tokens: int, step_tokens: int) -> float | None:
    """``v/d``: (verify prefill + verdict decode) over a strong step of ``step_tokens`` decode steps, each
    costing what one verdict decode step cost (same batch, same history). Works for seconds or bytes;
    None when a part is unknown or a count is not positive."""
    if prefill is None or verdict is None or verdict_tokens <= 0 or step_tokens <= 0:
        return None
    return ratio(prefill + verdict, step_tokens * verdict / verdict_tokens)


def estimated_knee(gpu: GpuProfile, bytes_per_param: float = 2.0) -> float:
    """ESTIMATED decode knee in sequences: the balance point ``peak_flops * bytes_per_param / (2 * bw)``
    (2 FLOPs per weight per sequence against the weight's bytes). For bf16 on H20: 148e12 / 4e12 = 37."""
    return gpu.peak_flops * bytes_per_param / (2 * gpu.hbm_bytes_per_s)


def roofline_s(flops: float, bytes_: float, gpu: GpuProfile) -> float:
    """ESTIMATED time of one pass on one GPU: ``max(flops / peak_flops, bytes / hbm_bytes_per_s)``."""
    return max(flops / gpu.peak_flops, bytes_ / gpu.hbm_bytes_per_s)


def slug(name: str) -> str:
    """A file-name-safe lower-case form of a device name: ``NVIDIA H200`` -> ``nvidia-h200``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def match_gpu(device_name: str) -> str | None:
    """The shipped GPU profile whose name is a word of ``device_name`` (``NVIDIA H20`` -> ``h20``), or None."""
    words = set(slug(device_name).split("-"))
    return next((n for n in gpu_names() if n in words), None)


def shipped_gpu(name: str | None) -> GpuProfile | None:
    """The shipped profile ``name`` (ValueError listing the known ones if unknown), or None for None."""
    return None if name is None else load_gpu(name)


def default_out(device_type: str, device_name: str) -> Path:
    """Where a run writes by default: a GPU run into ``costs/data/measured/<device>.yaml``, a CPU run into
    ``results/roofline-cpu.yaml`` (never into the shipped data)."""
    if device_type == "cpu":
        return Path("results") / "roofline-cpu.yaml"
    return MEASURED_DIR / f"{slug(device_name)}.yaml"


def check_out(path: Path, device_type: str) -> None:
    """ValueError if a CPU run would write under ``costs/data`` (the shipped, GPU-only data)."""
    if device_type == "cpu" and path.resolve().is_relative_to(SHIPPED_DIR):
        raise ValueError(f"a CPU run never writes into {SHIPPED_DIR} (got {path}); pass --out elsewhere")


def write_profile(path: Path, gpu: Mapping[str, Any], measured: Mapping[str, Any]) -> GpuProfile:
    """Validate ``gpu`` as a GpuProfile, then write ``{gpus: [gpu], measured: ...}`` to ``path`` (folders
    made). Raises ValueError when ``measured`` is not labelled measured or lacks device, driver or date."""
    missing = [k for k in ("device", "driver", "date", "torch") if not measured.get(k)]
    if measured.get("label") != LABEL or missing:
        raise ValueError(f"a measured profile needs label: {LABEL} and {', '.join(missing) or 'its fields'}")
    profile = GpuProfile.model_validate(dict(gpu))
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"gpus": [profile.model_dump(exclude_defaults=True)], "measured": dict(measured)}
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=110), encoding="utf-8")
    return profile


def read_profile(path: Path) -> tuple[GpuProfile, dict[str, Any]]:
    """A measured profile file as (profile, measured block). ValueError unless it has exactly the keys
    ``gpus`` (one valid entry) and ``measured`` (``label: measured``)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or set(doc) != {"gpus", "measured"}:
        raise ValueError(f"{path}: expected the keys 'gpus' and 'measured'")
    entries, measured = doc["gpus"], doc["measured"]
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(measured, dict):
        raise ValueError(f"{path}: expected one GPU entry and a 'measured' mapping")
    if measured.get("label") != LABEL:
        raise ValueError(f"{path}: the 'measured' block is not labelled {LABEL!r}")
    return GpuProfile.model_validate(entries[0]), measured


def estimate_batch(shape: Mapping[str, Any], batch: int, settings: Mapping[str, Any], gpu: GpuProfile
                   ) -> dict[str, float | None]:
    """ESTIMATED phase times of one batch on ``gpu`` by roofline, with the accounting of ``costs/model.py``:
    weights read once per pass, KV read by decode only, 2 FLOPs per weight per token plus attention."""
    p, kv, af = shape["params"], shape["kv_bytes_per_token"], shape["attn_flops_per_position"]
    weights = p * settings["elem"]
    t, v, c = settings["history"] + settings["block"], settings["verdict"], settings["context"]
    decode = roofline_s(batch * (2 * p + af * c), weights + batch * c * kv, gpu)
    prefill = roofline_s(batch * (2 * p * t + af * t * (t + 1) / 2), weights, gpu)
    ctx = t + v / 2  # the mean context of the verdict's decode steps
    verdict = v * roofline_s(batch * (2 * p + af * ctx), weights + batch * ctx * kv, gpu)
    return {"est_decode_step_s": decode, "est_verify_prefill_s": prefill, "est_verdict_decode_s": verdict,
            "est_v_over_d": v_over_d(prefill, verdict, v, settings["step_tokens"])}


def derive(measured: Mapping[str, Any], gpu: GpuProfile | None) -> dict[str, Any]:
    """The figures derived from a measured table: per shape the knee and, per batch, v/d in time and in DRAM
    bytes (MEASURED) and the verify prefill in decode steps; kappa per batch; each next to its ESTIMATED
    counterpart on ``gpu`` (None without a profile). Keys of per-batch mappings are batch sizes."""
    s = measured["settings"]
    out: dict[str, Any] = {"gpu_profile": gpu.name if gpu else None, "shapes": {}, "kappa": {}}
    est: dict[tuple[str, int], dict[str, float | None]] = {}
    for name, shape in measured["shapes"].items():
        rows = {}
        for r in shape["rows"]:
            b = r["batch"]
            est[name, b] = estimate_batch(shape, b, s, gpu) if gpu else {}
            rows[b] = {"v_over_d_time": v_over_d(r["verify_prefill_s"], r["verdict_decode_s"], s["verdict"],
                                                 s["step_tokens"]),
                       "v_over_d_bytes": v_over_d(r["verify_prefill_dram_bytes"], r["verdict_dram_bytes"],
                                                  s["verdict"], s["step_tokens"]),
                       "prefill_in_decode_steps": ratio(r["verify_prefill_s"], r["decode_step_s"]),
                       **est[name, b]}
        knee = find_knee({r["batch"]: r["decode_step_s"] for r in shape["rows"]}, s["tolerance"])
        out["shapes"][name] = {"knee": None if knee is None else asdict(knee),
                               "rows": rows}
    weak, strong = measured["weak"], measured["strong"]
    for rw, rs in zip(measured["shapes"][weak]["rows"], measured["shapes"][strong]["rows"], strict=True):
        b = rw["batch"]
        out["kappa"][b] = {"measured": ratio(rw["decode_step_s"], rs["decode_step_s"]),
                           "estimated": ratio(est[weak, b].get("est_decode_step_s"),
                                              est[strong, b].get("est_decode_step_s"))}
    out["estimated_knee"] = estimated_knee(gpu, s["elem"]) if gpu else None
    flops, bw = measured["matmul"]["flops_per_s"], measured["copy_check"]["copy_bytes_per_s"]
    out["microbench_knee"] = ratio(flops * s["elem"], 2 * bw)  # the balance point of the measured rates
    return out
