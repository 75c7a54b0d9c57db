"""Resource reports: measured where a sampler attributed GPU-s and bytes, estimated otherwise, and labelled."""

from __future__ import annotations

import pynvml
import pytest
from pydantic import ValidationError
from test_nvml import Clock, FakeNvml  # the injected NVML table (tests/unit is on sys.path)

from specagent_ray.costs.deployment import Pricing, RoleDeployment
from specagent_ray.costs.ledger import Ledger
from specagent_ray.costs.model import ledger_cost
from specagent_ray.costs.specs import GpuProfile, ModelSpec
from specagent_ray.protocol.interfaces import CallRecord
from specagent_ray.protocol.types import Usage
from specagent_ray.telemetry.attribution import Attributed, attribute, bucket_tokens
from specagent_ray.telemetry.nvml import NvmlSampler
from specagent_ray.telemetry.nvml_api import PynvmlApi
from specagent_ray.telemetry.resources import (
    ResourceReport,
    combine_sources,
    report_from_ledger,
    session_report,
)

TINY = ModelSpec(name="tiny", total_params=1000, active_params=100, layers=4, kv_layers=2, n_heads=4, kv_heads=2,
                 head_dim=8, bytes_per_param=2, kv_bytes=1, source="made up")
WEAK = TINY.model_copy(update={"name": "tiny-weak", "total_params": 100})
GPU = GpuProfile(name="g", hbm_bytes_per_s=1e3, peak_flops=1e4, memory_bytes=1e9, source="made up")
DEPLOY = {"strong": RoleDeployment(spec=TINY, gpu=GPU, n_gpus=2), "weak": RoleDeployment(spec=WEAK, gpu=GPU, n_gpus=1)}


def ledger() -> Ledger:
    led = Ledger()
    led.record(CallRecord("weak", "draft", Usage(50, 40, 20), 0.1))
    led.record(CallRecord("strong", "verify", Usage(80, 60, 5), 0.2))
    led.record(CallRecord("strong", "repair", Usage(90, 80, 10), 0.2))
    return led


def estimates(led: Ledger) -> tuple[float, float, float]:
    costs = {r: ledger_cost(led, r, d.spec, d.gpu, d.n_gpus) for r, d in DEPLOY.items()}  # type: ignore[arg-type]
    gpu_s = sum(c.gpu_latency_s * DEPLOY[r].n_gpus for r, c in costs.items())
    return gpu_s, sum(c.hbm_point for c in costs.values()), sum(c.flops for c in costs.values())


def assert_never_zero_measured(r: ResourceReport) -> None:
    assert not (r.gpu_seconds == 0 and r.gpu_seconds_source != "estimated")
    assert not (r.hbm_bytes == 0 and r.hbm_source != "estimated")


def test_without_measurement_everything_is_estimated() -> None:
    led = ledger()
    r = report_from_ledger(led, DEPLOY)
    gpu_s, hbm, flops = estimates(led)
    assert (r.gpu_seconds_source, r.hbm_source, r.flops_source) == ("estimated", "estimated", "estimated")
    assert (r.gpu_seconds, r.hbm_bytes, r.flops) == pytest.approx((gpu_s, hbm, flops))
    assert r.gpu_seconds > 0 and r.hbm_bytes > 0
    assert r.strong_calls == 2 and r.dollars is None
    assert r.tokens["strong"].model == "tiny"
    assert (r.tokens["strong"].prompt, r.tokens["strong"].cached, r.tokens["strong"].decode) == (170, 140, 15)
    assert r.tokens["weak"].calls == 1


@pytest.mark.parametrize("api", [FakeNvml(util=[[]], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), PynvmlApi()],
                         ids=["fake-driver-missing", "real-pynvml"])
def test_no_gpu_pipeline_reports_estimated_never_zero_measured(api: object) -> None:
    sampler = NvmlSampler(api, clock=Clock(0.0, 1.0, 2.0))  # type: ignore[arg-type]
    if sampler.open():  # pragma: no cover - only on a machine with a GPU and driver
        pytest.skip("a GPU with an NVML driver is present")
    for _ in range(3):
        sampler.sample_once()
    ws = sampler.drain()
    attributed = attribute(ws, bucket_tokens(ws, [(0.5, "req", 100)]))
    share = attributed.requests.get("req")
    assert share is None
    measured = {"strong": share} if share is not None else None
    r = report_from_ledger(ledger(), DEPLOY, measured)
    assert (r.gpu_seconds_source, r.hbm_source) == ("estimated", "estimated")
    assert_never_zero_measured(r)


def test_measured_share_is_used_and_labelled() -> None:
    led = ledger()
    r = report_from_ledger(led, DEPLOY, {"strong": Attributed(3.0, 5e9, 100, 2), "weak": Attributed(1.0, 1e9, 20, 2)})
    assert (r.gpu_seconds, r.gpu_seconds_source) == (4.0, "measured")
    assert (r.hbm_bytes, r.hbm_source) == (6e9, "measured")
    assert r.flops == pytest.approx(estimates(led)[2]) and r.flops_source == "estimated"


