"""The gateway's call to the coordinator: errors mapped, a restart waited out for calls safe to repeat.

Retries: only a call that is safe to repeat (reads, cancel, tool results keyed by call id, and creates
and messages that carry an ``Idempotency-Key``) is retried, and only while the coordinator is
unavailable (its replica died or restarts), within ``coordinator_retry_s``; then 503 (``Unavailable``).
A refusal of the coordinator's (``ApiError``) is raised as it is; any other failure is logged and
raised as ``Internal`` (500, no details)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ray.exceptions import RayActorError
from ray.serve.exceptions import DeploymentUnavailableError

from ..core.config import GatewayConfig
from ..core.errors import ApiError, unwrap
from ..core.handles import NoReplica

log = logging.getLogger(__name__)
Call = Callable[..., Awaitable[Any]]  # (coordinator method name, *args, **kwargs) -> result
# What a call to a coordinator that is gone raises (its replica died, or Serve has none to route to):
# the call may be tried again. Ray's handles raise RayActorError (ActorDiedError, ActorUnavailableError).
UNAVAILABLE = (RayActorError, DeploymentUnavailableError, ConnectionError)
# Calls safe to repeat as they are:
IDEMPOTENT = {"events", "events_many", "trajectory", "stats", "usage", "cancel", "post_tool_result", "post_approval"}


class Unavailable(Exception):
    """The coordinator did not answer within the gateway's patience."""


class Internal(Exception):
    """The coordinator failed in a way no client can fix; answered 500 without details."""


def retrying(call: Call, cfg: GatewayConfig) -> Call:
    """``call``, its errors mapped and, for a call safe to repeat (``retry``; by default the
    ``IDEMPOTENT`` methods), a restart waited out within ``cfg.coordinator_retry_s``."""

    async def coordinator(method: str, *args: Any, retry: bool | None = None, **kwargs: Any) -> Any:
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

    return coordinator
