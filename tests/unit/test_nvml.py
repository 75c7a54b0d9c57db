"""NVML sampler, driven through an injected NVML table that raises pynvml's real error classes.

Readings are scripted per sample and time comes from a fake clock, so every figure is checked by hand.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pynvml
import pytest

from specagent_ray.telemetry.nvml import NvmlSampler
from specagent_ray.telemetry.nvml_api import PynvmlApi

LOST = pynvml.NVML_ERROR_GPU_IS_LOST
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # maps to the real subclass, e.g. NVMLError_GpuIsLost


class FakeNvml:
    """An NVML table. ``util[d]`` / ``dram[d]`` are consumed one per read; an NVMLError in them is raised.
    ``dram[d][k]`` is DRAM_BW_UTIL % between GPM samples k-1 and k of device d."""

    def __init__(self, util: list[list[Any]], dram: list[list[Any]] | None = None, *, peak: float | None = 2e12,
                 init_error: int | None = None, gpm_supported: Any = True, gpm_sample_error: int | None = None,
                 memory: tuple[int, int] = (10, 100)) -> None:
        self.util, self.dram, self.peak = [list(u) for u in util], dram, peak
        self.init_error, self.gpm_support, self.gpm_sample_error = init_error, gpm_supported, gpm_sample_error
        self.mem = memory
        self.seq = [0] * len(util)
        self.live: set[tuple[int, int]] = set()
        self.shut = False

    @staticmethod
    def _next(queue: list[Any]) -> Any:
        value = queue.pop(0)
        if isinstance(value, pynvml.NVMLError):
            raise value
        return value

    def init(self) -> None:
        if self.init_error is not None:
            raise err(self.init_error)

    def shutdown(self) -> None:
        self.shut = True

    def device_count(self) -> int:
        return len(self.util)

    def handle_by_index(self, index: int) -> int:
        return index

    def utilization(self, handle: int) -> float:
        return self._next(self.util[handle])

    def memory(self, handle: int) -> tuple[int, int]:
        return self.mem

    def gpm_supported(self, handle: int) -> bool:
        if isinstance(self.gpm_support, int) and not isinstance(self.gpm_support, bool):
            raise err(self.gpm_support)
        return bool(self.gpm_support)

    def gpm_sample(self, handle: int) -> tuple[int, int]:
        if self.gpm_sample_error is not None:
            raise err(self.gpm_sample_error)
        sample = (handle, self.seq[handle])
        self.seq[handle] += 1
        self.live.add(sample)
        return sample

    def gpm_free(self, sample: tuple[int, int]) -> None:
        self.live.remove(sample)

    def gpm_dram_bw_util(self, s1: tuple[int, int], s2: tuple[int, int]) -> float:
        assert s1[0] == s2[0] and s2[1] == s1[1] + 1
        assert self.dram is not None
        return self._next(self.dram[s2[0]])

    def peak_bandwidth(self, handle: int) -> float | None:
        return self.peak


class Clock:
    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def run(sampler: NvmlSampler, n: int) -> list[Any]:
    return [sampler.sample_once() for _ in range(n)]


def test_normal_readings_integrate_by_hand() -> None:
    # Two GPUs, peak 2e12 B/s. The first sample primes; windows are [0, 0.5) and [0.5, 1.5).
    api = FakeNvml(util=[[0, 40, 80], [0, 100, 0]], dram=[[50, 25], [10, 20]])
    s = NvmlSampler(api, period_s=0.5, clock=Clock(0.0, 0.5, 1.5))
    first, w1, w2 = run(s, 3)
    assert first is None and s.available
    # w1: gpu 0.4*0.5 + 1.0*0.5; dram (0.5 + 0.1) * 2e12 * 0.5
    assert (w1.start, w1.end) == (0.0, 0.5)
    assert w1.gpu_seconds == pytest.approx(0.7) and w1.dram_bytes == pytest.approx(0.6e12)
    # w2: gpu 0.8*1.0 + 0; dram (0.25 + 0.2) * 2e12 * 1.0
    assert (w2.start, w2.end) == (0.5, 1.5)
    assert w2.gpu_seconds == pytest.approx(0.8) and w2.dram_bytes == pytest.approx(0.9e12)
    d0, d1 = s.devices()
    assert (d0.gpu_seconds, d0.dram_bytes) == pytest.approx((1.0, 1.0e12))
    assert (d1.gpu_seconds, d1.dram_bytes) == pytest.approx((0.5, 0.5e12))
    assert (d0.memory_used_bytes, d0.memory_total_bytes, d0.peak_bandwidth) == (10, 100, 2e12)
    assert s.drain() == [w1, w2] and s.windows() == []
    s.stop()
    assert api.shut and not api.live  # NVML shut down, every GPM sample freed
    assert s.state == "stopped" and s.sample_once() is None


@pytest.mark.parametrize("where", ["query", "sample"])
def test_gpm_not_supported_measures_gpu_seconds_only(where: str, caplog: pytest.LogCaptureFixture) -> None:
    api = FakeNvml(util=[[0, 50, 50]], gpm_supported=NOT_SUPPORTED if where == "query" else True,
                   gpm_sample_error=NOT_SUPPORTED if where == "sample" else None)
    s = NvmlSampler(api, clock=Clock(0.0, 1.0, 3.0))
    _, w1, w2 = run(s, 3)
    assert s.available
    assert (w1.gpu_seconds, w2.gpu_seconds) == pytest.approx((0.5, 1.0))
    assert w1.dram_bytes is None and w2.dram_bytes is None  # unmeasured, never 0
    assert s.devices()[0].dram_bytes is None


def test_no_peak_bandwidth_leaves_dram_unmeasured() -> None:
    api = FakeNvml(util=[[0, 50]], dram=[[40]], peak=None)
    s = NvmlSampler(api, clock=Clock(0.0, 1.0))
    assert run(s, 2)[1].dram_bytes is None


def test_profile_bandwidth_is_the_fallback() -> None:
    api = FakeNvml(util=[[0, 50]], dram=[[40]], peak=None)
    s = NvmlSampler(api, clock=Clock(0.0, 2.0), fallback_peak_bandwidth=4.8e12)
    assert run(s, 2)[1].dram_bytes == pytest.approx(0.4 * 4.8e12 * 2.0)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_driver_missing_is_unavailable_and_warned_once(code: int, caplog: pytest.LogCaptureFixture) -> None:
    s = NvmlSampler(FakeNvml(util=[[]], init_error=code), clock=Clock())
    with caplog.at_level(logging.WARNING, logger="specagent_ray.telemetry.nvml"):
        assert run(s, 3) == [None, None, None]
        assert s.start() is False
        s.stop()
    assert s.state == "unavailable" and type(err(code)).__name__ in (s.reason or "")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ESTIMATED" in warnings[0].getMessage()
    assert s.windows() == []


def test_no_gpu_is_unavailable() -> None:
    api = FakeNvml(util=[])
    s = NvmlSampler(api, clock=Clock())
    assert not s.open() and s.reason == "no GPU visible to NVML"
    s.stop()
    assert api.shut and s.state == "unavailable"  # nvmlInit succeeded, so it is shut down


def test_requested_device_out_of_range_is_unavailable() -> None:
    s = NvmlSampler(FakeNvml(util=[[]]), clock=Clock(), devices=[0, 3])
    assert not s.open() and "[3]" in (s.reason or "")


def test_gpu_lost_mid_run_stops_contributing(caplog: pytest.LogCaptureFixture) -> None:
    # GPU 1 is lost at the third read; it is never read again (its script would run dry).
    api = FakeNvml(util=[[0, 10, 20, 30], [0, 50, err(LOST)]], dram=[[10, 10, 10], [20]])
    s = NvmlSampler(api, clock=Clock(0.0, 1.0, 2.0, 3.0))
    with caplog.at_level(logging.WARNING, logger="specagent_ray.telemetry.nvml"):
        _, w1, w2, w3 = run(s, 4)
    assert s.available
    assert w1.gpu_seconds == pytest.approx(0.6) and w1.dram_bytes == pytest.approx(0.3 * 2e12)
    assert w2.gpu_seconds == pytest.approx(0.2) and w2.dram_bytes == pytest.approx(0.1 * 2e12)
    assert w3.gpu_seconds == pytest.approx(0.3) and w3.dram_bytes == pytest.approx(0.1 * 2e12)
    assert [d.lost for d in s.devices()] == [False, True]
    assert sum("GPU 1 lost" in r.getMessage() for r in caplog.records) == 1
    s.stop()
    assert not api.live


def test_every_gpu_lost_makes_the_sampler_unavailable() -> None:
    s = NvmlSampler(FakeNvml(util=[[0, err(LOST)]], dram=[[]]), clock=Clock(0.0, 1.0))
    assert run(s, 2) == [None, None]
    assert s.state == "unavailable" and s.reason == "every sampled GPU was lost"


def test_gpu_lost_at_open_is_skipped() -> None:
    class LostAtOpen(FakeNvml):
        def peak_bandwidth(self, handle: int) -> float | None:
            if handle == 1:
                raise err(LOST)
            return super().peak_bandwidth(handle)

    s = NvmlSampler(LostAtOpen(util=[[0, 40], []], dram=[[10], []]), clock=Clock(0.0, 1.0))
    assert run(s, 2)[1].gpu_seconds == pytest.approx(0.4)
    assert [d.lost for d in s.devices()] == [False, True]


def test_driver_gone_mid_run_is_unavailable() -> None:
    api = FakeNvml(util=[[0, err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)]], dram=[[]])
    s = NvmlSampler(api, clock=Clock(0.0, 1.0))
    assert run(s, 2) == [None, None] and s.state == "unavailable"


def test_transient_error_skips_one_window_only() -> None:
    api = FakeNvml(util=[[0, 10, 10, 10], [0, err(pynvml.NVML_ERROR_UNKNOWN), 20, 20]],
                   dram=[[10, 10, 10], [10]])
    s = NvmlSampler(api, clock=Clock(0.0, 1.0, 2.0, 3.0))
    _, w1, w2, w3 = run(s, 4)
    assert w1.gpu_seconds == pytest.approx(0.1) and w1.dram_bytes is None  # GPU 1 missing: no partial sum
    assert w2.gpu_seconds == pytest.approx(0.3) and w2.dram_bytes is None  # GPU 1's GPM re-primes
    assert w3.gpu_seconds == pytest.approx(0.3) and w3.dram_bytes == pytest.approx(0.2 * 2e12)
    assert not s.devices()[1].lost and s.devices()[1].dram_bytes is None
    s.stop()
    assert not api.live


def test_background_thread_samples_until_stopped() -> None:
    ticks = iter(range(10_000))
    api = FakeNvml(util=[[50] * 10_000], dram=[[10] * 10_000])
    s = NvmlSampler(api, period_s=0.001, clock=lambda: float(next(ticks)))
    got = threading.Event()

    original = s._integrate

    def spy(*args: Any) -> Any:
        window = original(*args)
        got.set()
        return window

    s._integrate = spy  # type: ignore[method-assign]
    assert s.start() is True
    assert got.wait(timeout=30)
    s.stop()
    assert api.shut and not api.live
    assert all(w.gpu_seconds == pytest.approx(0.5) for w in s.windows())


def test_real_pynvml_without_gpu_is_unavailable_cleanly() -> None:
    s = NvmlSampler(PynvmlApi())
    if s.open():  # pragma: no cover - only on a machine with a GPU and driver
        pytest.skip("a GPU with an NVML driver is present")
    assert s.state == "unavailable" and s.reason
    assert s.sample_once() is None and s.start() is False
    s.stop()
