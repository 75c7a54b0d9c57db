"""The gateway's limits on what a client sends: its key (the replica's keys and their tenants), its
request rate (a token bucket per tenant) and its body size, per route (413 before any byte is parsed).

Body caps: a route that carries a conversation (``CONVERSATION_ROUTES``: a replayed history grows with
every turn) takes what the verifier can read, ``gateway.max_body_bytes`` or, unset, its context window
times ``body_bytes_per_token``, never under ``body_floor_bytes``; every other route carries no
conversation and takes ``small_body_bytes``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.api import fit_strings
from ..core.config import AppConfig, GatewayConfig, OpenAIEngines
from ..core.errors import error_body
from ..core.tenants import key_owners

# The routes that carry a conversation, and everything below them: the Responses and Conversations APIs,
# and the Chat Completions and Messages wires (reserved: their routes are still to come).
CONVERSATION_ROUTES = ("/v1/responses", "/v1/conversations", "/v1/chat/completions", "/v1/messages")
SMALL = "gateway.small_body_bytes"


def carries_conversation(path: str) -> bool:
    """Whether ``path`` is one of ``CONVERSATION_ROUTES`` or below one (``/v1/responsesX`` is not)."""
    return any(path == route or path.startswith(route + "/") for route in CONVERSATION_ROUTES)


@dataclass(frozen=True)
class BodyCaps:
    """The body cap of each route: ``conversation`` bytes for those that carry one, ``small`` for every
    other. ``source``: how the conversation cap was set, as each 413 names it."""

    conversation: int
    small: int
    source: str

    def of(self, path: str) -> tuple[int, str]:
        """The cap of the route at ``path`` and the setting that gives it."""
        return (self.conversation, self.source) if carries_conversation(path) else (self.small, SMALL)


def body_caps(cfg: AppConfig) -> BodyCaps:
    """The caps of a server with config ``cfg``: the conversation cap derives from the verifier's context
    window where the engines are OpenAI endpoints that state one (``Endpoint.context_tokens``)."""
    verifier = cfg.engines.verifier if isinstance(cfg.engines, OpenAIEngines) else None
    return gateway_caps(cfg.gateway, verifier.context_tokens if verifier else None)


def gateway_caps(gw: GatewayConfig, context_tokens: int | None = None) -> BodyCaps:
    """The caps ``gw`` sets for a verifier whose context window is ``context_tokens`` (None: unknown)."""
    if gw.max_body_bytes is not None:
        return BodyCaps(gw.max_body_bytes, gw.small_body_bytes, "gateway.max_body_bytes")
    unset = "gateway.max_body_bytes; unset, so "
    if context_tokens is None:
        return BodyCaps(gw.body_floor_bytes, gw.small_body_bytes, unset + "gateway.body_floor_bytes: the engines state no "
                        "verifier context window (engines.verifier.context_tokens)")
    window = f"{context_tokens} tokens x gateway.body_bytes_per_token {gw.body_bytes_per_token}"
    derived = context_tokens * gw.body_bytes_per_token
    if derived <= gw.body_floor_bytes:
        return BodyCaps(gw.body_floor_bytes, gw.small_body_bytes, unset + "gateway.body_floor_bytes, above what "
                        f"the verifier's context window gives ({window} = {derived})")
    return BodyCaps(derived, gw.small_body_bytes, unset + f"derived from the verifier's context window: {window}")


def fit_bodies(spec: dict[str, Any], caps: BodyCaps) -> None:
    """Lower every string bound in the request bodies of ``spec`` (an OpenAPI document) to the cap of the
    route that takes them: no longer string fits in a body it accepts. A component that bodies of several
    routes use gets the least of their caps."""
    schemas = spec.get("components", {}).get("schemas", {})
    least: dict[str, int] = {}
    for path, operations in spec.get("paths", {}).items():
        cap = caps.of(path)[0]
        for operation in operations.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            for name in _components(body or {}, schemas, set()):
                least[name] = min(cap, least.get(name, cap))
            if body:
                fit_strings(body, cap)
    for name, cap in least.items():
        fit_strings(schemas[name], cap)


def _components(node: Any, schemas: dict[str, Any], seen: set[str]) -> set[str]:
    """The components ``node`` refers to, directly or through others (``seen``: those found so far)."""
    if isinstance(node, list):
        for item in node:
            _components(item, schemas, seen)
    elif isinstance(node, dict):
        ref = node.get("$ref")
        name = ref.rsplit("/", 1)[-1] if isinstance(ref, str) and ref.startswith("#/components/schemas/") else None
        if name in schemas and name not in seen:
            seen.add(name)
            _components(schemas[name], schemas, seen)
        for value in node.values():
            _components(value, schemas, seen)
    return seen


class TokenBucket:
    """Per-tenant request rate: ``burst`` requests at once, refilled at ``rate_per_s``."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate_per_s, burst, clock
        self._state: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, when)

    def take(self, tenant: str, rate: float | None = None, burst: int | None = None) -> float:
        """0 if the request may go now, else the seconds until it may; ``rate``, ``burst``: the tenant's own."""
        rate, burst = rate or self.rate, burst or self.burst
        now = self.clock()
        tokens, when = self._state.get(tenant, (float(burst), now))
        tokens = min(float(burst), tokens + (now - when) * rate)
        if tokens >= 1:
            self._state[tenant] = (tokens - 1, now)
            return 0.0
        self._state[tenant] = (tokens, now)
        return (1 - tokens) / rate


