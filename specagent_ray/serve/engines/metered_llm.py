"""Ray Serve LLM's engine replica, telling the GPU meter (``telemetry/fleet.py``) which GPUs its workers hold.

A profile turns it on per model in its ``llm_configs``::

    server_cls: specagent_ray.serve.engines.metered_llm:MeteredLLMServer
    engine_kwargs: {worker_extension_cls: specagent_ray.serve.engines.gpu_placement.GpuPlacement, ...}
    experimental_configs: {specagent_role: strong}       # or weak, or mid: the ledger role its calls are

Every third of ``specagent_placement_ttl_s`` (10 s) the replica asks each of its vLLM workers where it runs
(``collective_rpc``: the worker's Ray node and its GPU's index, the one Ray gave it in
``CUDA_VISIBLE_DEVICES``, which is NVML's), and reports each node's devices to the ``GpuMeter`` deployment of
the application ``specagent_meter_app`` (``specagent``). A tensor- and pipeline-parallel engine whose
workers span two nodes reports both. A worker without a CUDA device (vLLM on the CPU) reports nothing, and
nothing is metered for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray.serve.llm import LLMServer

from .gpu_placement import GpuPlacement, by_node

__all__ = ["GpuPlacement", "MeteredLLMServer"]

log = logging.getLogger(__name__)


class MeteredLLMServer(LLMServer):
    """``LLMServer`` as it is, plus the placement reports. A report that fails is logged and tried again at
    the next period; it never touches a request."""

    async def __init__(self, llm_config: Any, **kwargs: Any):
        await super().__init__(llm_config, **kwargs)
        extra = dict(llm_config.experimental_configs or {})
        self._role = extra.get("specagent_role")
        self.placements: dict[str, list[int]] | None = None  # the workers' GPUs as last reported
        if self._role not in ("weak", "mid", "strong"):
            log.warning("MeteredLLMServer without experimental_configs.specagent_role (weak, mid or strong): "
                        "its GPUs are not metered")
            return
        period = float(extra.get("specagent_placement_ttl_s", 10.0)) / 3
        app = extra.get("specagent_meter_app", "specagent")
        self._reports = asyncio.get_running_loop().create_task(self._report_every(period, app))

    async def _report_every(self, period_s: float, app: str) -> None:
        from ray import serve

        warned = False
        while True:
            try:
                placements = by_node(await self.collective_rpc("gpu_placement"))
                self.placements = placements
                if not placements:  # vLLM on the CPU: no worker has a GPU, now or later
                    return
                meter = serve.get_deployment_handle("GpuMeter", app_name=app)
                for node, devices in placements.items():
                    await meter.placement.remote(self._role, node, devices)
            except Exception as exc:  # noqa: BLE001 - no meter (yet), or a worker restarting: next period
                if not warned:
                    log.warning("GPU placement not reported to the meter (%s: %s); retrying every %.1f s",
                                type(exc).__name__, exc, period_s)
                    warned = True
            await asyncio.sleep(period_s)
