"""An in-process served coordinator on the simulated engines, for tests: no Ray, a local session log, the
tool host in the same process, a lease wall with a short lease, engines that answer in about a millisecond."""

from __future__ import annotations

import asyncio

from ..serve.core.config import AppConfig, LatencyModel
from ..serve.core.handles import Local
from ..serve.engines.engine_client import SimEngineClient
from ..serve.engines.sim_engine import SimEngine
from ..serve.sessions.coordinator import Coordinator
from ..serve.sessions.session import Session
from ..serve.toolhost.tool_host import ToolHost
from ..storage.local import LocalStore
from .faults import LeaseWall

FAST = LatencyModel(draft_base_s=0.001, draft_per_request_s=0, verify_base_s=0.002, verify_per_request_s=0,
                    step_base_s=0.001)


def sim_coordinator(log_dir, cfg: AppConfig) -> Coordinator:
    """A coordinator over ``cfg``'s simulated engines (a mid one too when ``mid_replicas``), logging in ``log_dir``."""
    store = LocalStore(log_dir)
    mid = Local(SimEngine("mid", cfg.engines, cfg.hardware)) if cfg.engines.mid_replicas else None
    engines = SimEngineClient(Local(SimEngine("drafter", cfg.engines)), Local(SimEngine("verifier", cfg.engines)),
                              cfg.engines, cfg.coordinator, mid=mid)
    return Coordinator(cfg, engines, Local(ToolHost(cfg.tool_sources, store)), store,
                       wall=LeaseWall(cfg.coordinator.lease_s, cfg.coordinator.lease_skew_s))


async def finished(coord: Coordinator, sid: str, timeout_s: float = 60) -> Session:
    """The session once its event stream says done (polling as a client would)."""
    after = 0
    async with asyncio.timeout(timeout_s):
        while not (out := await coord.events(sid, after, wait_s=1))["done"]:
            after += len(out["events"])
    return coord.sessions[sid]
