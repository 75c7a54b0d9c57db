"""A scripted NVML for the meter where no GPU is: the seam is ``telemetry.nvml.NvmlApi``, nothing else is faked.

Each device follows a script of phases, ``[seconds since init, utilization %, DRAM bandwidth %]``, the last
phase holding from its start on; a device's counters read the phase that holds when they are read. A
profile names it as ``meter.nvml: specagent_ray.testing.fake_nvml:ScriptedNvml`` with ``meter.nvml_args``.
``fail`` names a pynvml error code constant (``NVML_ERROR_DRIVER_NOT_LOADED``) that ``init`` raises.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import pynvml


class ScriptedNvml:
    """``devices``: one script per device (default: two devices, busy 50 % and DRAM 30 % throughout)."""

    def __init__(self, devices: Sequence[Sequence[Sequence[float]]] | None = None, *,
                 peak_bandwidth: float = 3.35e12, memory_total: int = 80 * 2**30, fail: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.scripts = [sorted((float(t), float(u), float(d)) for t, u, d in phases)
                        for phases in (devices if devices is not None else [[[0, 50, 30]]] * 2)]
        self.peak, self.total, self.clock = peak_bandwidth, memory_total, clock
        self.fail = getattr(pynvml, fail) if fail else None
        self._t0: float | None = None
        self._ids = itertools.count()

    def _phase(self, handle: int) -> tuple[float, float, float]:
        t = self.clock() - (self._t0 or 0.0)
        now = [p for p in self.scripts[handle] if p[0] <= t]
        return now[-1] if now else (0.0, 0.0, 0.0)

    def init(self) -> None:
        if self.fail is not None:
            raise pynvml.NVMLError(self.fail)
        if self._t0 is None:
            self._t0 = self.clock()

    def shutdown(self) -> None:
        pass

    def device_count(self) -> int:
        return len(self.scripts)

    def handle_by_index(self, index: int) -> int:
        return index

    def utilization(self, handle: int) -> float:
        return self._phase(handle)[1]

    def memory(self, handle: int) -> tuple[int, int]:
        return self.total // 2, self.total

    def gpm_supported(self, handle: int) -> bool:
        return True

    def gpm_sample(self, handle: int) -> Any:
        return (handle, next(self._ids), self._phase(handle)[2])

    def gpm_free(self, sample: Any) -> None:
        pass

    def gpm_dram_bw_util(self, sample1: Any, sample2: Any) -> float:
        return sample2[2]

    def peak_bandwidth(self, handle: int) -> float | None:
        return self.peak
