"""Waiting out the infrastructure: a session log that cannot confirm its lease and a tool host that does
not answer are pauses of a step, never its observation.

Guarantees:
- a write's intent is stored before the write runs; while this coordinator is not fenced, the intent
  waits for the log up to ``intent_wait_s`` (a starved lease renewal, a slow or briefly unreachable
  store), then the step is ``Unavailable``; a fenced coordinator is ``Unavailable`` at once (its
  successor finishes the write under the same key);
- a tool host call that fails for the infrastructure's reason (its replica dying or restarting, a lost
  connection, its MCP server reconnecting, a store error of its idempotency records: ``AWAY``) is tried
  again with backoff up to ``tool_retry_s``, then the step is ``Unavailable``; a write carries its key
  every time, so the tool host runs it at most once. A call the tool host refuses for good (a stale lease
  epoch, a key reused for another call, an unknown source) is ``Unavailable`` at once. Any other
  exception is the tool's own (a tool that refuses its arguments): it is raised as it is, and the
  protocol makes it the step's error observation, as a tool's answer;
- ``Unavailable`` passes the protocol's tool error handler: the session ends ``failed`` with the reason,
  and no observation ever carries it;
- a session's ``final`` record waits for the log the same way (``end_stored``): only a session whose end
  is stored has ended. One whose coordinator was fenced (or crashed) is resumed by the next coordinator,
  so its tool environments must outlive this one; one whose end the log did not take within the patience
  may be, so they are left open too (at worst an environment stays on the tool host until it restarts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ray.exceptions import RayActorError
from ray.serve.exceptions import DeploymentUnavailableError

from ...protocol.types import Unavailable
from ...storage.base import StoreError
from ..core.errors import ServiceUnavailable, unwrap
from ..log.idempotency import KeyReused, StaleEpoch
from ..toolhost.tool_host import UnknownSource

log = logging.getLogger(__name__)
T = TypeVar("T")
FOR_GOOD = (StaleEpoch, KeyReused, UnknownSource)  # retrying cannot help: the answer would be the same
# the tool host (or what it stands on) is not there now: a replica dying or restarting, a lost connection,
# a store error; an MCP server reconnecting is ``tools.mcp.McpUnavailable`` (``_away``)
AWAY = (RayActorError, DeploymentUnavailableError, ConnectionError, TimeoutError, StoreError, ServiceUnavailable)


async def intent_stored(durable: Callable[[], Awaitable[None]], fenced: Callable[[], bool],
                        clock: Callable[[], float], patience_s: float,
                        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Return once the intents appended so far are stored (see the module's guarantees)."""
    await _stored("write's intent", durable, fenced, clock, patience_s, sleep)


async def end_stored(durable: Callable[[], Awaitable[None]], fenced: Callable[[], bool],
                     clock: Callable[[], float], patience_s: float,
                     sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> bool:
    """Whether a session's ``final`` record (appended before this call) got stored, waiting as an intent
    does; False at once when fenced, after ``patience_s`` otherwise (see the module's guarantees)."""
    try:
        await _stored("session's end", durable, fenced, clock, patience_s, sleep)
    except Unavailable as exc:
        log.warning("%s: the session is left to the next coordinator", exc)
        return False
    return True


async def _stored(what: str, durable: Callable[[], Awaitable[None]], fenced: Callable[[], bool],
                  clock: Callable[[], float], patience_s: float, sleep: Callable[[float], Awaitable[None]]) -> None:
    deadline = clock() + patience_s
    while True:
        try:
            return await durable()
        except ServiceUnavailable as exc:
            if fenced():
                raise Unavailable(f"this coordinator was fenced before the {what} was stored: {exc}") from None
            if clock() >= deadline:
                raise Unavailable(f"the {what} was not stored within {patience_s:g} s: {exc}") from None
            log.warning("a %s waits for the session log (%s)", what, exc)
            await sleep(0.5)


async def tool_host_call(call: Callable[[], Awaitable[T]], clock: Callable[[], float], patience_s: float,
                         sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> T:
    """``call()``'s answer, trying again while the tool host raises (see the module's guarantees)."""
    deadline, pause = clock() + patience_s, 0.1
    while True:
        try:
            return await call()
        except Exception as raised:  # noqa: BLE001 - sorted below: the infrastructure's, or the tool's own
            exc = unwrap(raised)
            if isinstance(exc, FOR_GOOD):
                raise Unavailable(f"the tool host refused the call: {type(exc).__name__}: {exc}") from None
            if not _away(exc):
                raise exc from None  # the tool's own failure: the protocol makes it the step's observation
            if clock() >= deadline:
                raise Unavailable(f"the tool host did not answer within {patience_s:g} s: "
                                  f"{type(exc).__name__}: {exc}") from None
            log.warning("tool host call failed (%s: %s); trying again in %.1f s", type(exc).__name__, exc, pause)
            await sleep(pause)
            pause = min(pause * 2, 2.0)


def _away(exc: BaseException) -> bool:
    """Whether ``exc`` says the tool host, or what it stands on, is not there now (``AWAY``)."""
    from ...tools.mcp import McpUnavailable

    return isinstance(exc, (*AWAY, McpUnavailable))
