"""The HTTP API (FastAPI): sessions, user messages, client tool results, SSE events, trajectories.

Every route but ``/healthz`` needs an API key (``Authorization: Bearer <key>`` or ``X-API-Key``);
without a valid one the answer is 401. A key is a tenant: its sessions are its own (another key gets
404 for them), and its requests share a token bucket (429 with Retry-After past ``rate_per_s``). Bodies
are validated by the pydantic models in ``api.py`` (422 names the field), a body over its route's cap gets
413 (``limits.BodyCaps``), coordinator refusals map to their own status (400, 403, 404, 409, 429 with
Retry-After). ``GET /v1/models`` lists the model names a key may send (``models_route.py``).

The OpenAPI schema documents every status a route answers (``errors.WHEN``) with its body and headers,
this server's own create terms (``api.Offer``), and links from a session's summary to its routes; a
method a path does not take gets 405 with ``Allow`` listing exactly the methods it does.

Retries: only a call that is safe to repeat (reads, cancel, tool results keyed by call id, and creates
and messages that carry an ``Idempotency-Key``) is retried, and only while the coordinator is
unavailable (its replica died or restarts), within ``coordinator_retry_s``; then 503. Any other failure
is answered at once (500 for the unexpected), and no request ever gets a stack trace.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import Depends, FastAPI, Header, Query, Request, Security
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import APIKeyHeader, HTTPBearer
from ray.exceptions import RayActorError
from ray.serve.exceptions import DeploymentUnavailableError
from starlette.exceptions import HTTPException
from starlette.routing import Match

from ..core.api import (
    CreateSession,
    ErrorDetail,
    Offer,
    SessionSummary,
    SessionTrajectory,
    ToolResult,
    UserMessage,
)
from ..core.config import GatewayConfig
from ..core.errors import (
    OPENAI_ERROR,
    RESPONSES,
    ApiError,
    Forbidden,
    Overloaded,
    ServiceUnavailable,
    Unauthorized,
    documented,
    unwrap,
)
from ..core.handles import NoReplica, taken
from ..log.records import SessionEvent
from ..responses.routes import error_response, mount_responses
from ..responses.translate import Terms
from ..sessions.shards import ShardRouter
from ..sessions.turns import ApprovalPost
from . import limits
from .event_hub import EventHub
from .limits import BodyCaps, BodyLimit, TokenBucket, fit_bodies, gateway_caps
from .models_route import ModelTerms, mount_models

log = logging.getLogger(__name__)
# A replica's keys (``limits.py``), where app.py and the tests import them from.
api_keys, gateway_keys, operator_keys = limits.api_keys, limits.gateway_keys, limits.operator_keys
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
# Calls safe to repeat as they are:
IDEMPOTENT = {"events", "events_many", "trajectory", "stats", "usage", "cancel", "post_tool_result", "post_approval"}
IdempotencyKey = Header(None, alias="Idempotency-Key", min_length=1, max_length=200,
                        description="the same key (per API key) returns the first answer, never a second effect")
# The API key's two headers, for the schema only (``key_of`` reads them): either one authenticates.
BEARER = Security(HTTPBearer(auto_error=False, scheme_name="BearerKey", description="Authorization: Bearer <key>"))
API_KEY = Security(APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="ApiKeyHeader"))
KEYED = (401, 429, 500, 503)  # every keyed route's own error statuses; each route adds its others
SESSION = "$response.body#/session_id"
# From a session's summary to the routes that take its id and nothing a fuzzer must guess: tool results
# need a call id from a tool_call_pending event, so they are reached from the event stream, not linked.
LINKS = {name: {"operationId": op, "parameters": {"sid": SESSION}, "description": text} for name, op, text in (
    ("GetSession", "get_session", "its trajectory"), ("SessionEvents", "session_events", "its event stream"),
    ("PostMessage", "post_message", "the user's next message (client-user sessions)"),
    ("CancelSession", "cancel_session", "cancel it"))}


def answers(status: int, *errors: int) -> dict[int | str, dict[str, Any]]:
    """A session route's ``responses``: its answer (the session's summary, linked to the session's
    routes), the ``KEYED`` statuses and its own ``errors``."""
    return {status: {"model": SessionSummary, "links": LINKS}, **documented(*KEYED, *errors)}


def make_api(call: Call, cfg: GatewayConfig, keys: Callable[[], Mapping[str, str]],
             operators: Callable[[], frozenset[str]] | None = None, offer: Offer | None = None,
             terms: Terms | None = None, rates: Callable[[str], tuple[float | None, int | None]] | None = None,
             caps: BodyCaps | None = None, models: ModelTerms | None = None) -> FastAPI:
    """The FastAPI app over a coordinator reached through ``call``; ``keys()`` is read per request: each valid
    key and the tenant it acts for (``tenants.key_owners``).
    ``rates``: a named tenant's own request rate and burst (``TenantRules.rate``).
    Only ``operators()`` keys read ``/v1/stats`` (cluster-wide counts, shard nodes, and the ids of
    sessions the log could not restore, which may be any tenant's); ``None``: every key may. ``offer``:
    the create terms its schema publishes (sources, users, methods; ``Offer.of(app_config)``); ``terms``:
    the Responses API's (``Terms.of(app_config)``; without them, no ``/v1/responses`` routes). ``caps``: each
    route's body cap (``limits.body_caps(app_config)``; None: ``cfg``'s, for a verifier of unknown context
    window); ``models``: what ``/v1/models`` lists (``ModelTerms.of(app_config)``; None: the offer's methods
    and ``cfg``'s aliases, for every tenant)."""
    docs = {} if cfg.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="specagent-ray", version="0.1.0",
                  description="Agent sessions served with trajectory-level speculation (SpecAgent).", **docs)
    caps = caps or gateway_caps(cfg)
    app.add_middleware(BodyLimit, caps=caps)
    _publish(app, offer)

    bucket = TokenBucket(cfg.rate_per_s, cfg.burst)

    def key_of(request: Request) -> tuple[str, str]:
        """The caller's key and tenant, once checked (401) and within the tenant's rate (429)."""
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        owners = keys()
        matched = [k for k in owners if hmac.compare_digest(given.encode(), k.encode())]
        if not matched:
            raise Unauthorized()
        owner = owners[matched[0]]
        rate, burst = rates(owner) if rates else (None, None)
        wait = bucket.take(owner, rate, burst)
        if wait > 0:
            raise Overloaded(f"over this tenant's rate of {rate or cfg.rate_per_s:g} requests/s", max(1, round(wait + 0.5)))
        return matched[0], owner

    async def tenant(request: Request, _bearer: Any = BEARER, _key: Any = API_KEY) -> str:
        """The caller's tenant."""
        return key_of(request)[1]

    async def operator(request: Request, _bearer: Any = BEARER, _key: Any = API_KEY) -> None:
        """403 unless the caller's key is an operator's."""
        key = key_of(request)[0]
        if operators is not None and not any(hmac.compare_digest(key.encode(), k.encode()) for k in operators()):
            raise Forbidden("the cluster-wide stats are for operator keys (gateway.operator_keys_env)")

    async def coordinator(method: str, *args: Any, retry: bool | None = None, **kwargs: Any) -> Any:
        """Call the coordinator. A call safe to repeat waits out a restart within the configured patience."""
        retry = method in IDEMPOTENT if retry is None else retry
        delay, begun = 0.25, time.monotonic()
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
                remaining = cfg.coordinator_retry_s - (time.monotonic() - begun)
                if isinstance(err, NoReplica):  # it waited out the patience already, and nothing ran
                    raise Unavailable(f"coordinator unavailable: {err}; try again") from None
                if not retry or remaining <= 0:
                    raise Unavailable(f"coordinator unavailable ({type(err).__name__}); "
                                      + ("try again" if retry else "not retried: send an Idempotency-Key "
                                         "to make this call safe to repeat")) from None
                log.warning("coordinator call %s failed (%s); retrying", method, type(err).__name__)
                await asyncio.sleep(min(delay, remaining))
                delay = min(delay * 2, 5.0)

    hub = EventHub(coordinator, cfg.events_poll_s, cfg.events_wait_s)  # the event streams' shared polls

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        retry = isinstance(exc, Overloaded | ServiceUnavailable)
        headers = {"Retry-After": str(exc.retry_after_s)} if retry else None  # type: ignore[attr-defined]
        if isinstance(exc, Unauthorized):
            headers = {"WWW-Authenticate": "Bearer"}
        return error_response(request, exc.status, exc.message, headers, exc.param, exc.code)

    @app.exception_handler(Unavailable)
    async def unavailable(request: Request, exc: Unavailable) -> JSONResponse:
        return error_response(request, 503, str(exc), {"Retry-After": "5"})

    @app.exception_handler(Internal)
    async def internal(request: Request, exc: Internal) -> JSONResponse:
        return error_response(request, 500, "internal error (logged on the server)")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        """Starlette's own errors (404 no route, 405); a 405's ``Allow`` lists every method of the path."""
        if exc.status_code == 405:
            exc = HTTPException(405, exc.detail, {**(exc.headers or {}), "Allow": ", ".join(methods_at(app, request))})
        if request.url.path.startswith(RESPONSES):  # OpenAI's error shape (a body that is not JSON, a 405)
            return error_response(request, exc.status_code, str(exc.detail), exc.headers)
        return await http_exception_handler(request, exc)

    Tenant = Depends(tenant)

    @app.get("/healthz", operation_id="healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/sessions", status_code=201, operation_id="create_session", response_model=None,
              responses=answers(201, 400, 403, 409, 413))
    async def create_session(body: CreateSession, who: str = Tenant,
                             idempotency_key: str | None = IdempotencyKey) -> dict[str, Any]:
        """Start a session; its events stream from ``/v1/sessions/{id}/events``. With an
        ``Idempotency-Key``, a repeated create answers with the first session instead of starting another."""
        return await coordinator("create", body, owner=who, idempotency_key=idempotency_key,
                                 retry=idempotency_key is not None)

    @app.post("/v1/sessions/{sid}/messages", status_code=202, operation_id="post_message", response_model=None,
              responses=answers(202, 400, 404, 409, 413))
    async def post_message(sid: str, body: UserMessage, who: str = Tenant,
                           idempotency_key: str | None = IdempotencyKey) -> dict[str, Any]:
        """The user's next message (client-user sessions); an ``Idempotency-Key`` makes a repeat harmless."""
        return await coordinator("post_message", sid, body, owner=who, idempotency_key=idempotency_key,
                                 retry=idempotency_key is not None)

    @app.post("/v1/sessions/{sid}/tool_results", status_code=202, operation_id="post_tool_result",
              response_model=None, responses=answers(202, 400, 404, 409, 413))
    async def post_tool_result(sid: str, body: ToolResult, who: str = Tenant) -> dict[str, Any]:
        """The result of a pending client-side tool call (see ``tool_call_pending`` events)."""
        return await coordinator("post_tool_result", sid, body, owner=who)

    @app.post("/v1/sessions/{sid}/approvals", status_code=202, operation_id="post_approval", response_model=None,
              responses=answers(202, 400, 404, 409, 413))
    async def post_approval(sid: str, body: ApprovalPost, who: str = Tenant) -> dict[str, Any]:
        """The answer to an ``approval_request`` event (sessions created with ``approval``): approved, the
        verified write runs, once; denied, it never does. The same answer posted again changes nothing."""
        return await coordinator("post_approval", sid, body, owner=who)

    @app.get("/v1/sessions/{sid}/events", response_class=EventStream, operation_id="session_events",
             responses={200: {"model": SessionEvent, "description": "a stream of session events"},
                        **documented(*KEYED, 404)})
    async def events(sid: str, after: int = Query(0, ge=0, description="the seq to start after"),
                     who: str = Tenant) -> StreamingResponse:
        """Server-sent events, from ``after`` on: drafted, staged, accepted, rejected, tool_result, commit,
        fused_repair, strong_repair, agent_message, tool_call_pending, ..., final. Each has ``id: seq``."""
        first = await coordinator("events", sid, after, 0.0, owner=who)  # 404 before the stream starts

        async def stream():
            out = first
            for e in out["events"]:
                yield sse(e)
            if out["done"]:
                return
            with hub.follow(sid, after + len(out["events"]), who) as follower:  # one poll for every stream
                while not out["done"]:
                    if not out["events"]:
                        yield ": keep-alive\n\n"
                    out = await follower.next(cfg.events_wait_s)
                    for e in out["events"]:
                        yield sse(e)

        return EventStream(stream(), headers={"Cache-Control": "no-cache"})

    @app.get("/v1/sessions/{sid}", operation_id="get_session", response_model=None,
             responses={200: {"model": SessionTrajectory, "links": LINKS}, **documented(*KEYED, 404)})
    async def trajectory(sid: str, grade: bool = False, who: str = Tenant) -> dict[str, Any]:
        """The committed trajectory, token usage, the resource report and (``grade=true``) tau2's reward."""
        return await coordinator("trajectory", sid, grade, owner=who)

    @app.delete("/v1/sessions/{sid}", operation_id="cancel_session", response_model=None,
                responses=answers(200, 404))
    async def cancel(sid: str, who: str = Tenant) -> dict[str, Any]:
        """Cancel the session; it stays readable (``GET``) as ``cancelled``. A finished one is left as it is."""
        return await coordinator("cancel", sid, owner=who)

    @app.get("/v1/stats", dependencies=[Depends(operator)], operation_id="stats", responses=documented(*KEYED, 403))
    async def stats() -> dict[str, Any]:
        """Sessions by status, verifier batch sizes, coordinator overhead per committed step."""
        return await coordinator("stats")

    @app.get("/v1/usage", dependencies=[Depends(operator)], operation_id="usage", responses=documented(*KEYED, 403))
    async def usage(tenant: str | None = Query(None, max_length=64, description="one tenant (a name, or key-<hash>)"),
                    since: str | None = Query(None, pattern=r"^\d{4}-\d{2}-\d{2}$", description="first day, YYYY-MM-DD (UTC)")
                    ) -> dict[str, Any]:
        """Usage by tenant and day, from the session log: tokens by role, strong calls, GPU-seconds and strong
        HBM (MEASURED by the GPU meter where it ran, else ESTIMATED: each figure says which), sessions created
        and ended by status (``serve/sessions/usage.py``)."""
        return {"tenants": await coordinator("usage", tenant, since), "label": "GPU-s and HBM measured or "
                "estimated, as each figure's source says; tokens as the engines reported them (simulated "
                "engines: the token model's)"}

    methods = offer.methods if offer else terms.methods if terms else ()
    mount_models(app, Tenant, models or ModelTerms(methods, dict(cfg.model_aliases)))
    if terms is not None:
        mount_responses(app, coordinator, Tenant, IdempotencyKey, cfg, terms)
    _fit(app, caps)
    return app


