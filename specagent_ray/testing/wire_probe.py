"""Two deployments that pass a payload between replicas the way the application's own replica-to-replica
calls do (``handles.by_grpc`` with ``app.REPLICA``'s options), for the test that a message over gRPC's
default limit (4 MiB) still crosses: a batch of long histories or a long trajectory can be that large."""

from __future__ import annotations

from typing import Any

from ray import serve

from ..serve.app import QUIET, REPLICA
from ..serve.core.handles import by_grpc


@serve.deployment(name="WireEcho", ray_actor_options=REPLICA, logging_config=QUIET)
class WireEcho:
    def echo(self, data: bytes) -> bytes:
        return data


@serve.deployment(name="WireCaller", ray_actor_options=REPLICA, logging_config=QUIET)
class WireCaller:
    def __init__(self, echo: Any):
        self.echo = by_grpc(echo)

    async def round_trip(self, size: int) -> int:
        """Sends ``size`` bytes to the echo replica and returns how many came back."""
        return len(await self.echo.echo.remote(b"x" * size))


def probe_app() -> serve.Application:
    return WireCaller.bind(WireEcho.bind())
