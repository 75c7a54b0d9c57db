"""The gateway's limits on what a client sends: its key's tenant, its request rate (a token bucket per
tenant) and its body size (413 before any byte is parsed)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ..core.errors import error_body


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
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before any of it is parsed."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _too_large(self.limit, send, scope)
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
            await _too_large(self.limit, send, scope)


class _TooLarge(Exception):
    pass


async def _too_large(limit: int, send: Callable, scope: dict) -> None:
    body = json.dumps(error_body(scope.get("path", ""), 413, f"request body over {limit} bytes")).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
