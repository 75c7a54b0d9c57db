"""A Responses API request's way to a turn: which session it continues (``previous_response_id``, a
conversation, a replay of this server's items, or a replay the session binder recognises), or the new
session it starts, and the turn's stream of events. Translation only: the agent service
(``agents/service.py``) holds the sessions; ``translate.py`` builds the bodies.

A request continues a session in these ways, tried in order:
1. ``previous_response_id``: that response's session (a handoff to other instructions, tools or model,
   or a response that is not the latest, forks: a new session, the history so far its context);
2. a replay whose agent items carry this server's item ids, exactly the tail of one of the tenant's
   sessions (``inputs.continues``);
3. a replay whose client-visible history (instructions, messages, function calls and outputs) is one of
   the tenant's sessions up to its latest turn (``AgentService.bind``): clients that replay
   ``function_call`` items with their ``call_id`` but no ``id`` continue their session too.
Anything else starts a new session whose context is the replay: nothing in it runs. Another tenant's
ids and forged ids are no match, never an error.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from ..agents.canon import Canon, system
from ..agents.service import AgentService, Started, numbered
from ..agents.transcript import canon_of
from ..core.errors import ApiError, BadRequest, Conflict, NotFound, error_event
from .conversations import ConversationStore, conversation_of
from .inputs import Reading, continues, replay_tail, session_of
from .items import ended, item_events, lifecycle, sse
from .models import ItemReference, ResponseCreate
from .route_docs import ITEM
from .tools import echoed_tools
from .translate import (
    create_request,
    instructions_of,
    meta,
    parse_response_id,
    read_input,
    response_id,
    turn_post,
)

log = logging.getLogger(__name__)
Done = Callable[[dict[str, Any]], None]  # called with a turn's last snapshot
MAX_REPLAYED = 8  # sessions one replay's item ids may name


class Flow:
    """The create route's logic over ``service``; ``conversations``: the Conversations API's store."""

    def __init__(self, service: AgentService):
        self.service, self.terms = service, service.terms
        self.conversations: ConversationStore | None = None  # set once the Conversations routes are mounted

    async def resolve(self, items: list[Any], who: str) -> list[Any]:
        """``items`` with each ``item_reference`` replaced by the tenant's own item it names (404 for any
        other: an id of another tenant's conversation is one that does not exist)."""
        out = []
        for item in items:
            if isinstance(item, ItemReference):
                sid = session_of(item.id)
                found = await self.service.item(sid, item.id, who) if sid else None
                if found is None:
                    raise NotFound(f"no item {item.id!r}", "input")
                item = ITEM.validate_python(found)
            out.append(item)
        return out

    async def output_of(self, rid: str, who: str) -> list[dict[str, Any]]:
        """Response ``rid``'s output items as they stand (none for a response deleted since)."""
        sid, n = parse_response_id(rid)
        try:
            return (await self.service.snapshot(sid, n, who, stored=False))["output"]
        except NotFound:
            return []

    async def history(self, cid: str, who: str) -> list[Any]:
        assert self.conversations is not None
        return [ITEM.validate_python(i) for i in await self.conversations.history(cid, who)]

    async def resolved(self, body: ResponseCreate, who: str) -> tuple[ResponseCreate, list[Any]]:
        """``body``, its input with the history of its ``conversation`` before it and each
        ``item_reference`` resolved (``resolve``); and its own input's items."""
        new = [ITEM.validate_python({"role": "user", "content": body.input})] if isinstance(body.input, str) \
            else await self.resolve(list(body.input), who)
        cid = conversation_of(body.conversation)
        if cid is None:
            return (body if isinstance(body.input, str) else body.model_copy(update={"input": new})), new
        if body.previous_response_id is not None:
            raise BadRequest("conversation and previous_response_id: give one of them", "conversation",
                             "invalid_value")
        return body.model_copy(update={"input": [*await self.history(cid, who), *new]}), new

    # -- a response --------------------------------------------------------------------------------------

    async def create(self, body: ResponseCreate, who: str, key: str | None, now: int) -> tuple[Started, ResponseCreate]:
        """The turn that ``body`` (resolved) asks, started or continued; and the body as it was resolved."""
        body, new_items = await self.resolved(body, who)
        own = await self.replayed(body, who) if body.previous_response_id is None else None
        if body.previous_response_id is None and own is None:
            turn = await self.begin(body, who, key, now)
        else:
            if own is None:
                sid, previous = parse_response_id(body.previous_response_id or "")
                await self.service.visible(sid, previous, who)
                new = None
            else:
                sid, previous, new = own
            request = await self.service.request_of(sid, who)
            try:
                post = turn_post(body, previous, request, self.terms, now, new)
                turn = await self.service.post(sid, post, who, key, wait=not (body.stream or body.background))
            except Conflict as exc:
                # a handoff (other instructions, tools or model), or a response that is not the latest and
                # no repeat of a post it took (a fork): a new session, the history so far its context
                fork = exc.code == "not_latest" and own is None
                if exc.code != "handoff" and not fork:
                    raise
                turn = await self.begin(body if own is not None else await self.forked(body, sid, previous, who),
                                        who, key, now, echoed=body)
        if (cid := conversation_of(body.conversation)) is not None:  # its new input, and its output, join it
            assert self.conversations is not None
            await self.conversations.link(cid, response_id(turn.sid, turn.n), new_items, who)
        return turn, body

    async def begin(self, body: ResponseCreate, who: str, key: str | None, now: int,
                    echoed: ResponseCreate | None = None) -> Started:
        """A new session for ``body``; ``echoed``: the request the response echoes (a fork's own)."""
        req = create_request(body, self.terms)
        asked = echoed or body
        turn = meta(asked, now, echoed_tools(asked, self.terms), bool(req.parallel_calls), req, self.terms.sampled)
        return await self.service.start(req, turn, who, key)

    async def replayed(self, body: ResponseCreate, who: str) -> tuple[str, int, list[Any]] | None:
        """(session, its latest turn, the new input) where ``body`` replays a session of the tenant's own
        and continues it; None where it starts a new one (no replay, a replay of an earlier point, of
        another tenant's session or of ids this server never minted)."""
        reading = read_input(body)
        sids = sorted(reading.sessions())
        if len(sids) > MAX_REPLAYED:
            raise BadRequest(f"input: items of more than {MAX_REPLAYED} conversations", "input")
        last = replay_tail(reading)
        if last is not None:
            try:
                latest, ids = await self.service.progress(last[0], who)
            except NotFound:  # not the tenant's, or never was: the replay is context for a new session
                return None
            return (last[0], latest, list(reading.new)) if continues(reading, ids) else None
        if not reading.history or not reading.new:
            return None
        try:
            history = history_of(body, reading)
        except TypeError:  # content of a shape the canon does not read: no match, a new session
            return None
        found = await self.service.bind(who, history)
        if found is None or not found[1]:
            return None  # no match, or an earlier point (a fork): a new session, the replay its context
        return found[0].sid, found[0].turn, list(reading.new)

    async def forked(self, body: ResponseCreate, sid: str, previous: int, who: str) -> ResponseCreate:
        """A new conversation's body for a continuation of response ``previous``, which is not its
        conversation's latest: its input is the history up to that response (context: nothing in it runs
        again), then the new input."""
        history = [ITEM.validate_python(i) for i in await self.service.history(sid, previous, who)]
        new = [ITEM.validate_python({"role": "user", "content": body.input})] if isinstance(body.input, str) \
            else list(body.input)
        return body.model_copy(update={"input": [*history, *new], "previous_response_id": None})

    def remember(self, body: ResponseCreate, turn: Started, snap: dict[str, Any], who: str) -> None:
        """Index the conversation as the client will replay it next (a stateless client's next request
        binds to this session: ``AgentService.bind``); only a replayed history's, never a chained one's."""
        if body.previous_response_id is None and snap["status"] == "completed":
            reading = read_input(body)
            try:
                seen = [*history_of(body, reading), *canon_of(_dumped(reading.new)), *canon_of(snap["output"])]
            except TypeError:  # as ``replayed``: a history the canon does not read is never bound
                return
            self.service.remember(who, seen, turn)

    # -- its events ----------------------------------------------------------------------------------------

    async def stream(self, turn: Started, who: str, after: int = -1,
                     done: Done | None = None) -> AsyncIterator[str]:
        """Turn ``turn``'s events as server-sent events, after sequence number ``after`` (a resumed
        stream: the events are a function of the session's records, so each has the same number every
        time); ``done(snapshot)``: called with the last snapshot once the turn ended."""
        async for event in numbered(self._events(turn, who, done), after):
            yield sse(event)

    async def _events(self, turn: Started, who: str, done: Done | None) -> AsyncIterator[dict[str, Any]]:
        sent, begun = 0, False
        try:
            async for snap in self.service.follow(turn, who, whole=False):
                if not begun:
                    begun, first = True, {**snap, "status": "in_progress", "output": []}
                    yield lifecycle("created", first)
                    yield lifecycle("in_progress", first)
                for i, item in enumerate(snap["output"][sent:], start=sent):
                    for e in item_events(item, i):
                        yield e
                sent = len(snap["output"])
                if (end := ended(snap["status"])) is not None:
                    if done is not None:
                        done(snap)
                    yield lifecycle(end, snap)
        except ApiError as exc:  # the coordinator went away mid-stream: say so, in the stream's own terms
            yield error_event(str(exc.status), exc.message, exc.param)
        except Exception as exc:  # noqa: BLE001 - the gateway's Unavailable says what to do; nothing else is shown
            unavailable = type(exc).__name__ == "Unavailable"
            if not unavailable:
                log.error("response stream of session %s failed: %s: %s", turn.sid, type(exc).__name__, exc)
            yield error_event("unavailable" if unavailable else "internal_error",
                              str(exc) if unavailable else "internal error (logged on the server)")


def history_of(body: ResponseCreate, reading: Reading) -> list[Canon]:
    """The client-visible conversation that ``body``'s replayed history is: its instructions, then the
    history's messages, function calls and outputs (``agents/transcript.py``)."""
    said = instructions_of(body, reading)
    return [*([system(said)] if said else []), *canon_of(_dumped(reading.history))]


def _dumped(items: Sequence[Any]) -> list[dict[str, Any]]:
    return [i.model_dump(mode="json", exclude_none=True) for i in items]
