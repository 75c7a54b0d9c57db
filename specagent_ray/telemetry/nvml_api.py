"""The NVML seam: the calls the sampler makes (:class:`NvmlApi`), the real ones over ``pynvml``
(:class:`PynvmlApi`, nvidia-ml-py), and how the sampler classes NVML's error codes.

Tests inject a table that raises pynvml's real error classes in place of :class:`PynvmlApi`
(``testing/fake_nvml.py``, ``tests/unit/test_nvml.py``); nothing else about NVML is faked.
"""

from __future__ import annotations

from typing import Any, Protocol

import pynvml

#: NVML has no usable driver or library (or lost it): the whole sampler becomes unavailable.
UNAVAILABLE_CODES = frozenset({
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_UNINITIALIZED,
})
#: The device is gone (fell off the bus, Xid 79, ...): it stops contributing for the rest of the run.
LOST_CODES = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_GPU_NOT_FOUND})
#: The feature does not exist here (pre-Hopper GPU, old driver): that measurement is None from now on.
UNSUPPORTED_CODES = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})


def error_code(err: pynvml.NVMLError) -> int:
    """The NVML return code carried by a pynvml error."""
    return int(getattr(err, "value", pynvml.NVML_ERROR_UNKNOWN))


class NvmlApi(Protocol):
    """The NVML calls the sampler needs. Every method may raise ``pynvml.NVMLError``."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def device_count(self) -> int: ...
    def handle_by_index(self, index: int) -> Any: ...
    def utilization(self, handle: Any) -> float:
        """GPU busy percent (0..100) over the driver's last sample period."""
        ...
    def memory(self, handle: Any) -> tuple[int, int]:
        """(used, total) device memory in bytes."""
        ...
    def gpm_supported(self, handle: Any) -> bool: ...
    def gpm_sample(self, handle: Any) -> Any: ...
    def gpm_free(self, sample: Any) -> None: ...
    def gpm_dram_bw_util(self, sample1: Any, sample2: Any) -> float:
        """DRAM bandwidth utilization in percent (0..100) between two GPM samples of one device."""
        ...
    def peak_bandwidth(self, handle: Any) -> float | None:
        """Peak DRAM bandwidth in bytes/s, or None if the device cannot say."""
        ...


class PynvmlApi:
    """:class:`NvmlApi` over the real ``pynvml`` module. Raises pynvml's errors unchanged; on a machine
    without a driver, :meth:`init` raises ``NVMLError_LibraryNotFound`` (or ``DriverNotLoaded``)."""

    def init(self) -> None:
        pynvml.nvmlInit()

    def shutdown(self) -> None:
        pynvml.nvmlShutdown()

    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    def handle_by_index(self, index: int) -> Any:
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def utilization(self, handle: Any) -> float:
        return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    def memory(self, handle: Any) -> tuple[int, int]:
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.used), int(info.total)

    def gpm_supported(self, handle: Any) -> bool:
        return bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)

    def gpm_sample(self, handle: Any) -> Any:
        sample = pynvml.nvmlGpmSampleAlloc()
        try:
            return pynvml.nvmlGpmSampleGet(handle, sample)
        except pynvml.NVMLError:
            pynvml.nvmlGpmSampleFree(sample)
            raise

    def gpm_free(self, sample: Any) -> None:
        pynvml.nvmlGpmSampleFree(sample)

    def gpm_dram_bw_util(self, sample1: Any, sample2: Any) -> float:
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1, request.sample2 = sample1, sample2
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
        pynvml.nvmlGpmMetricsGet(request)
        metric = request.metrics[0]
        if metric.nvmlReturn != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(metric.nvmlReturn)
        return float(metric.value)

    def peak_bandwidth(self, handle: Any) -> float | None:
        try:
            bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
            mem_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        except pynvml.NVMLError as err:
            if error_code(err) in UNSUPPORTED_CODES:
                return None
            raise
        if bus_bits <= 0 or mem_mhz <= 0:
            return None
        return bus_bits / 8 * mem_mhz * 1e6 * 2
