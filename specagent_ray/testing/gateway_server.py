"""The real gateway and coordinator in one process, on a loopback port, without Ray: simulated engine
replicas and the tool host are local objects (``handles.Local``). For fast tests of HTTP clients such as
the load generator. ``fail_after=N`` makes every request after the first N answer 500, as a broken
server would mid-run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..serve.core.config import AppConfig, LatencyModel, SimEngines, Tau2Source
from .http import serve_in_thread

FAST = LatencyModel(draft_base_s=0.002, draft_per_request_s=0, verify_base_s=0.004, verify_per_request_s=0,
                    step_base_s=0.002)


class FailAfter:
    """ASGI middleware: the first ``n`` HTTP requests pass, every later one gets 500."""

    def __init__(self, app: Any, n: int):
        self.app, self.n, self.seen = app, n, 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen += 1
            if self.seen > self.n:
                body = json.dumps({"detail": "injected failure"}).encode()
                await send({"type": "http.response.start", "status": 500,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


@contextmanager
def in_process_gateway(log_dir: Path, fail_after: int | None = None, latency: LatencyModel = FAST,
                       keys: tuple[str, ...] = ("dev-key",), app: dict[str, Any] | None = None,
                       gateway: dict[str, Any] | None = None, operators: tuple[str, ...] | None = None,
                       env: dict[str, str] | None = None, **coordinator: Any) -> Iterator[str]:
    """Yields the base URL of a gateway (API keys ``keys``; ``operators`` may read /v1/stats, every key when
    None) over an in-process sim coordinator; ``app``, ``gateway`` and ``coordinator`` override the
    application's config; ``env`` holds the named tenants' keys (``app={"tenants": ...}``)."""
    api = gateway_app(log_dir, fail_after, latency, keys, app, gateway, operators, env, **coordinator)
    with serve_in_thread(api) as url:
        yield url


def gateway_app(log_dir: Path, fail_after: int | None = None, latency: LatencyModel = FAST,
                keys: tuple[str, ...] = ("dev-key",), app: dict[str, Any] | None = None,
                gateway: dict[str, Any] | None = None, operators: tuple[str, ...] | None = None,
                env: dict[str, str] | None = None, **coordinator: Any) -> Any:
    """The ASGI app ``in_process_gateway`` serves (same arguments). Its coordinator shards start in the
    event loop of the first request, so serve it from one loop. Its schema lists the tau2 sources' task ids."""
    from ..models.scripted_plan import PlanEngineClient
    from ..serve.agents.terms import Terms
    from ..serve.core.api import Offer
    from ..serve.core.handles import Local
    from ..serve.core.tenants import TenantRules, key_owners
    from ..serve.engines.engine_client import SimEngineClient
    from ..serve.engines.priority import ProgramPriority
    from ..serve.engines.sim_engine import SimEngine
    from ..serve.gateway.limits import body_caps
    from ..serve.gateway.models_route import ModelTerms
    from ..serve.gateway.routes import make_api
    from ..serve.sessions.coordinator import Coordinator
    from ..serve.sessions.shards import ShardRouter, shard_log
    from ..serve.toolhost.tool_host import ToolHost
    from ..storage.local import LocalStore

    cfg = AppConfig.model_validate({
        "engines": SimEngines(latency=latency).model_dump(), "coordinator": coordinator,
        "gateway": {"coordinator_retry_s": 1.0, "rate_per_s": 1e6, "burst": 1_000_000, **(gateway or {})},
        "tool_sources": {"airline": {"kind": "tau2", "domain": "airline"},
                         "retail": {"kind": "tau2", "domain": "retail"}}, **(app or {})})
    shards = []
    for i in range(cfg.coordinators):  # each shard has its own engine clients, log namespace and lease
        engines = (SimEngineClient(Local(SimEngine("drafter", cfg.engines)), Local(SimEngine("verifier", cfg.engines)),
                                   cfg.engines, cfg.coordinator) if isinstance(cfg.engines, SimEngines)
                   else PlanEngineClient(ProgramPriority()))
        store = LocalStore(Path(shard_log(str(log_dir), i)))
        shards.append(Coordinator(cfg, engines, Local(ToolHost(cfg.tool_sources)), store, shard=i))

    async def call_shard(i: int, method: str, *args: Any, **kwargs: Any) -> Any:
        await shards[i].start()  # in the server's own event loop; a no-op after the first call
        result = getattr(shards[i], method)(*args, **kwargs)
        return await result if hasattr(result, "__await__") else result

    call = ShardRouter(call_shard, len(shards))
    owners = key_owners(cfg.tenants, env or {}, frozenset(keys), frozenset(operators or ()))
    api: Any = make_api(call, cfg.gateway, lambda: owners,
                        None if operators is None else (lambda: frozenset(operators)),
                        offer=Offer.of(cfg, tau2_task_ids(cfg)), terms=Terms.of(cfg), rates=TenantRules(cfg.tenants).rate,
                        caps=body_caps(cfg), models=ModelTerms.of(cfg))
    if fail_after is not None:
        api = FailAfter(api, fail_after)
    return api


def tau2_task_ids(cfg: AppConfig) -> dict[str, list[str]]:
    """Every tau2 source's task ids, by source name (the domains load once per process, and the
    coordinator loads them anyway)."""
    from ..tools.tau2 import Tau2Domain

    return {name: list(Tau2Domain.load(source.domain).tasks) for name, source in cfg.tool_sources.items()
            if isinstance(source, Tau2Source)}
