"""The HTTP API (FastAPI): sessions, user messages, client tool results, SSE events, trajectories.

Every route but ``/healthz`` needs an API key (``Authorization: Bearer <key>`` or ``X-API-Key``);
without a valid one the answer is 401. Bodies are validated by the pydantic models in ``api.py`` (422
names the field), bodies over ``max_body_bytes`` get 413, coordinator refusals map to their own status
(400, 404, 409, 429 with Retry-After). A coordinator that is restarting is waited for, within
``coordinator_retry_s``, and then reported as 503; no request ever gets a stack trace.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from .api import CreateSession, ToolResult, UserMessage
from .config import GatewayConfig
from .errors import ApiError, Overloaded, ServiceUnavailable
from .records import SessionEvent

log = logging.getLogger(__name__)
Call = Callable[..., Awaitable[Any]]  # (coordinator method name, *args) -> result


class EventStream(StreamingResponse):
    media_type = "text/event-stream"


class Unavailable(Exception):
    """The coordinator did not answer within the gateway's patience."""


def unwrap(exc: BaseException) -> BaseException:
    """The coordinator's own error inside a Ray task error, if that is what it is."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


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


def make_api(call: Call, cfg: GatewayConfig, keys: Callable[[], frozenset[str]]) -> FastAPI:
    """The FastAPI app over a coordinator reached through ``call``; ``keys()`` is read per request."""
    docs = {} if cfg.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="specagent-ray", version="0.1.0",
                  description="Agent sessions served with trajectory-level speculation (SpecAgent).", **docs)
    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)

    async def authorized(request: Request) -> None:
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        if not any(hmac.compare_digest(given.encode(), k.encode()) for k in keys()):
            raise ApiError401()

    async def coordinator(method: str, *args: Any) -> Any:
        """Call the coordinator; wait out a restart (its replica died) within the configured patience."""
        delay, waited = 0.25, 0.0
        while True:
            try:
                return await call(method, *args)
            except Exception as exc:  # noqa: BLE001
                err = unwrap(exc)
                if isinstance(err, ApiError):
                    raise err from None
                if waited >= cfg.coordinator_retry_s:
                    raise Unavailable(f"coordinator unavailable: {type(err).__name__}") from None
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

    auth = [Depends(authorized)]

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/sessions", status_code=201, dependencies=auth)
    async def create_session(body: CreateSession) -> dict[str, Any]:
        """Start a session; its events stream from ``/v1/sessions/{id}/events``."""
        return await coordinator("create", body)

    @app.post("/v1/sessions/{sid}/messages", status_code=202, dependencies=auth)
    async def post_message(sid: str, body: UserMessage) -> dict[str, Any]:
        """The user's next message (client-user sessions)."""
        return await coordinator("post_message", sid, body)

    @app.post("/v1/sessions/{sid}/tool_results", status_code=202, dependencies=auth)
    async def post_tool_result(sid: str, body: ToolResult) -> dict[str, Any]:
        """The result of a pending client-side tool call (see ``tool_call_pending`` events)."""
        return await coordinator("post_tool_result", sid, body)

    @app.get("/v1/sessions/{sid}/events", dependencies=auth, response_class=EventStream,
             responses={200: {"model": SessionEvent, "description": "a stream of session events"}})
    async def events(sid: str, after: int = 0) -> StreamingResponse:
        """Server-sent events, from ``after`` on: drafted, staged, accepted, rejected, tool_result, commit,
        fused_repair, strong_repair, agent_message, tool_call_pending, ..., final. Each has ``id: seq``."""
        first = await coordinator("events", sid, after, 0.0)  # 404 / 400 before the stream starts

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
                out = await coordinator("events", sid, after, cfg.events_wait_s)

        return EventStream(stream(), headers={"Cache-Control": "no-cache"})

    @app.get("/v1/sessions/{sid}", dependencies=auth)
    async def trajectory(sid: str, grade: bool = False) -> dict[str, Any]:
        """The committed trajectory, token usage, the resource report and (``grade=true``) tau2's reward."""
        return await coordinator("trajectory", sid, grade)

    @app.delete("/v1/sessions/{sid}", dependencies=auth)
    async def cancel(sid: str) -> dict[str, Any]:
        return await coordinator("cancel", sid)

    @app.get("/v1/stats", dependencies=auth)
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


def serve_with(coordinator: Any, keys: frozenset[str]) -> None:
    _SERVED["coordinator"], _SERVED["keys"] = coordinator, keys


async def served_call(method: str, *args: Any) -> Any:
    return await getattr(_SERVED["coordinator"], method).remote(*args)


def served_keys() -> frozenset[str]:
    return _SERVED["keys"]


def api_keys(cfg: GatewayConfig, env: dict[str, str]) -> frozenset[str]:
    keys = {k.strip() for k in env.get(cfg.api_keys_env, "").split(",") if k.strip()}
    if cfg.dev_api_key:
        keys.add(cfg.dev_api_key)
    return frozenset(keys)