def sse(event: dict[str, Any]) -> str:
    """One session event as a server-sent event: its seq is the id a client resumes after."""
    return f"id: {event['seq']}\nevent: {event['t']}\ndata: {json.dumps(event, default=str)}\n\n"


def methods_at(app: FastAPI, request: Request) -> list[str]:
    """Every method some route of ``app`` takes at the request's path."""
    scope = {**request.scope, "type": "http"}
    return sorted({m for route in app.router.routes if getattr(route, "methods", None)
                   and route.matches(scope)[0] is not Match.NONE for m in route.methods})  # type: ignore[attr-defined]


def event_schema(record_ref: str) -> dict[str, Any]:
    """One server-sent event (OpenAPI 3.2's ``itemSchema``, as FastAPI writes it): its ``data`` is a
    record (``record_ref``) as JSON, ``event`` the record's kind, ``id`` its seq."""
    return {"type": "object", "required": ["data", "event", "id"], "properties": {
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": {"$ref": record_ref}},
        "event": {"type": "string", "description": "the record's kind (its t)"},
        "id": {"type": "string", "description": "the record's seq: resume with ?after=<id + 1>"},
        "retry": {"type": "integer", "minimum": 0}}}


def _publish(app: FastAPI, offer: Offer | None) -> None:
    """Make ``app.openapi()`` FastAPI's schema plus the error bodies, the event stream's items and this
    server's create terms."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = default()
            stream = spec["paths"]["/v1/sessions/{sid}/events"]["get"]["responses"]["200"]["content"]
            stream["text/event-stream"] = {"itemSchema": event_schema(stream["text/event-stream"]["schema"]["$ref"])}
            schemas = spec["components"]["schemas"]
            schemas["ErrorDetail"], schemas["OpenAIError"] = ErrorDetail.model_json_schema(), OPENAI_ERROR
            if offer is not None:
                schemas["CreateSession"] = offer.create_schema(schemas["CreateSession"])
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _fit(app: FastAPI, caps: BodyCaps) -> None:
    """Make ``app.openapi()`` bound no string in a route's body beyond that route's cap (which counts
    bytes: a body within every ``maxLength`` can still be too large, 413). Last, over every route's schema."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        spec = default()
        fit_bodies(spec, caps)
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


