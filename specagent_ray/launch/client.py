"""A client of the gateway's HTTP API (httpx, with httpx-sse for the event stream).

Used by the main job, the tests and the load generator. Every non-2xx answer becomes one
``GatewayError`` carrying the status, the server's one-line detail and its Retry-After.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from httpx_sse import aconnect_sse


class GatewayError(Exception):
    def __init__(self, status: int, detail: str, retry_after: float | None = None):
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail, self.retry_after = status, detail, retry_after


class GatewayClient:
    def __init__(self, base_url: str, api_key: str, timeout_s: float = 60.0, max_connections: int = 1000):
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.http = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout_s, limits=limits,
                                      headers={"Authorization": f"Bearer {api_key}"})

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        response = await self.http.request(method, path, **kw)
        if response.status_code >= 400:
            raise gateway_error(response)
        return response.json()

    async def create(self, idempotency_key: str | None = None, **body: Any) -> dict[str, Any]:
        """Start a session. With ``idempotency_key``, repeating the call returns the first session."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self._call("POST", "/v1/sessions", json=body, headers=headers)

    async def create_when_admitted(self, body: dict[str, Any], keep_waiting: Callable[[], bool],
                                   on_throttled: Callable[[], None] = lambda: None) -> dict[str, Any]:
        """Create a session, waiting out 429s and 503s as the server's Retry-After says, for as long as
        ``keep_waiting()``; any other error (or one past that) is raised. Every try carries the same
        Idempotency-Key, so a retry after a 503 cannot start a second session."""
        key = uuid.uuid4().hex
        while True:
            try:
                return await self.create(idempotency_key=key, **body)
            except GatewayError as exc:
                if exc.status not in (429, 503) or not keep_waiting():
                    raise
                on_throttled()
                await asyncio.sleep(exc.retry_after or 1.0)

    async def post_message(self, sid: str, text: str, stop: bool = False,
                           idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self._call("POST", f"/v1/sessions/{sid}/messages", json={"text": text, "stop": stop},
                                headers=headers)

    async def post_tool_result(self, sid: str, call_id: str, content: str, error: bool = False) -> dict[str, Any]:
        return await self._call("POST", f"/v1/sessions/{sid}/tool_results",
                                json={"call_id": call_id, "content": content, "error": error})

    async def trajectory(self, sid: str, grade: bool = False) -> dict[str, Any]:
        return await self._call("GET", f"/v1/sessions/{sid}", params={"grade": str(grade).lower()})

    async def cancel(self, sid: str) -> dict[str, Any]:
        return await self._call("DELETE", f"/v1/sessions/{sid}")

    async def stats(self) -> dict[str, Any]:
        return await self._call("GET", "/v1/stats")

    async def usage(self, **query: str) -> dict[str, Any]:
        """``GET /v1/usage`` (operator keys): ``tenant=``, ``since=YYYY-MM-DD``."""
        return await self._call("GET", "/v1/usage", params=query)

    async def events(self, sid: str, after: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Every event from ``after`` on, until the session's ``final`` event. A dropped stream is
        resumed from the last event seen (a bounded number of times)."""
        for _ in range(100):
            async with aconnect_sse(self.http, "GET", f"/v1/sessions/{sid}/events", params={"after": after},
                                    timeout=httpx.Timeout(None, connect=30)) as source:
                if source.response.status_code >= 400:
                    await source.response.aread()
                    raise gateway_error(source.response)
                try:
                    async for sse in source.aiter_sse():
                        if not sse.data:
                            continue  # a keep-alive comment
                        event = json.loads(sse.data)
                        after = event["seq"] + 1
                        yield event
                        if event["t"] == "final":
                            return
                except (httpx.RemoteProtocolError, httpx.ReadError):
                    pass  # the gateway or coordinator restarted mid-stream: resume from ``after``
        raise GatewayError(503, f"event stream of session {sid} kept dropping before its final event")


def gateway_error(response: httpx.Response) -> GatewayError:
    """An error answer of the gateway as ``GatewayError``: its status, one-line detail and Retry-After."""
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    if not isinstance(detail, str):
        detail = json.dumps(detail)[:500]
    retry = response.headers.get("retry-after")
    return GatewayError(response.status_code, detail, float(retry) if retry else None)
