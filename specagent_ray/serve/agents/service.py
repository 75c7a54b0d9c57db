"""The agent service: what every wire (Responses, Chat Completions, Messages) does with a session, once
its request is translated. Wire-neutral: it takes the core's bodies (``CreateSession``, ``TurnPost``)
and answers neutral items and response snapshots (``readback.py``); each wire translates them.

Guarantees:
- a turn is answered from the session log's published records only (``follow``), so a resumed stream
  or a retried poll sees the same items and the same event numbers (``numbered``);
- a session of another tenant is one that does not exist: reads answer 404, and the binder's lookups
  (``bind``) answer no match, never an error, and reveal nothing of it;
- nothing in a replayed history runs: ``bind`` only finds the session a history already is.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.api import CreateSession
from ..core.config import GatewayConfig
from ..core.errors import Conflict, NotFound
from ..log.records import TurnMeta
from .binder import Binding, SessionBinder
from .canon import Canon, canonical, sessions_named
from .port import CoordinatorPort, TurnPost
from .readback import (
    ToolLabels,
    all_items,
    hidden,
    history_until,
    labels_of,
    output_ids,
    response,
    turn_start,
)
from .terms import Terms
from .transcript import transcripts

Records = list[dict[str, Any]]
CREATED_KEPT = 10_000  # sessions whose immutable ``created`` record is cached, per gateway replica
NAMED_TRIED = 8  # sessions named by call ids in one history that ``bind`` reads back, at most


@dataclass(frozen=True)
class Started:
    """A turn: its session, its number (0: the session's first), where its records begin, and those
    records where the caller has them already (a non-streamed post answers them)."""

    sid: str
    n: int
    start: int
    given: list[dict[str, Any]] | None = None


class AgentService:
    """Sessions as the agent wires use them, over a ``CoordinatorPort``. ``binder``: the per-tenant index of
    client-visible conversations (one per gateway replica; None: a new one, ``SessionBinder``'s bounds)."""

    def __init__(self, port: CoordinatorPort, cfg: GatewayConfig, terms: Terms,
                 binder: SessionBinder | None = None):
        self.port, self.cfg, self.terms = port, cfg, terms
        self._binder = binder  # made in the replica on first use: the app is pickled at composition, a lock is not
        self._created: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()  # (tenant, sid): immutable

    @property
    def binder(self) -> SessionBinder:
        if self._binder is None:
            self._binder = SessionBinder()
        return self._binder

    # -- turns -----------------------------------------------------------------------------------------

    async def start(self, req: CreateSession, meta: TurnMeta, owner: str, key: str | None = None) -> Started:
        """A new session, its first turn running (``key``: a repeat answers with the first session)."""
        out = await self.port.create(req, owner, key, turn=meta)
        return Started(out["session_id"], 0, 0)

    async def post(self, sid: str, post: TurnPost, owner: str, key: str | None = None, wait: bool = True) -> Started:
        """Turn ``post.previous + 1`` of session ``sid``; ``wait``: the coordinator answers once the agent's
        turn ended (or ``events_wait_s`` passed), with its records. Raises the coordinator's refusals:
        ``Conflict`` ``not_latest`` (``previous`` is not the latest turn: the wire forks), 400 for a
        missing function call output or approval answer, 404 for another tenant's session."""
        out = await self.port.respond(sid, post, owner, key, self.cfg.events_wait_s if wait else 0.0)
        return Started(sid, out["turn"], out["start"], out.get("events") if wait else None)  # else: a count

    async def request_of(self, sid: str, owner: str) -> CreateSession:
        """The request that created session ``sid`` (its method, instructions, tools, format)."""
        return CreateSession.model_validate((await self.created(sid, owner))["request"])

    async def follow(self, turn: Started, owner: str, whole: bool = True) -> AsyncIterator[dict[str, Any]]:
        """Snapshots of ``turn`` (``readback.response``) until it is no longer in progress; ``whole``: one
        call waits for the turn's end (up to ``events_wait_s``), else one snapshot per new batch of records."""
        first = await self.created(turn.sid, owner)
        seen = list(turn.given) if turn.given else await self.records(turn.sid, owner, turn.start, whole)
        while True:
            snap = response(first, seen, turn.sid, turn.n, self.labels(first))
            yield snap
            if snap["status"] != "in_progress":
                return
            seen += await self.records(turn.sid, owner, turn.start + len(seen), whole)

    async def cancel(self, sid: str, owner: str) -> None:
        await self.port.cancel(sid, owner)

    async def delete(self, sid: str, owner: str) -> None:
        await self.port.delete(sid, owner)

    async def cancel_turn(self, sid: str, n: int, owner: str) -> dict[str, Any]:
        """Cancel turn ``n`` while it runs (409 ``not_in_progress`` once it ended): its snapshot once it is
        no longer in progress, or as it stands after ``events_wait_s``."""
        status = (await self.snapshot(sid, n, owner))["status"]
        if status != "in_progress":
            raise Conflict(f"this response is {status}; only a response in progress can be cancelled",
                           code="not_in_progress")
        await self.port.cancel(sid, owner)
        deadline, pause = time.monotonic() + self.cfg.events_wait_s, 0.01
        while (snap := await self.snapshot(sid, n, owner))["status"] == "in_progress" and time.monotonic() < deadline:
            await asyncio.sleep(pause)  # the session's end is published a moment after the cancel returns
            pause = min(pause * 2, 0.25)
        return snap

    # -- records ---------------------------------------------------------------------------------------

    async def records(self, sid: str, owner: str, after: int = 0, whole: bool = False) -> Records:
        """The session's published records from ``after`` on, once there is one (the coordinator answers
        a post once its records are stored; they are published a moment later); ``whole``: once one of
        them ends the agent's turn, or ``events_wait_s`` passed."""
        wait = self.cfg.events_wait_s
        out = await self.port.events(sid, after, wait if whole else 0.0, owner, whole_turn=whole)
        while not out["events"]:
            if out["done"]:
                raise NotFound(f"no records of session {sid} after {after}")
            out = await self.port.events(sid, after, wait, owner, whole_turn=whole)
        return out["events"]

    async def created(self, sid: str, owner: str) -> dict[str, Any]:
        """The session's ``created`` record, kept per tenant (a record never changes; another tenant's
        lookup never reaches this one's entry, and the coordinator answers it 404)."""
        key = (owner, sid)
        if key not in self._created:
            self._created[key] = (await self.records(sid, owner))[0]
            while len(self._created) > CREATED_KEPT:
                self._created.popitem(last=False)
        return self._created[key]

    def labels(self, created: dict[str, Any]) -> ToolLabels:
        """The MCP server of each MCP tool of the session whose ``created`` record is ``created``."""
        return labels_of(created, self.terms.mcp)

    async def visible(self, sid: str, n: int, owner: str) -> Records:
        """The session's records, where turn ``n`` can be retrieved (404 for one that never was, and for
        one asked with ``store: false``)."""
        seen = await self.records(sid, owner)
        if hidden(seen, n):
            raise NotFound(f"no response {n} in this conversation (it was not stored)")
        return seen

    async def snapshot(self, sid: str, n: int, owner: str, stored: bool = True) -> dict[str, Any]:
        """Turn ``n`` as it stands now (404 for one that never was; ``stored``: and for one not stored)."""
        seen = await (self.visible(sid, n, owner) if stored else self.records(sid, owner))
        return response(seen[0], seen[turn_start(seen, n):], sid, n, self.labels(seen[0]))

    async def history(self, sid: str, n: int, owner: str) -> list[dict[str, Any]]:
        """The conversation's items up to the end of turn ``n`` (a fork's context; 404 as ``visible``)."""
        seen = await self.visible(sid, n, owner)
        return history_until(seen, sid, n, self.labels(seen[0]))

    async def item(self, sid: str, item_id: str, owner: str) -> dict[str, Any] | None:
        """Item ``item_id`` of the tenant's session ``sid`` (None where it has none; 404 for a session not
        the tenant's)."""
        seen = await self.records(sid, owner)
        return all_items(seen, sid, self.labels(seen[0])).get(item_id)

    async def progress(self, sid: str, owner: str) -> tuple[int, list[str]]:
        """The session's latest turn, and the ids of its output items so far (404 for another tenant's)."""
        seen = await self.records(sid, owner)
        return sum(r["t"] == "turn" for r in seen), output_ids(seen, sid, self.labels(seen[0]))

    # -- the session binder ----------------------------------------------------------------------------

    async def bind(self, owner: str, history: Sequence[Canon]) -> tuple[Binding, bool] | None:
        """The tenant's session whose client-visible transcript up to some turn's end is ``history``, and
        whether that turn is its latest and the session still takes input (True: continue it; False: a
        fork). The binder's index first; then the sessions that the history's server-minted call ids name,
        read back and compared. Another tenant's session, a forged or unknown id: no match, never an
        error. None: no match (the wire starts a new session, the history its context)."""
        found = self.binder.lookup(owner, history)
        if found is not None:
            try:
                seen = await self.records(found.sid, owner)
            except NotFound:
                seen = []
            if seen:
                return found, _latest(seen, found.turn)
        for sid in sessions_named(history)[:NAMED_TRIED]:
            try:
                seen = await self.records(sid, owner)
            except NotFound:  # not the tenant's, or no session at all: as if never named
                continue
            ends, wanted = transcripts(seen, sid, self.labels(seen[0])), canonical(history)
            turns = [n for n, t in enumerate(ends) if canonical(t) == wanted]
            if turns:
                return Binding(sid, turns[-1]), _latest(seen, turns[-1])
        return None

    async def transcript(self, sid: str, owner: str, upto: int | None = None) -> list[Canon]:
        """The session's client-visible conversation up to the end of turn ``upto`` (default: the latest),
        from its records: its instructions, each turn's inputs (user messages, tool results) and outputs
        (agent messages, function calls); server-side steps (MCP) are not client-visible and left out."""
        seen = await self.records(sid, owner)
        ends = transcripts(seen, sid, self.labels(seen[0]))
        if upto is not None and not 0 <= upto < len(ends):
            raise NotFound(f"no response {upto} in this conversation")
        return ends[-1 if upto is None else upto]

    def remember(self, owner: str, transcript: Sequence[Canon], turn: Started) -> None:
        """After ``turn`` ended: ``transcript`` (the client's history, its new input and the turn's output
        as the client saw it) is what the client will replay next; index it for ``bind``."""
        self.binder.remember(owner, transcript, Binding(turn.sid, turn.n))


def _latest(records: Records, n: int) -> bool:
    """Whether turn ``n`` is the session's latest and the session still takes input."""
    return sum(r["t"] == "turn" for r in records) == n and not any(r["t"] in ("final", "deleted") for r in records)


async def numbered(events: AsyncIterator[dict[str, Any]], after: int = -1) -> AsyncIterator[dict[str, Any]]:
    """``events`` each with its ``sequence_number`` (0, 1, ...), those after ``after`` only: a stream's
    events are a function of the session's records, so a resumed stream numbers each event as before."""
    number = 0
    async for event in events:
        if number > after:
            yield {**event, "sequence_number": number}
        number += 1


__all__ = ["AgentService", "Started", "numbered"]
