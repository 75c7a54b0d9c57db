"""The loopback test server keeps an idle connection open longer than an HTTP client pools it."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from specagent_ray.testing.http import serve_in_thread

pytestmark = pytest.mark.slow  # it waits out httpx's pool expiry on the real clock: uvicorn's timer


async def ok(scope, receive, send) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def ask(sock: socket.socket) -> bytes:
    sock.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
    return sock.recv(4096)


def test_a_connection_idle_past_the_clients_pool_expiry_still_answers():
    with serve_in_thread(ok) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            assert ask(sock).startswith(b"HTTP/1.1 200")
            time.sleep(httpx.Limits().keepalive_expiry + 0.5)  # a pooled httpx client may still reuse it
            assert ask(sock).startswith(b"HTTP/1.1 200")  # uvicorn's default 5 s closed it: b""
