"""Where a vLLM worker's GPU is: its Ray node and the device's NVML index (``metered_llm.py`` reports it).

Kept apart from ``metered_llm`` so that reading it does not import Ray Serve LLM (and vLLM).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable


class GpuPlacement:
    """A vLLM worker extension (``worker_extension_cls``): the worker's own GPU."""

    def gpu_placement(self) -> tuple[str, int] | None:
        return gpu_placement()


def gpu_placement(visible: str | None = None, local: int | None = None) -> tuple[str, int] | None:
    """(Ray node id, NVML index) of this process's CUDA device; None without one, or where
    ``CUDA_VISIBLE_DEVICES`` names devices by UUID (not resolved: that worker is left unmetered)."""
    import ray

    if local is None:
        import torch

        if not torch.cuda.is_available():
            return None
        local = torch.cuda.current_device()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    ids = [v.strip() for v in visible.split(",")] if visible else []
    physical = ids[local] if local < len(ids) else str(local) if not ids else None
    if physical is None or not physical.isdigit():
        return None
    return ray.get_runtime_context().get_node_id(), int(physical)


def by_node(placements: Iterable[tuple[str, int] | None]) -> dict[str, list[int]]:
    """The workers' placements as the meter takes them: each node's device indices, sorted."""
    out: dict[str, set[int]] = defaultdict(set)
    for p in placements:
        if p is not None:
            out[p[0]].add(p[1])
    return {node: sorted(devices) for node, devices in out.items()}
