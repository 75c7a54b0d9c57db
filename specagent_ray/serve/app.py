"""The Serve application: ``build_app`` is what a Serve config's ``import_path`` points to.

    applications:
    - name: specagent
      import_path: specagent_ray.serve.app:build_app
      args: {engines: {kind: sim}, ...}          # an AppConfig, see config.py

It composes the gateway (ingress), the coordinator shards (``coordinators``, one replica each: a shard
owns its sessions' state and its own session log namespace; a restarted replica resumes from it), the
tool host shards, and, for simulated engines, drafter and verifier replicas. Each session's calls go out in its lane's batches with ``session_id=lane-<n>`` set, which a
session-aware router (Ray's experimental ``ConsistentHashRouter``) would use to pin the lane to one replica;
see docs/serving.md for why the profiles do not turn it on yet. Calls between these deployments' replicas
go over the callee's gRPC server (``core/handles.by_grpc``), with ``REPLICA``'s settings. Model engines
(``kind: openai``) are Ray Serve LLM's own deployments: profiles put them in a sibling application built
by ``ray.serve.llm:build_openai_app`` (see deployments/), and the coordinator reaches them over HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import Counter
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from .core.config import AppConfig, ScriptedEngines, SimEngines

BUSY = 100_000  # long-polling event streams hold requests open; the coordinator must not queue them
# Inner deployments answer several calls per committed step; an access-log line for each costs CPU and
# says nothing the session log does not. The gateway (the ingress) keeps Serve's access log.
QUIET = {"enable_access_log": False}
# Calls between this application's replicas go over the callee's gRPC server (``core/handles.by_grpc``).
# Every replica gets two settings for it, read when its process starts:
# - the message limit, which Ray reads in the caller and in the callee (4 MiB unless set): a verify batch
#   of long histories or a long session's trajectory can be larger;
# - no gRPC fork handlers: a tool host starts MCP servers (fork, exec) while it serves gRPC calls, and
#   with the handlers on, about every second such start lost its server at once ("Connection closed").
GRPC_MAX_MESSAGE_BYTES = 1 << 30
REPLICA = {"runtime_env": {"env_vars": {"RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(GRPC_MAX_MESSAGE_BYTES),
                                        "GRPC_ENABLE_FORK_SUPPORT": "0"}}}


@serve.deployment(name="ToolHost", max_ongoing_requests=BUSY, logging_config=QUIET,
                  ray_actor_options=REPLICA)
class ToolHostDeployment:
    def __init__(self, cfg: dict[str, Any]):
        from ..storage import open_store
        from .toolhost.tool_host import ToolHost

        config = AppConfig.model_validate(cfg)
        # Idempotency records live in the session log's store: durable, and shared by every shard.
        self.host = ToolHost(config.tool_sources, open_store(config.session_log))
        self.host.warm()  # tau2 domains load before the replica is ready, not on a session's first call

    async def execute(self, *args: Any) -> Any:
        return await self.host.execute(*args)

    async def describe(self, source: str) -> Any:
        return await self.host.describe(source)

    async def execute_many(self, reads: list) -> list:
        return await self.host.execute_many(reads)

    def close_sessions(self, session_ids: list[str]) -> list[None]:
        return self.host.close_sessions(session_ids)

    def stats(self) -> dict[str, Any]:
        return self.host.stats()


@serve.deployment(name="GpuMeter", num_replicas=1, max_ongoing_requests=BUSY, logging_config=QUIET,
                  ray_actor_options=REPLICA)
class GpuMeterDeployment:
    """The GPU meter fleet (``telemetry/fleet.py``): node meters where the engines run, and the book."""

    async def __init__(self, cfg: dict[str, Any]):
        from functools import partial

        from ..telemetry.fleet import MeterFleet
        from ..telemetry.metrics import MeterMetrics

        config = AppConfig.model_validate(cfg)
        m = config.meter
        assert m is not None
        metrics = MeterMetrics(frozenset(config.tenants))
        self.fleet = MeterFleet(partial(_node_meter, m.model_dump()), m.seal_after_s, m.placement_ttl_s,
                                on_charged=metrics.charged)
        self._poller = asyncio.get_running_loop().create_task(_every(m.poll_s, self.fleet.poll))

    # async, all of them: they run on the replica's event loop, between the poller's steps (the book has
    # one owner; a sync method could run in Serve's thread pool, beside a poll)
    async def placement(self, role: str, node: str, devices: list[int]) -> None:
        self.fleet.placement(role, node, devices)

    async def spans(self, role: str, rows: list[tuple]) -> None:
        self.fleet.spans(role, rows)

    async def usage(self, tenant: str | None = None, since: str | None = None) -> dict[str, Any]:
        return self.fleet.book.tenant_usage(tenant, since)

    async def session(self, session_id: str) -> dict[str, Any]:
        return self.fleet.book.session(session_id)

    async def stats(self) -> dict[str, Any]:
        """The book's totals just after a fresh drain, then each node meter's own device totals: the two
        differ only by what the meters sampled in between (a window or so)."""
        await self.fleet.poll()
        return {**self.fleet.stats(), "devices": await self.fleet.devices()}


def _node_meter(m: dict[str, Any], node: str) -> Any:
    """A ``NodeMeter`` actor pinned to ``node`` (it dies with the meter replica that owns it)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ..telemetry.node_meter import NodeMeter

    return ray.remote(NodeMeter).options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        node, soft=False)).remote(m["nvml"], m["nvml_args"], m["period_s"])


