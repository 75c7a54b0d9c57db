"""The HTTP API (FastAPI): sessions, user messages, client tool results, SSE events, trajectories.

Every route but ``/healthz`` needs an API key (``Authorization: Bearer <key>`` or ``X-API-Key``);
without a valid one the answer is 401. A key is a tenant: its sessions are its own (another key gets
404 for them), and its requests share a token bucket (429 with Retry-After past ``rate_per_s``). Bodies
are validated by the pydantic models in ``api.py`` (422 names the field), bodies over ``max_body_bytes``
get 413, coordinator refusals map to their own status (400, 403, 404, 409, 429 with Retry-After).

Retries: only a call that is safe to repeat (reads, cancel, tool results keyed by call id, and creates
and messages that carry an ``Idempotency-Key``) is retried, and only while the coordinator is
unavailable (its replica died or restarts), within ``coordinator_retry_s``; then 503. Any other failure
is answered at once (500 for the unexpected), and no request ever gets a stack trace.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray.exceptions import RayActorError
from ray.serve.exceptions import DeploymentUnavailableError

from .api import CreateSession, ToolResult, UserMessage
from .config import GatewayConfig
from .errors import ApiError, Forbidden, Overloaded, ServiceUnavailable, unwrap
from .records import SessionEvent
from .shards import ShardRouter

log = logging.getLogger(__name__)
Call = Callable[..., Awaitable[Any]]  # (coordinator method name, *args) -> result


class EventStream(StreamingResponse):
    media_type = "text/event-stream"


class Unavailable(Exception):
    """The coordinator did not answer within the gateway's patience."""


class Internal(Exception):
    """The coordinator failed in a way no client can fix; answered 500 without details."""


# What a call to a coordinator that is gone raises (its replica died, or Serve has none to route to):
# the call may be tried again. Ray's handles raise RayActorError (ActorDiedError, ActorUnavailableError).
UNAVAILABLE = (RayActorError, DeploymentUnavailableError, ConnectionError)
IDEMPOTENT = {"events", "trajectory", "stats", "cancel", "post_tool_result"}  # safe to repeat as they are
IdempotencyKey = Header(None, alias="Idempotency-Key", min_length=1, max_length=200,
                        description="the same key (per API key) returns the first answer, never a second effect")


def tenant_of(key: str) -> str:
    """A key's tenant id: a hash, so neither logs nor session records hold the key."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:16]


class TokenBucket:
    """Per-tenant request rate: ``burst`` requests at once, refilled at ``rate_per_s``."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate_per_s, burst, clock
        self._state: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, when)

    def take(self, tenant: str) -> float:
        """0 if the request may go now, else the seconds until it may."""
        now = self.clock()
        tokens, when = self._state.get(tenant, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.rate)
        if tokens >= 1:
            self._state[tenant] = (tokens - 1, now)
            return 0.0
        self._state[tenant] = (tokens, now)
        return (1 - tokens) / self.rate


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before any of it is parsed."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _too_large(self.limit, send)
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge()
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await _too_large(self.limit, send)


class _TooLarge(Exception):
    pass