# The served gateway's replica state. Module-level (pickled by reference), so the routes built at
# composition time and the replica's constructor see the same object in the replica's process.
_SERVED: dict[str, Any] = {"keys": {}}


def serve_with(coordinators: list[Any], keys: Mapping[str, str], operators: frozenset[str] = frozenset(),
               patience_s: float = 120.0, meter: Any = None) -> None:
    """The replica's coordinator shards (deployment handles), its keys with their tenants (operator keys
    among them) and the operator keys. A call that no
    coordinator replica takes within ``patience_s`` (the gateway's ``coordinator_retry_s``) fails as
    unavailable instead of waiting in Serve's queue for a replica that may never start."""
    async def call_shard(i: int, method: str, *args: Any, **kwargs: Any) -> Any:
        return await taken(getattr(coordinators[i], method).remote(*args, **kwargs), patience_s)

    async def call_meter(method: str, *args: Any) -> Any:  # the GPU meter, if the profile runs one
        return await taken(getattr(meter, method).remote(*args), patience_s)

    router = ShardRouter(call_shard, len(coordinators), call_meter if meter is not None else None)
    _SERVED["router"], _SERVED["keys"] = router, dict(keys)
    _SERVED["operators"] = operators


async def served_call(method: str, *args: Any, **kwargs: Any) -> Any:
    return await _SERVED["router"](method, *args, **kwargs)


def served_keys() -> Mapping[str, str]:
    return _SERVED["keys"]


def served_operators() -> frozenset[str]:
    return _SERVED.get("operators", frozenset())
