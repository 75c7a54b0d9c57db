"""A real HTTP server for an ASGI app on 127.0.0.1, in a background thread (for tests and local tools)."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

# How long an idle keep-alive connection stays open: Ray Serve's proxy default (90 s). uvicorn's own default,
# 5 s, equals httpx's pool expiry, so a client could reuse a connection the server was closing that instant
# and get httpx.ReadError (a race seen in CI under load). The server must keep connections longer than
# any client pools them.
KEEP_ALIVE_S = 90


@contextmanager
def serve_in_thread(app: Any, start_timeout_s: float = 20.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port, keeping idle connections ``KEEP_ALIVE_S``;
    yields ``http://127.0.0.1:PORT``."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1,
                                           timeout_keep_alive=KEEP_ALIVE_S))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test HTTP server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def session_records(url: str, sid: str, key: str = "dev-key") -> list[dict[str, Any]]:
    """A session's records so far, through the sessions API: as many of its event stream as its summary
    counts (the stream itself stays open for more)."""
    import httpx

    total = httpx.get(f"{url}/v1/sessions/{sid}", headers={"X-API-Key": key}, timeout=30).json()["events"]
    out: list[dict[str, Any]] = []
    with httpx.stream("GET", f"{url}/v1/sessions/{sid}/events", headers={"X-API-Key": key}, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
            if len(out) >= total:
                break
    return out
