"""The meter on one GPU node: an NVML sampler per engine role that has devices on the node.

The fleet (``fleet.py``) runs one ``NodeMeter`` as a Ray actor pinned to each node where an engine replica
says it holds devices, and drains its windows every second. Device-wide counters only (SM busy, GPM DRAM
bandwidth, memory used), read every ``period_s``, on the wall clock, so that windows line up with the
engine calls that the coordinator shards time on theirs.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .nvml import NvmlSampler
from .nvml_api import NvmlApi, PynvmlApi

log = logging.getLogger(__name__)


def nvml_api(spec: str = "pynvml", args: Mapping[str, Any] | None = None) -> NvmlApi:
    """The NVML to read: ``pynvml`` (the real one), or ``module:factory`` called with ``args`` (a scripted
    NVML where no GPU is, ``specagent_ray.testing.fake_nvml:ScriptedNvml``)."""
    if spec == "pynvml":
        return PynvmlApi()
    module, sep, name = spec.partition(":")
    if not sep:
        raise ValueError(f"meter.nvml must be 'pynvml' or 'module:factory', got {spec!r}")
    return getattr(importlib.import_module(module), name)(**dict(args or {}))


class NodeMeter:
    """Samplers by role on this node. Guarantees: a role's sampler reads exactly the devices the role was
    assigned; an NVML failure never raises out of a method, it turns into the role's ``reason``."""

    def __init__(self, nvml: str = "pynvml", nvml_args: Mapping[str, Any] | None = None, period_s: float = 0.1,
                 clock: Callable[[], float] = time.time, autostart: bool = True):
        self.nvml, self.nvml_args, self.period_s, self.clock = nvml, dict(nvml_args or {}), period_s, clock
        self.autostart = autostart
        self.samplers: dict[str, tuple[tuple[int, ...], NvmlSampler]] = {}
        self.started_at = clock()

    def assign(self, role: str, devices: Sequence[int]) -> None:
        """Sample ``devices`` for ``role`` from now on (a new set replaces the role's sampler)."""
        devices = tuple(sorted(set(devices)))
        if role in self.samplers and self.samplers[role][0] == devices:
            return
        self.release(role)
        try:
            api = nvml_api(self.nvml, self.nvml_args)
        except Exception as exc:  # noqa: BLE001 - a bad NVML module is this role's reason, not a crash
            log.warning("meter.nvml %r could not be loaded (%s: %s): %s is ESTIMATED on this node",
                        self.nvml, type(exc).__name__, exc, role)
            api = _Broken()
        sampler = NvmlSampler(api, self.period_s, self.clock, devices=devices or None)
        self.samplers[role] = (devices, sampler)
        if self.autostart:
            sampler.start()
        else:
            sampler.open()

    def release(self, role: str) -> None:
        if (old := self.samplers.pop(role, None)) is not None:
            old[1].stop()

    def drain(self) -> dict[str, dict[str, Any]]:
        """Per role: the windows closed since the last drain (start, end, GPU-s, DRAM bytes) and the reason
        the role is not measured here (None while it is)."""
        out = {}
        for role, (devices, sampler) in self.samplers.items():
            reason = None if sampler.available else (sampler.reason or sampler.state)
            out[role] = {"devices": list(devices), "reason": reason,
                         "windows": [(w.start, w.end, w.gpu_seconds, w.dram_bytes) for w in sampler.drain()]}
        return out

    def sample_once(self) -> None:
        """One reading of every sampler (for a meter that does not run threads: tests and the bench)."""
        for _, sampler in self.samplers.values():
            sampler.sample_once()

    def status(self) -> dict[str, Any]:
        """Per role, since its sampler started: busy GPU-seconds and memory used now and at its peak."""
        return {role: {"devices": list(d), "state": s.state, "reason": s.reason,
                       "busy_gpu_seconds": sum(x.gpu_seconds for x in s.devices()),
                       "memory_used_bytes": sum(x.memory_used_bytes for x in s.devices()),
                       "memory_peak_bytes": sum(x.memory_peak_bytes for x in s.devices())}
                for role, (d, s) in self.samplers.items()}

    def stop(self) -> None:
        for role in list(self.samplers):
            self.release(role)


class _Broken:
    """An NVML that cannot be loaded: ``init`` fails as a missing library does, so the sampler says so."""

    def init(self) -> None:
        import pynvml

        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)