async def _every(period_s: float, step: Any) -> None:
    while True:
        await asyncio.sleep(period_s)
        try:
            await step()
        except Exception:  # noqa: BLE001 - one failed poll is retried at the next
            logging.getLogger(__name__).warning("GPU meter poll failed", exc_info=True)


@serve.deployment(name="SimEngine", max_ongoing_requests=1000, logging_config=QUIET, ray_actor_options=REPLICA)
class SimEngineDeployment:
    async def __init__(self, role: str, engines: dict[str, Any], hardware: dict[str, Any] | None = None,
                       meter: DeploymentHandle | None = None, meter_cfg: dict[str, Any] | None = None):
        from ..costs.hardware import Hardware
        from .engines.sim_engine import SimEngine

        self.engine = SimEngine(role, SimEngines.model_validate(engines),  # type: ignore[arg-type]
                                Hardware.model_validate(hardware or {}))
        if meter is not None and meter_cfg is not None:  # tell the GPU meter where this replica runs
            self._placement = asyncio.get_running_loop().create_task(_placement(role, meter, meter_cfg))

    async def propose_batch(self, requests: bytes) -> bytes:
        from .engines.batch_wire import packed

        return packed(await self.engine.propose_batch(requests))

    async def verify_batch(self, requests: bytes) -> bytes:
        from .engines.batch_wire import packed

        return packed(await self.engine.verify_batch(requests))

    def ping(self) -> int:
        return self.engine.ping()

    def meters(self) -> dict[str, float]:
        return self.engine.meters()


async def _placement(role: str, meter: DeploymentHandle, m: dict[str, Any]) -> None:
    """Renew this engine replica's placement with the GPU meter every third of its time to live: its node and
    the GPUs Ray gave it (a simulated engine: the devices ``meter.sim_devices`` says its role stands for)."""
    import ray

    ledger_role = {"drafter": "weak", "mid": "mid"}.get(role, "strong")
    node = ray.get_runtime_context().get_node_id()
    devices = m["sim_devices"].get(ledger_role) or [int(g) for g in ray.get_gpu_ids()]
    await _every(m["placement_ttl_s"] / 3, lambda: meter.placement.remote(ledger_role, node, devices))


def _forward(name: str):
    """A coordinator method as the deployment's, counted in ``calls_in`` (``bench scale`` reports calls per step)."""
    async def call(self: Any, *args: Any, **kw: Any) -> Any:
        self.calls_in[name] += 1
        return await getattr(self.coordinator, name)(*args, **kw)
    call.__name__ = call.__qualname__ = name
    return call


@serve.deployment(name="Coordinator", num_replicas=1, max_ongoing_requests=BUSY, logging_config=QUIET,
                  ray_actor_options=REPLICA)
