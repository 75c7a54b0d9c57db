"""NVML sampler: MEASURED GPU busy time and DRAM traffic, integrated per device and per window.

One sampler runs per GPU node (inside a Ray actor) or per engine replica (a background thread), over the
devices it is given. Each :meth:`NvmlSampler.sample_once` closes one window ending now:

- GPU-seconds = ``utilization_gpu% / 100 * dt`` per device (NVML's "a kernel was running" time fraction,
  read at the window's end: a right-endpoint rule);
- DRAM bytes = ``GPM DRAM_BW_UTIL% / 100 * peak_bandwidth * dt`` per device, on GPUs with GPM (Hopper and
  newer). GPM's DRAM utilization counts reads and writes. Peak bandwidth comes from the device (memory bus
  width x max memory clock x 2, double data rate) or, failing that, from a configured GPU profile.

All NVML access goes through the narrow :class:`NvmlApi` seam (``nvml_api.py``); :class:`PynvmlApi` is the real
one over the ``pynvml`` module (nvidia-ml-py), and tests inject a table that raises pynvml's real error classes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pynvml

from .attribution import Window
from .nvml_api import LOST_CODES, UNAVAILABLE_CODES, UNSUPPORTED_CODES, NvmlApi, PynvmlApi, error_code

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """A snapshot of one sampled device since the sampler opened. ``dram_bytes`` is None unless DRAM traffic
    was measured in every window (no GPM, or a GPM read was missed). A transiently failed utilization read
    leaves the device out of that one window (warned once per error code)."""

    index: int
    lost: bool
    gpu_seconds: float
    dram_bytes: float | None
    peak_bandwidth: float | None
    memory_used_bytes: int
    memory_total_bytes: int
    memory_peak_bytes: int


@dataclass
class _Device:
    index: int
    handle: Any
    peak_bw: float | None
    gpm: bool
    prev_gpm: Any = None
    lost: bool = False
    gpu_seconds: float = 0.0
    dram_bytes: float | None = 0.0
    memory_used: int = 0
    memory_total: int = 0
    memory_peak: int = 0


class _Unavailable(Exception):
    """NVML itself went away mid-run (internal signal)."""


State = Literal["unopened", "available", "unavailable", "stopped"]


class NvmlSampler:
    """Samples NVML every ``period_s`` and integrates GPU-seconds and DRAM bytes per device and per window.

    Guarantees:
    - NVML errors never escape ``open``/``sample_once``/``start``/``stop``. Without a driver, library or GPU
      the sampler is ``unavailable`` with a ``reason``, logged once as a warning, and yields no windows (so
      nothing downstream can mistake 0 for a measurement).
    - A device whose GPM is NOT_SUPPORTED still yields GPU-seconds; its DRAM bytes are None, and so is the
      ``dram_bytes`` of every window it is part of.
    - A device lost mid-run (GPU_IS_LOST) stops contributing, logged once; the others keep being sampled.
      When every device is lost the sampler becomes unavailable.
    - Windows are contiguous: each starts where the previous one ended. The first call only primes.
    """

    def __init__(
        self,
        api: NvmlApi | None = None,
        period_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        devices: Sequence[int] | None = None,
        fallback_peak_bandwidth: float | None = None,
        max_windows: int = 3600,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        self.api: NvmlApi = api if api is not None else PynvmlApi()
        self.period_s = period_s
        self._clock = clock
        self._wanted = None if devices is None else list(devices)
        self._fallback_bw = fallback_peak_bandwidth
        self._windows: deque[Window] = deque(maxlen=max_windows)
        self._devices: list[_Device] = []
        self._last_t: float | None = None
        self._state: State = "unopened"
        self._initialized = False  # nvmlInit succeeded: stop() owes an nvmlShutdown
        self.reason: str | None = None
        self._warned: set[str] = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- state -------------------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._state

    @property
    def available(self) -> bool:
        return self._state == "available"

    def _warn_once(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg)

    def _mark_unavailable(self, reason: str) -> None:
        self._state, self.reason = "unavailable", reason
        self._warn_once("unavailable", f"NVML unavailable ({reason}): GPU-s and HBM bytes will be ESTIMATED")

    # -- open --------------------------------------------------------------------------------------------
    def open(self) -> bool:
        """Initialise NVML and the devices once; True if the sampler is available."""
        with self._lock:
            if self._state == "unopened":
                try:
                    self._open()
                except pynvml.NVMLError as err:
                    self._mark_unavailable(f"{type(err).__name__}: {err}")
            return self.available

    def _open(self) -> None:
        self.api.init()
        self._initialized = True
        count = self.api.device_count()
        indices = list(range(count)) if self._wanted is None else self._wanted
        missing = [i for i in indices if not 0 <= i < count]
        if count == 0 or not indices or missing:
            self._mark_unavailable(f"GPUs {missing} requested but NVML sees {count}" if missing
                                   else "no GPU visible to NVML")
            return
        for i in indices:
            try:
                self._devices.append(self._open_device(i))
            except pynvml.NVMLError as err:
                if error_code(err) not in LOST_CODES:
                    raise
                self._warn_once(f"lost{i}", f"GPU {i} lost at start ({err}); it does not contribute")
                self._devices.append(_Device(i, None, None, False, lost=True, dram_bytes=None))
        if all(d.lost for d in self._devices):
            self._mark_unavailable("every sampled GPU was lost")
        else:
            self._state = "available"

    def _open_device(self, index: int) -> _Device:
        handle = self.api.handle_by_index(index)
        peak = self.api.peak_bandwidth(handle) or self._fallback_bw
        try:
            gpm = self.api.gpm_supported(handle)
        except pynvml.NVMLError as err:
            if error_code(err) not in UNSUPPORTED_CODES:
                raise
            gpm = False
        if gpm and peak is None:
            self._warn_once(f"peak{index}", f"GPU {index}: no peak bandwidth known; DRAM bytes unmeasured")
        if not gpm:
            log.info("GPU %d: GPM not supported; DRAM bytes unmeasured, GPU-s measured", index)
        gpm = gpm and peak is not None
        return _Device(index, handle, peak, gpm, dram_bytes=0.0 if gpm else None)

    # -- one step ----------------------------------------------------------------------------------------
    def sample_once(self) -> Window | None:
        """Read every live device and close the window since the previous call (None on the first call,
        or while unavailable). Pure with respect to time: ``dt`` comes from the injected clock."""
        with self._lock:
            if not self.open():
                return None
            t = self._clock()
            prev_t, self._last_t = self._last_t, t
            try:
                readings = [(d, self._read(d)) for d in self._devices if not d.lost]
            except _Unavailable as err:
                self._mark_unavailable(str(err))
                return None
            if all(d.lost for d in self._devices):
                self._mark_unavailable("every sampled GPU was lost")
                return None
            if prev_t is None:
                return None
            return self._integrate(prev_t, t, readings)

    def _read(self, d: _Device) -> tuple[float | None, float | None]:
        """(utilization %, DRAM bandwidth %) of one device; None where not read this time."""
        try:
            util = self.api.utilization(d.handle)
            d.memory_used, d.memory_total = self.api.memory(d.handle)
            d.memory_peak = max(d.memory_peak, d.memory_used)
        except pynvml.NVMLError as err:
            self._drop_gpm(d)  # a GPM interval spanning the gap would not match the next window's dt
            self._device_error(d, err, "utilization")
            return None, None
        return util, self._read_gpm(d) if d.gpm else None

    def _read_gpm(self, d: _Device) -> float | None:
        try:
            sample = self.api.gpm_sample(d.handle)
        except pynvml.NVMLError as err:
            self._drop_gpm(d)
            self._device_error(d, err, "GPM")
            return None
        prev, d.prev_gpm = d.prev_gpm, sample
        if prev is None:
            return None
        try:
            return self.api.gpm_dram_bw_util(prev, sample)
        except pynvml.NVMLError as err:
            self._device_error(d, err, "GPM")
            return None
        finally:
            self._free(prev)

    def _device_error(self, d: _Device, err: pynvml.NVMLError, what: str) -> None:
        code = error_code(err)
        if code in UNAVAILABLE_CODES:
            raise _Unavailable(f"{type(err).__name__} while reading GPU {d.index}")
        if code in LOST_CODES:
            d.lost = True
            self._drop_gpm(d)
            self._warn_once(f"lost{d.index}", f"GPU {d.index} lost ({err}); it no longer contributes")
        elif what == "GPM" and code in UNSUPPORTED_CODES:
            d.gpm, d.dram_bytes = False, None
            self._drop_gpm(d)
            self._warn_once(f"gpm{d.index}", f"GPU {d.index}: GPM not supported; DRAM bytes unmeasured")
        else:  # transient: this device is missing from this window only
            self._warn_once(f"err{d.index}:{code}", f"GPU {d.index}: {what} read failed ({err}); skipped")

    def _integrate(self, start: float, end: float, readings: list[tuple[_Device, tuple[float | None, float | None]]]
                   ) -> Window:
        dt = max(end - start, 0.0)
        gpu_total, dram_total = 0.0, 0.0
        dram_known = True
        for d, (util, bw_util) in readings:
            if d.lost:
                continue
            if util is None:  # a transient miss: no partial DRAM sum passed off as the window's total
                dram_known, d.dram_bytes = False, None
                continue
            gpu = util / 100 * dt
            d.gpu_seconds += gpu
            gpu_total += gpu
            if bw_util is None or d.peak_bw is None:
                dram_known, d.dram_bytes = False, None
                continue
            dram = bw_util / 100 * d.peak_bw * dt
            d.dram_bytes = None if d.dram_bytes is None else d.dram_bytes + dram
            dram_total += dram
        window = Window(start, end, gpu_total, dram_total if dram_known else None)
        self._windows.append(window)
        return window

    # -- results -----------------------------------------------------------------------------------------
    def windows(self) -> list[Window]:
        """The windows kept so far (at most ``max_windows``, oldest dropped first)."""
        with self._lock:
            return list(self._windows)

    def drain(self) -> list[Window]:
        """The windows kept so far, removing them (for a consumer that attributes them)."""
        with self._lock:
            out = list(self._windows)
            self._windows.clear()
            return out

    def devices(self) -> list[DeviceStatus]:
        with self._lock:
            return [DeviceStatus(d.index, d.lost, d.gpu_seconds, d.dram_bytes, d.peak_bw, d.memory_used,
                                 d.memory_total, d.memory_peak) for d in self._devices]

    # -- thread ------------------------------------------------------------------------------------------
    def start(self) -> bool:
        """Sample every ``period_s`` on a daemon thread; False (and no thread) if NVML is unavailable."""
        if not self.open():
            return False
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:
                log.exception("NVML sampler step failed")
            if self._stop.wait(self.period_s):
                break

    def stop(self) -> None:
        """Stop the thread, free GPM samples and shut NVML down. Idempotent and final: windows and device
        totals stay readable, no new windows are made."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.period_s))
            self._thread = None
        with self._lock:
            for d in self._devices:
                self._drop_gpm(d)
            if self._initialized:
                self._initialized = False
                try:
                    self.api.shutdown()
                except pynvml.NVMLError as err:
                    log.debug("nvmlShutdown failed: %s", err)
            if self._state == "available":
                self._state = "stopped"

    def _drop_gpm(self, d: _Device) -> None:
        prev, d.prev_gpm = d.prev_gpm, None
        if prev is not None:
            self._free(prev)

    def _free(self, sample: Any) -> None:
        try:
            self.api.gpm_free(sample)
        except pynvml.NVMLError as err:
            log.debug("nvmlGpmSampleFree failed: %s", err)
