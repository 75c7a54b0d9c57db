"""The HTTP API (FastAPI): the gateway's app, its keys, tenants, limits and error answers, and the routes
of each API mounted on it: the sessions API (``sessions_api.py``), ``/v1/models`` and the agent wires
(the Responses API, ``responses/routes.py``), these over one ``agents.AgentService``. Every route reaches
the coordinator through the typed ``agents.port.CoordinatorPort`` over ``calls.retrying``.

Every route but ``/healthz`` needs an API key (``Authorization: Bearer <key>`` or ``X-API-Key``);
without a valid one the answer is 401. A key is a tenant: its sessions are its own (another key gets
404 for them), and its requests share a token bucket (429 with Retry-After past ``rate_per_s``). Bodies
are validated by the pydantic models in ``api.py`` (422 names the field), a body over its route's cap gets
413 (``limits.BodyCaps``), coordinator refusals map to their own status (400, 403, 404, 409, 429 with
Retry-After). ``GET /v1/models`` lists the model names a key may send (``models_route.py``).

The OpenAPI schema documents every status a route answers (``errors.WHEN``) with its body and headers,
this server's own create terms (``api.Offer``), and links from a session's summary to its routes; a
method a path does not take gets 405 with ``Allow`` listing exactly the methods it does.

Retries (``calls.py``): only a call that is safe to repeat is retried, and only while the coordinator is
unavailable, within ``coordinator_retry_s``; then 503. Any other failure is answered at once (500 for
the unexpected), and no request ever gets a stack trace.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Depends, FastAPI, Header, Request, Security
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader, HTTPBearer
from starlette.exceptions import HTTPException
from starlette.routing import Match

from ..agents.port import CoordinatorPort
from ..agents.service import AgentService
from ..agents.terms import Terms
from ..chat.routes import mount_chat
from ..core.api import ErrorDetail, Offer
from ..core.config import GatewayConfig
from ..core.errors import (
    OPENAI_ERROR,
    RESPONSES,
    ApiError,
    Forbidden,
    Overloaded,
    ServiceUnavailable,
    Unauthorized,
)
from ..core.handles import taken
from ..messages.routes import mount_messages
from ..responses.routes import error_response, mount_responses
from ..sessions.shards import ShardRouter
from . import limits
from .calls import Call, Internal, Unavailable, retrying
from .event_hub import EventHub
from .limits import BodyCaps, BodyLimit, TokenBucket, fit_bodies, gateway_caps
from .models_route import ModelTerms, mount_models
from .sessions_api import mount_sessions

# A replica's keys (``limits.py``), where app.py and the tests import them from.
api_keys, gateway_keys, operator_keys = limits.api_keys, limits.gateway_keys, limits.operator_keys
__all__ = ["Call", "Internal", "Unavailable", "make_api", "serve_with"]

IdempotencyKey = Header(None, alias="Idempotency-Key", min_length=1, max_length=200,
                        description="the same key (per API key) returns the first answer, never a second effect")
# The API key's two headers, for the schema only (``key_of`` reads them): either one authenticates.
BEARER = Security(HTTPBearer(auto_error=False, scheme_name="BearerKey", description="Authorization: Bearer <key>"))
API_KEY = Security(APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="ApiKeyHeader"))


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
    tenant, operator = _callers(cfg, keys, operators, rates)
    _answer_errors(app)
    Tenant = Depends(tenant)

    @app.get("/healthz", operation_id="healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    port = CoordinatorPort(retrying(call, cfg))
    hub = EventHub(port.call, cfg.events_poll_s, cfg.events_wait_s)  # the event streams' shared polls
    mount_sessions(app, port, hub, cfg, Tenant, IdempotencyKey, Depends(operator))
    methods = offer.methods if offer else terms.methods if terms else ()
    mount_models(app, Tenant, models or ModelTerms(methods, dict(cfg.model_aliases)))
    if terms is not None:  # the agent wires, over one service (docs/architecture.md, "A request's path")
        service = AgentService(port, cfg, terms)
        mount_responses(app, service, Tenant, IdempotencyKey)
        mount_chat(app, service, Tenant, IdempotencyKey)  # stateless: the session binder finds the session
        mount_messages(app, service, Tenant, IdempotencyKey)
    _fit(app, caps)
    return app


def _callers(cfg: GatewayConfig, keys: Callable[[], Mapping[str, str]],
             operators: Callable[[], frozenset[str]] | None,
             rates: Callable[[str], tuple[float | None, int | None]] | None) -> tuple[Callable, Callable]:
    """The gateway's two dependencies on the caller (``make_api``'s arguments): its tenant, and a check
    that its key is an operator's. Both check the key (401) and take from the tenant's rate (429)."""
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

    return tenant, operator


def _answer_errors(app: FastAPI) -> None:
    """The app's error answers, each in the shape of its route's API (``error_response``): the
    coordinator's refusals with their status (429 and 503 with Retry-After, 401 with WWW-Authenticate),
    503 for an unavailable coordinator, 500 without details for the unexpected, Starlette's own errors."""

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