class BodyLimit:
    """ASGI middleware: a request body over its route's cap (``caps``) gets 413 naming the cap and its
    setting. A declared length over it is refused before any byte is read; a body of no declared length
    as soon as the bytes read pass it, whatever the app then does with the body it was reading."""

    def __init__(self, app: Any, caps: BodyCaps):
        self.app, self.caps = app, caps

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        limit, setting = self.caps.of(scope.get("path", ""))
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _too_large(limit, setting, send, scope)
        seen, started, refused = 0, False, False

        async def counted() -> dict:
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                # Answered here, not by the app: FastAPI turns an error raised while it reads a body into
                # a 400 "error parsing the body". What the app sends after this is dropped.
                if not started and not refused:
                    refused = True
                    await _too_large(limit, setting, send, scope)
                raise _TooLarge()
            return message

        async def sent(message: dict) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, sent)
        except _TooLarge:
            if not refused:  # the app had begun its answer before it read past the cap: cut the body off
                raise


class _TooLarge(Exception):
    pass


async def _too_large(limit: int, setting: str, send: Callable, scope: dict) -> None:
    message = f"request body over {limit} bytes, this route's limit ({setting})"
    body = json.dumps(error_body(scope.get("path", ""), 413, message, code="request_too_large")).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def operator_keys(cfg: GatewayConfig, env: dict[str, str]) -> frozenset[str]:
    """The keys that may read /v1/stats: ``operator_keys_env``'s, and the dev key of a local profile."""
    return _listed(env, cfg.operator_keys_env, cfg.dev_api_key)


def gateway_keys(app: Any, env: dict[str, str]) -> tuple[dict[str, str], frozenset[str]]:
    """A gateway replica's keys with the tenant each acts for, and its operator keys, from ``env``
    (``tenants.key_owners``). ValueError where no client could authenticate: no API key (neither
    ``api_keys_env`` nor a dev key), or, with named tenants, no tenant with a key."""
    keys, operators = api_keys(app.gateway, env), operator_keys(app.gateway, env)
    owners = key_owners(app.tenants, env, keys, operators)
    if app.tenants and not set(owners.values()) & set(app.tenants):
        raise ValueError("no tenant has a key: set each tenant's keys_env (comma-separated)")
    if not app.tenants and not keys:
        raise ValueError(f"no API keys: set {app.gateway.api_keys_env} (comma-separated) or gateway.dev_api_key")
    return owners, operators


def api_keys(cfg: GatewayConfig, env: dict[str, str]) -> frozenset[str]:
    return _listed(env, cfg.api_keys_env, cfg.dev_api_key)


def _listed(env: dict[str, str], variable: str, dev_key: str | None) -> frozenset[str]:
    """The comma-separated keys in ``variable``, and the dev key if there is one."""
    keys = {k.strip() for k in env.get(variable, "").split(",") if k.strip()}
    return frozenset(keys | {dev_key} if dev_key else keys)