class CoordinatorDeployment:
    async def __init__(self, cfg: dict[str, Any], tool_hosts: list[DeploymentHandle],
                     drafter: DeploymentHandle | None = None, verifier: DeploymentHandle | None = None,
                     shard: int = 0, meter: DeploymentHandle | None = None, mid: DeploymentHandle | None = None):
        from ..storage import open_store
        from .core.handles import Served, by_grpc
        from .sessions.coordinator import Coordinator
        from .sessions.shards import shard_log
        from .toolhost.tool_host import ShardedToolHost

        config = AppConfig.model_validate(cfg)
        for chatty in ("httpx", "LiteLLM", "openai"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
        self.loop_thread = threading.get_native_id()  # Serve runs __init__ on the user code's event loop
        self.calls_in: Counter[str] = Counter()
        self.calls_out: Counter[str] = Counter()  # to the tool hosts and the simulated engines
        tools = ShardedToolHost([Served(by_grpc(h), self.calls_out) for h in tool_hosts])
        grpc = lambda h: None if h is None else by_grpc(h)  # noqa: E731
        engines = _engines(config, grpc(drafter), grpc(verifier), self.calls_out, grpc(mid))
        metered = None if meter is None else Served(by_grpc(meter), self.calls_out)
        self.coordinator = Coordinator(config, engines, tools, open_store(shard_log(config.session_log, shard)),
                                       shard=shard, meter=metered)
        self._metrics()
        await self.coordinator.start()

    def _metrics(self) -> None:
        """Protocol metrics on Ray's metrics port: the coordinator's events, sessions, batches and waits."""
        from ..telemetry.metrics import ProtocolMetrics, tenant_label
        from .sessions.reports import resource_report

        metrics = ProtocolMetrics()
        cfg = self.coordinator.cfg
        named = frozenset(cfg.tenants)
        method = lambda s: s.request.method or cfg.defaults.method  # noqa: E731

        def finished(s: Any) -> None:
            metrics.observe_finished(method(s), s.ledger.calls, len(s.steps))
            metrics.observe_cache(s.ledger.calls)
            gpu_s = resource_report(s.ledger, cfg.hardware)["gpu_seconds"] if s.ledger.calls else 0.0
            metrics.observe_tenant(tenant_label(s.owner, named), s.status, s.ledger.calls, gpu_s)
        self.coordinator.metrics.on_session = finished
        self.coordinator.on_event = lambda s, event: metrics.observe_event(method(s), event.t, event.detail)
        self.coordinator.engines.priority.on_wait = metrics.observe_wait
        for batcher in self.coordinator.engines.batchers().get("verify", []):  # verifier batches only
            batcher.on_batch = metrics.observe_batch
        self._flusher = asyncio.get_running_loop().create_task(_flush_every_second(metrics))

    create = _forward("create")  # the gateway's calls, as the coordinator takes them (owner=... by keyword)
    post_message = _forward("post_message")
    post_tool_result = _forward("post_tool_result")
    respond = _forward("respond")
    post_approval = _forward("post_approval")
    delete = _forward("delete")
    events = _forward("events")
    events_many = _forward("events_many")
    trajectory = _forward("trajectory")
    cancel = _forward("cancel")
    create_conversation = _forward("create_conversation")
    conversation = _forward("conversation")
    usage = _forward("usage")

    def stats(self) -> dict[str, Any]:
        import ray

        from ..telemetry.threads import cpu_by_part, serve_replica_parts

        process = {"cpu_s_by_part": cpu_by_part(serve_replica_parts(self.loop_thread)),
                   "calls_in": dict(self.calls_in), "calls_out": dict(self.calls_out)}
        return {**self.coordinator.stats(), "node_id": ray.get_runtime_context().get_node_id(), "process": process}


async def _flush_every_second(metrics: Any) -> None:
    """The protocol metrics' buffered per-step updates reach Ray once a second (``telemetry/metrics.py``)."""
    while True:
        await asyncio.sleep(1.0)
        try:
            metrics.flush()
        except Exception:  # noqa: BLE001 - metrics never fail the coordinator
            logging.getLogger(__name__).warning("could not export the protocol metrics", exc_info=True)


def _engines(config: AppConfig, drafter: DeploymentHandle | None, verifier: DeploymentHandle | None,
             counts: Counter[str], mid: DeploymentHandle | None = None) -> Any:
    from .core.handles import Served
    from .engines.engine_client import OpenAIEngineClient, SimEngineClient

    if isinstance(config.engines, SimEngines):
        assert drafter is not None and verifier is not None
        return SimEngineClient(Served(drafter, counts), Served(verifier, counts), config.engines, config.coordinator,
                               None if mid is None else Served(mid, counts))
    if isinstance(config.engines, ScriptedEngines):
        from ..models.scripted_plan import PlanEngineClient
        from .engines.priority import ProgramPriority

        return PlanEngineClient(ProgramPriority())
    return OpenAIEngineClient(config.engines, config.coordinator, dict(os.environ), config.coordinators)


def _gateway_class(cfg: dict[str, Any]):
    """The ingress class. Its FastAPI app is built at composition time so Serve can serve the routes
    and the OpenAPI schema; the coordinator handle and the API keys arrive in the replica."""
    from .agents.terms import Terms
    from .core.api import Offer
    from .core.tenants import TenantRules
    from .gateway.limits import body_caps
    from .gateway.models_route import ModelTerms
    from .gateway.routes import (
        gateway_keys,
        make_api,
        serve_with,
        served_call,
        served_keys,
        served_operators,
    )

    config = AppConfig.model_validate(cfg)
    api = make_api(served_call, config.gateway, served_keys, served_operators, offer=Offer.of(config),
                   terms=Terms.of(config), rates=TenantRules(config.tenants).rate, caps=body_caps(config),
                   models=ModelTerms.of(config))

    @serve.deployment(name="Gateway", max_ongoing_requests=BUSY, ray_actor_options=REPLICA)
    @serve.ingress(api)
    class Gateway:
        def __init__(self, coordinators: list[DeploymentHandle], meter: DeploymentHandle | None = None):
            from .core.handles import by_grpc

            owners, operators = gateway_keys(config, dict(os.environ))
            serve_with([by_grpc(c) for c in coordinators], owners, operators, config.gateway.coordinator_retry_s,
                       None if meter is None else by_grpc(meter))

    return Gateway


def build_app(args: dict[str, Any]) -> serve.Application:
    """The application for one ``AppConfig`` dict (validated here: a bad field fails the deploy)."""
    config = AppConfig.model_validate(args)
    cfg = config.model_dump(mode="json")
    # One single-replica deployment per shard: a session's calls must all reach the replica holding its
    # environment, which Serve's default router (any replica) would not guarantee.
    tool_hosts = [ToolHostDeployment.options(name="ToolHost" + (f"-{i}" if i else ""), num_replicas=1).bind(cfg)
                  for i in range(config.tool_hosts)]
    drafter = verifier = mid = None
    meter = GpuMeterDeployment.bind(cfg) if config.meter is not None else None
    if isinstance(config.engines, SimEngines):
        engines, hardware = config.engines.model_dump(mode="json"), config.hardware.model_dump(mode="json")
        drafter = SimEngineDeployment.options(name="SimDrafter", num_replicas=config.engines.drafter_replicas) \
            .bind("drafter", engines, hardware, meter, cfg["meter"])
        verifier = SimEngineDeployment.options(name="SimVerifier", num_replicas=config.engines.verifier_replicas) \
            .bind("verifier", engines, hardware, meter, cfg["meter"])
        if config.engines.mid_replicas:  # the three-tier chain's mid verifier
            mid = SimEngineDeployment.options(name="SimMid", num_replicas=config.engines.mid_replicas) \
                .bind("mid", engines, hardware, meter, cfg["meter"])
    # Coordinator shards: one single-replica deployment each, named like the tool host shards.
    coordinators = [CoordinatorDeployment.options(name="Coordinator" + (f"-{i}" if i else ""))
                    .bind(cfg, tool_hosts, drafter, verifier, shard=i, meter=meter, mid=mid)
                    for i in range(config.coordinators)]
    return _gateway_class(cfg).bind(coordinators, meter)
