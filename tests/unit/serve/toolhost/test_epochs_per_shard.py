"""The tool host's fencing by lease epoch is per coordinator shard: each shard has its own session log and
lease, so a restarted shard's newer epoch never fences another shard's writes (found by
test_serve_sim.py: after shard 0 restarted at epoch 2, shard 1's writes at epoch 1 were refused)."""

from __future__ import annotations

import pytest

from specagent_ray.protocol.types import ToolCall
from specagent_ray.serve.core.config import AppConfig, SimEngines
from specagent_ray.serve.log.idempotency import StaleEpoch
from specagent_ray.serve.toolhost.tool_host import ToolHost

SOURCES = AppConfig(engines=SimEngines(), tool_sources={"airline": {"kind": "tau2", "domain": "airline"}}).tool_sources
CALL = ToolCall("calculate", {"expression": "1 + 1"})


async def test_a_newer_epoch_of_one_shard_fences_that_shard_only():
    host = ToolHost(SOURCES)
    s0, s1 = "0-00000000000000aa", "1-00000000000000bb"
    await host.execute("airline", s0, CALL, f"{s0}:w0", epoch=2, task_id="0")  # shard 0 restarted: epoch 2
    await host.execute("airline", s1, CALL, f"{s1}:w0", epoch=1, task_id="0")  # shard 1's own first epoch: fine
    with pytest.raises(StaleEpoch, match="from its shard"):
        await host.execute("airline", s0, CALL, f"{s0}:w1", epoch=1, task_id="0")  # shard 0's displaced holder
