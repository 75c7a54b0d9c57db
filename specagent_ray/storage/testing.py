"""A real S3-compatible HTTP endpoint on 127.0.0.1 for tests and demos: moto's server in a thread.

Needs the ``dev`` extra (moto[server]). Credentials are not checked; set dummy ones, e.g. ``DUMMY_AWS_ENV``.
"""

from __future__ import annotations

import logging
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Self

from ..ports import free_port

DUMMY_AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "NO_PROXY": "127.0.0.1,localhost"}


@contextmanager
def isolated_aws_env(empty_dir: Path) -> Iterator[None]:
    """Dummy credentials, and none of the developer's ~/.aws, profile, session or endpoint settings;
    moto's per-request logging silenced. Restores the environment on exit."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        for name, value in DUMMY_AWS_ENV.items():
            mp.setenv(name, value)
        mp.setenv("AWS_CONFIG_FILE", str(empty_dir / "config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty_dir / "credentials"))
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        yield


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