async def _too_large(limit: int, send: Callable) -> None:
    body = json.dumps({"detail": f"request body over {limit} bytes"}).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def make_api(call: Call, cfg: GatewayConfig, keys: Callable[[], frozenset[str]],
             operators: Callable[[], frozenset[str]] | None = None) -> FastAPI:
    """The FastAPI app over a coordinator reached through ``call``; ``keys()`` is read per request.
    Only ``operators()`` keys read ``/v1/stats`` (cluster-wide counts, shard nodes, and the ids of
    sessions the log could not restore, which may be any tenant's); ``None``: every key may."""
    docs = {} if cfg.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="specagent-ray", version="0.1.0",
                  description="Agent sessions served with trajectory-level speculation (SpecAgent).", **docs)
    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)

    bucket = TokenBucket(cfg.rate_per_s, cfg.burst)

    def key_of(request: Request) -> str:
        """The caller's key, once checked (401) and within its rate (429)."""
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        matched = [k for k in keys() if hmac.compare_digest(given.encode(), k.encode())]
        if not matched:
            raise ApiError401()
        wait = bucket.take(tenant_of(matched[0]))
        if wait > 0:
            raise Overloaded(f"over this key's rate of {cfg.rate_per_s:g} requests/s", max(1, round(wait + 0.5)))
        return matched[0]

    async def tenant(request: Request) -> str:
        """The caller's tenant."""
        return tenant_of(key_of(request))

    async def operator(request: Request) -> None:
        """403 unless the caller's key is an operator's."""
        key = key_of(request)
        if operators is not None and not any(hmac.compare_digest(key.encode(), k.encode()) for k in operators()):
            raise Forbidden("the cluster-wide stats are for operator keys (gateway.operator_keys_env)")

    async def coordinator(method: str, *args: Any, retry: bool | None = None, **kwargs: Any) -> Any:
        """Call the coordinator. A call safe to repeat waits out a restart within the configured patience."""
        retry = method in IDEMPOTENT if retry is None else retry
        delay, waited = 0.25, 0.0
        while True:
            try:
                return await call(method, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                err = unwrap(exc)
                if isinstance(err, ApiError):
                    raise err from None
                if not isinstance(err, UNAVAILABLE):
                    log.error("coordinator call %s failed: %s: %s", method, type(err).__name__, err)
                    raise Internal() from None
                if not retry or waited >= cfg.coordinator_retry_s:
                    raise Unavailable(f"coordinator unavailable ({type(err).__name__}); "
                                      + ("try again" if retry else "not retried: send an Idempotency-Key "
                                         "to make this call safe to repeat")) from None
                log.warning("coordinator call %s failed (%s); retrying", method, type(err).__name__)
                await asyncio.sleep(delay)
                waited += delay
                delay = min(delay * 2, 5.0)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        retry = isinstance(exc, Overloaded | ServiceUnavailable)
        headers = {"Retry-After": str(exc.retry_after_s)} if retry else None  # type: ignore[attr-defined]
        if isinstance(exc, ApiError401):
            headers = {"WWW-Authenticate": "Bearer"}
        return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=headers)

    @app.exception_handler(Unavailable)
    async def unavailable(request: Request, exc: Unavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(Internal)
    async def internal(request: Request, exc: Internal) -> JSONResponse:
        return JSONResponse({"detail": "internal error (logged on the server)"}, status_code=500)

    Tenant = Depends(tenant)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/sessions", status_code=201)
    async def create_session(body: CreateSession, who: str = Tenant,
                             idempotency_key: str | None = IdempotencyKey) -> dict[str, Any]:
        """Start a session; its events stream from ``/v1/sessions/{id}/events``. With an
        ``Idempotency-Key``, a repeated create answers with the first session instead of starting another."""
        return await coordinator("create", body, owner=who, idempotency_key=idempotency_key,
                                 retry=idempotency_key is not None)

    @app.post("/v1/sessions/{sid}/messages", status_code=202)
    async def post_message(sid: str, body: UserMessage, who: str = Tenant,
                           idempotency_key: str | None = IdempotencyKey) -> dict[str, Any]:
        """The user's next message (client-user sessions); an ``Idempotency-Key`` makes a repeat harmless."""
        return await coordinator("post_message", sid, body, owner=who, idempotency_key=idempotency_key,
                                 retry=idempotency_key is not None)

    @app.post("/v1/sessions/{sid}/tool_results", status_code=202)
    async def post_tool_result(sid: str, body: ToolResult, who: str = Tenant) -> dict[str, Any]:
        """The result of a pending client-side tool call (see ``tool_call_pending`` events)."""
        return await coordinator("post_tool_result", sid, body, owner=who)

    @app.get("/v1/sessions/{sid}/events", response_class=EventStream,
             responses={200: {"model": SessionEvent, "description": "a stream of session events"}})
    async def events(sid: str, after: int = 0, who: str = Tenant) -> StreamingResponse:
        """Server-sent events, from ``after`` on: drafted, staged, accepted, rejected, tool_result, commit,
        fused_repair, strong_repair, agent_message, tool_call_pending, ..., final. Each has ``id: seq``."""
        first = await coordinator("events", sid, after, 0.0, owner=who)  # 404 / 400 before the stream starts

        async def stream():
            nonlocal after
            out = first
            while True:
                for e in out["events"]:
                    yield f"id: {e['seq']}\nevent: {e['t']}\ndata: {json.dumps(e, default=str)}\n\n"
                after += len(out["events"])
                if out["done"]:
                    return
                if not out["events"]:
                    yield ": keep-alive\n\n"
                out = await coordinator("events", sid, after, cfg.events_wait_s, owner=who)

        return EventStream(stream(), headers={"Cache-Control": "no-cache"})

    @app.get("/v1/sessions/{sid}")
    async def trajectory(sid: str, grade: bool = False, who: str = Tenant) -> dict[str, Any]:
        """The committed trajectory, token usage, the resource report and (``grade=true``) tau2's reward."""
        return await coordinator("trajectory", sid, grade, owner=who)

    @app.delete("/v1/sessions/{sid}")
    async def cancel(sid: str, who: str = Tenant) -> dict[str, Any]:
        return await coordinator("cancel", sid, owner=who)

    @app.get("/v1/stats", dependencies=[Depends(operator)])
    async def stats() -> dict[str, Any]:
        """Sessions by status, verifier batch sizes, coordinator overhead per committed step."""
        return await coordinator("stats")

    return app


class ApiError401(ApiError):
    status = 401

    def __init__(self) -> None:
        super().__init__("missing or wrong API key: send 'Authorization: Bearer <key>' or 'X-API-Key'")


# The served gateway's replica state. Module-level (pickled by reference), so the routes built at
# composition time and the replica's constructor see the same object in the replica's process.
_SERVED: dict[str, Any] = {"keys": frozenset()}


def serve_with(coordinators: list[Any], keys: frozenset[str], operators: frozenset[str] = frozenset()) -> None:
    """The replica's coordinator shards (deployment handles), API keys and operator keys."""
    def call_shard(i: int, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(coordinators[i], method).remote(*args, **kwargs)

    _SERVED["router"], _SERVED["keys"] = ShardRouter(call_shard, len(coordinators)), keys | operators
    _SERVED["operators"] = operators


async def served_call(method: str, *args: Any, **kwargs: Any) -> Any:
    return await _SERVED["router"](method, *args, **kwargs)


def served_keys() -> frozenset[str]:
    return _SERVED["keys"]


def served_operators() -> frozenset[str]:
    return _SERVED.get("operators", frozenset())


def operator_keys(cfg: GatewayConfig, env: dict[str, str]) -> frozenset[str]:
    """The keys that may read /v1/stats: ``operator_keys_env``'s, and the dev key of a local profile."""
    return _listed(env, cfg.operator_keys_env, cfg.dev_api_key)


def api_keys(cfg: GatewayConfig, env: dict[str, str]) -> frozenset[str]:
    return _listed(env, cfg.api_keys_env, cfg.dev_api_key)


def _listed(env: dict[str, str], variable: str, dev_key: str | None) -> frozenset[str]:
    """The comma-separated keys in ``variable``, and the dev key if there is one."""
    keys = {k.strip() for k in env.get(variable, "").split(",") if k.strip()}
    return frozenset(keys | {dev_key} if dev_key else keys)
