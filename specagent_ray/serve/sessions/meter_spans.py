"""Each engine call of a shard's sessions, sent to the GPU meter as a span (``telemetry/fleet.py``).

A call's span is its time on this host's wall clock, from asked to answered (so it includes its batch
window, a few ms), its session's tenant and id, and its tokens processed (prompt tokens not served from
cache, plus decoded ones). The sink buffers them and sends each role's once every ``push_s``: one call per
role and push whatever the step rate, so the step path pays one tuple per model call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from ...protocol.interfaces import CallRecord

log = logging.getLogger(__name__)
ANSWER_S = 5.0  # the longest a push or a report waits for the meter
MAX_HELD = 200_000  # spans held while the meter does not answer; the oldest are dropped past it (logged)


def processed(call: CallRecord) -> int:
    u = call.usage
    return max(u.prompt_tokens - u.cached_prompt_tokens, 0) + u.decode_tokens


class SpanSink:
    """Guarantees: every call recorded is sent once, in a push, unless more than ``MAX_HELD`` wait while
    the meter is down (then the oldest are dropped and counted in ``dropped``); a failed push keeps its spans
    for the next one and never raises into a session."""

    def __init__(self, send: Callable[[str, list[tuple]], Awaitable[Any]], push_s: float,
                 wall: Callable[[], float] = time.time):
        self.send, self.push_s, self.wall = send, push_s, wall
        self.held: dict[str, list[tuple]] = defaultdict(list)
        self.sent = self.dropped = 0

    def on_call(self, owner: str, session: str) -> Callable[[CallRecord], None]:
        """The ledger hook of one session (``Ledger.on_record``)."""
        def record(call: CallRecord) -> None:
            end = self.wall()
            self.held[call.role].append((owner, session, end - call.wall_s, end, processed(call)))
        return record

    async def push(self) -> None:
        for role in list(self.held):
            rows, self.held[role] = self.held[role], []
            if not rows:
                continue
            try:
                async with asyncio.timeout(ANSWER_S):  # a meter that is restarting is not waited for
                    await self.send(role, rows)
                self.sent += len(rows)
            except Exception as exc:  # noqa: BLE001 - the meter may be restarting: keep them for the next push
                log.warning("GPU meter did not take %d spans (%s); kept for the next push", len(rows), exc)
                self.held[role] = rows + self.held[role]
                over = len(self.held[role]) - MAX_HELD
                if over > 0:
                    del self.held[role][:over]
                    self.dropped += over

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.push_s)
            await self.push()


class MeterLink:
    """A coordinator shard's link to the GPU meter: its span sink, and each session's measured share."""

    def __init__(self, meter: Any, push_s: float, wall: Callable[[], float] = time.time):
        self.meter = meter
        self.sink = SpanSink(meter.spans, push_s, wall)
        self.task: asyncio.Task | None = None

    def hook(self, owner: str, session: str) -> Callable[[CallRecord], None]:
        """A session's ledger hook; the first one starts the pushes (on the coordinator's event loop)."""
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.sink.run())
        return self.sink.on_call(owner, session)

    async def measured(self, session: str) -> dict[str, Any] | None:
        """The session's MEASURED share by role (``telemetry.attribution.Attributed``); None if the meter
        does not answer (the report is then ESTIMATED, as without a meter)."""
        try:
            async with asyncio.timeout(ANSWER_S):  # a report never waits on a restarting meter
                return await self.meter.session(session)
        except Exception as exc:  # noqa: BLE001 - a report without the meter is still a report
            log.warning("GPU meter did not answer for session %s (%s): its report is estimated", session, exc)
            return None
