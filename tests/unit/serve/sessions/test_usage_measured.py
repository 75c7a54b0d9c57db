"""/v1/usage with the GPU meter: measured roles replace their estimates, labelled; a meter that does not
answer leaves usage estimated, as without one."""

from __future__ import annotations

import asyncio
import copy

from specagent_ray.serve.sessions.shards import ShardRouter
from specagent_ray.serve.sessions.usage import with_measured

DAY = "2026-12-06"


def estimated() -> dict:
    role = lambda g, h: {"gpu_seconds": g, "gpu_seconds_source": "estimated", "hbm_bytes": h,  # noqa: E731
                         "hbm_source": "estimated"}
    return {"acme": {DAY: {"gpu_seconds": 3.0, "gpu_seconds_source": "estimated", "strong_hbm_bytes": 9e9,
                           "strong_hbm_source": "estimated", "by_role": {"weak": role(1.0, 1e9), "strong": role(2.0, 9e9)},
                           "label": "estimated"}}}


def test_a_measured_role_replaces_its_estimate_and_the_sum_says_mixed() -> None:
    out = with_measured(estimated(), {"acme": {DAY: {"strong": {"gpu_seconds": 5.0, "dram_bytes": 4e9}}}})
    f = out["acme"][DAY]
    assert f["by_role"]["strong"] == {"gpu_seconds": 5.0, "gpu_seconds_source": "measured", "hbm_bytes": 4e9,
                                      "hbm_source": "measured"}
    assert f["by_role"]["weak"]["gpu_seconds_source"] == "estimated"
    assert (f["gpu_seconds"], f["gpu_seconds_source"]) == (6.0, "mixed")
    assert (f["strong_hbm_bytes"], f["strong_hbm_source"]) == (4e9, "measured")


def test_every_role_measured_is_measured_and_dram_unknown_stays_estimated() -> None:
    m = {"acme": {DAY: {"strong": {"gpu_seconds": 5.0, "dram_bytes": None}, "weak": {"gpu_seconds": 0.5,
                                                                                       "dram_bytes": 1e8}}}}
    f = with_measured(estimated(), m)["acme"][DAY]
    assert (f["gpu_seconds"], f["gpu_seconds_source"]) == (5.5, "measured")
    assert (f["strong_hbm_bytes"], f["strong_hbm_source"]) == (9e9, "estimated")


def test_a_role_the_log_does_not_have_is_not_invented() -> None:
    f = with_measured(estimated(), {"acme": {DAY: {"user": {"gpu_seconds": 7.0, "dram_bytes": 1.0}}},
                                    "other": {DAY: {"strong": {"gpu_seconds": 1.0, "dram_bytes": 1.0}}}})
    assert "other" not in f and "user" not in f["acme"][DAY]["by_role"]
    assert f["acme"][DAY]["gpu_seconds_source"] == "estimated"


def test_usage_stays_estimated_when_the_meter_does_not_answer() -> None:
    async def shard(i, method, *args):
        return copy.deepcopy(estimated())

    async def meter(method, *args):
        raise ConnectionError("meter restarting")

    async def measured_meter(method, *args):
        return {"acme": {DAY: {"weak": {"gpu_seconds": 0.25, "dram_bytes": 2e8}}}}
    down = asyncio.run(ShardRouter(shard, 1, meter)("usage", None, None))
    assert down["acme"][DAY]["gpu_seconds_source"] == "estimated" and down["acme"][DAY]["gpu_seconds"] == 3.0
    up = asyncio.run(ShardRouter(shard, 1, measured_meter)("usage", None, None))
    assert up["acme"][DAY]["gpu_seconds_source"] == "mixed" and up["acme"][DAY]["gpu_seconds"] == 2.25
