"""A real S3-compatible HTTP endpoint on 127.0.0.1 for tests and demos: moto's server in a thread.

Needs the ``dev`` extra (moto[server]). Credentials are not checked; set dummy ones, e.g. ``DUMMY_AWS_ENV``.
"""

from __future__ import annotations

import socket
from typing import Self

DUMMY_AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "NO_PROXY": "127.0.0.1,localhost"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalS3:
    """moto's S3 server on ``127.0.0.1:port``, restartable on the same port.

    Guarantees: after ``stop()`` the port is closed, so new requests fail with "connection refused" until
    ``start()``; moto keeps buckets, objects and incomplete multipart uploads in this process, so they
    survive a restart. (moto's server closes each connection after one response, so no pooled connection
    slips past a stop.)
    """

    def __init__(self, port: int = 0) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        if self.running:
            return
        # moto's start() waits forever if its thread cannot bind, so find out here first.
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", self.port))
            except OSError as exc:
                raise RuntimeError(f"cannot start moto on 127.0.0.1:{self.port}: {exc}") from exc
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()  # werkzeug closes the listening socket when serve_forever ends
            self._server = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