def test_gpm_missing_gives_measured_gpu_seconds_and_estimated_hbm() -> None:
    led = ledger()
    measured = {"strong": Attributed(3.0, None, 100, 2), "weak": Attributed(1.0, None, 20, 2)}
    r = report_from_ledger(led, DEPLOY, measured)
    assert (r.gpu_seconds, r.gpu_seconds_source) == (4.0, "measured")
    assert r.hbm_source == "estimated" and r.hbm_bytes == pytest.approx(estimates(led)[1])


def test_one_measured_role_is_mixed() -> None:
    r = report_from_ledger(ledger(), DEPLOY, {"strong": Attributed(3.0, 5e9, 100, 2)})
    assert (r.gpu_seconds_source, r.hbm_source) == ("mixed", "mixed")


def test_a_measurement_that_saw_no_tokens_is_not_a_zero_measurement() -> None:
    led = ledger()
    r = report_from_ledger(led, DEPLOY, {"strong": Attributed(0.0, 0.0, 0, 0), "weak": Attributed()})
    assert (r.gpu_seconds_source, r.hbm_source) == ("estimated", "estimated")
    assert r.gpu_seconds == pytest.approx(estimates(led)[0])
    assert_never_zero_measured(r)


def test_measured_pipeline_from_fake_nvml() -> None:
    # One GPU busy 80 % over [0, 1), DRAM 50 % of 2e12 B/s; two requests' tokens 3:1.
    sampler = NvmlSampler(FakeNvml(util=[[0, 80]], dram=[[50]]), clock=Clock(0.0, 1.0))
    sampler.sample_once(), sampler.sample_once()
    ws = sampler.drain()
    split = attribute(ws, bucket_tokens(ws, [(0.2, "a", 30), (0.4, "b", 10)]))
    led = Ledger()
    led.record(CallRecord("strong", "verify", Usage(30, 0, 0), 0.1))
    r = report_from_ledger(led, DEPLOY, {"strong": split.requests["a"]})
    assert (r.gpu_seconds, r.gpu_seconds_source) == (pytest.approx(0.6), "measured")
    assert (r.hbm_bytes, r.hbm_source) == (pytest.approx(0.75e12), "measured")


def test_dollars_for_cloud_backends() -> None:
    priced = dict(DEPLOY, weak=DEPLOY["weak"].model_copy(
        update={"pricing": Pricing(prompt_per_mtok=1.0, cached_per_mtok=0.1, decode_per_mtok=4.0)}))
    r = report_from_ledger(ledger(), priced)
    # weak: 10 uncached prompt, 40 cached, 20 decode
    assert r.dollars == pytest.approx((10 * 1.0 + 40 * 0.1 + 20 * 4.0) / 1e6)


def test_session_report_sums_and_combines_labels() -> None:
    est = report_from_ledger(ledger(), DEPLOY)
    both = {"strong": Attributed(3.0, 5e9, 1, 1), "weak": Attributed(1.0, 1e9, 1, 1)}
    meas = report_from_ledger(ledger(), DEPLOY, both)
    s = session_report([est, meas])
    assert s.gpu_seconds == pytest.approx(est.gpu_seconds + 4.0)
    assert (s.gpu_seconds_source, s.hbm_source) == ("mixed", "mixed")
    assert s.strong_calls == 4 and s.tokens["strong"].calls == 4 and s.tokens["weak"].decode == 40
    assert meas.hbm_bytes_by_role == {"strong": 5e9, "weak": 1e9}  # the measured DRAM, role by role
    assert s.hbm_bytes_by_role["strong"] == pytest.approx(est.hbm_bytes_by_role["strong"] + 5e9)
    assert sum(s.hbm_bytes_by_role.values()) == pytest.approx(s.hbm_bytes)
    assert session_report([meas, meas]).gpu_seconds_source == "measured"
    assert session_report([est, est]).hbm_source == "estimated"
    assert session_report([]).gpu_seconds_source == "estimated"
    assert s.dollars is None


@pytest.mark.parametrize(("labels", "out"), [
    ([], "estimated"), (["measured"], "measured"), (["estimated", "estimated"], "estimated"),
    (["measured", "estimated"], "mixed"), (["mixed"], "mixed"), (["measured", "mixed"], "mixed"),
])
def test_combine_sources(labels: list, out: str) -> None:
    assert combine_sources(labels) == out


def test_refusals() -> None:
    with pytest.raises(ValueError, match="no deployment"):
        report_from_ledger(ledger(), {"strong": DEPLOY["strong"]})
    with pytest.raises(ValidationError):
        ResourceReport.model_validate(dict(report_from_ledger(ledger(), DEPLOY).model_dump(), extra=1))
    with pytest.raises(ValidationError):
        ResourceReport.model_validate(dict(report_from_ledger(ledger(), DEPLOY).model_dump(), flops_source="measured"))
    other = report_from_ledger(ledger(), dict(DEPLOY, weak=DEPLOY["strong"]))
    with pytest.raises(ValueError, match="two models"):
        session_report([report_from_ledger(ledger(), DEPLOY), other])
