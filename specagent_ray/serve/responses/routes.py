"""The Responses API's routes on the gateway: the same keys, tenants, rate limits, body cap and
Idempotency-Key as the sessions API, over the same coordinator calls. Only wiring: requests are
translated by ``responses/translate.py``, records read back by ``responses/items.py``.

- ``POST /v1/responses`` answers once the agent's turn ended (a message, a function call, an approval
  request); ``background: true`` answers at once (poll ``GET``); ``stream: true`` streams the Responses
  events, each with a ``sequence_number``, each sent only once its record is durable.
- ``POST /v1/responses/{id}/cancel`` cancels the conversation's session while that response runs (409 once
  it ended); ``DELETE /v1/responses/{id}`` ends the conversation and hides all its responses (404 after).
- Another tenant's response is one that does not exist (404), on every route.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from ..core.api import CreateSession
from ..core.config import GatewayConfig
from ..core.errors import (
    OPENAI_ERROR,
    RESPONSES,
    ApiError,
    BadRequest,
    Conflict,
    NotFound,
    error_event,
)
from .conversations import conversation_of, mount_conversations
from .inputs import continues, replay_tail, session_of
from .items import (
    all_items,
    ended,
    hidden,
    history_until,
    input_items,
    item_events,
    labels_of,
    lifecycle,
    output_ids,
    page,
    response,
    sse,
    turn_start,
)
from .models import InputTokensBody, ItemReference, ResponseCreate
from .route_docs import (
    EVENT,
    ITEM,
    LINKS,
    NOTICES,
    ResponseEvents,
    error_response,
    errors,
    noticed,
)
from .schema import create_schema
from .tools import dropped, echoed_tools, hosted
from .translate import (
    Terms,
    create_request,
    ignored,
    meta,
    parse_response_id,
    read_input,
    response_id,
    turn_post,
)

Call = Callable[..., Awaitable[Any]]
log = logging.getLogger(__name__)
def mount_responses(app: FastAPI, coordinator: Call, tenant: Any, key: Any, cfg: GatewayConfig, terms: Terms) -> None:
    """Add the Responses API's routes to ``app``; ``coordinator(method, *args, owner=, retry=)`` calls a
    coordinator shard, ``tenant`` and ``key`` are the gateway's dependencies for the caller and the
    Idempotency-Key header."""

    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        spec = default_openapi()
        schemas = spec["components"]["schemas"]
        schemas["OpenAIError"], (schemas["ResponseCreate"], defs) = OPENAI_ERROR, create_schema(terms)
        schemas.update(defs)
        return spec

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        """A Responses API body that does not parse is a 400 naming the field, as OpenAI answers it (a
        field it does not know parses: ``noticed``)."""
        if not request.url.path.startswith(RESPONSES):
            return await request_validation_exception_handler(request, exc)
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if p != "body")
        return error_response(request, 400, f"{where}: {first['msg']}", param=where or None, code="invalid_value")

    created_records: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()  # (tenant, session): immutable

    async def records(sid: str, who: str, after: int = 0, whole: bool = False) -> list[dict[str, Any]]:
        """The session's published records from ``after`` on, once there is one (the coordinator answers
        a post once its records are stored; they are published a moment later); ``whole``: once one of
        them ends the agent's turn, or ``events_wait_s`` passed."""
        out = await coordinator("events", sid, after, cfg.events_wait_s if whole else 0.0, owner=who, whole_turn=whole)
        while not out["events"]:
            if out["done"]:
                raise NotFound(f"no records of session {sid} after {after}")
            out = await coordinator("events", sid, after, cfg.events_wait_s, owner=who, whole_turn=whole)
        return out["events"]

    async def created(sid: str, who: str) -> dict[str, Any]:
        """The session's ``created`` record, kept per tenant (a record never changes; another tenant's
        lookup never reaches this one's entry, and the coordinator answers it 404)."""
        key = (who, sid)
        if key not in created_records:
            created_records[key] = (await records(sid, who))[0]
            while len(created_records) > 10_000:
                created_records.popitem(last=False)
        return created_records[key]

    def label(first: dict[str, Any]) -> dict[str, str]:
        """The MCP server of each MCP tool of the session whose ``created`` record is ``first``."""
        return labels_of(first, terms.mcp)

    async def follow(sid: str, n: int, start: int, who: str, whole: bool = False,
                     given: list[dict[str, Any]] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Response ``n`` (its records begin at ``start``; ``given``: those the caller has), again each time
        more records are published (``whole``: only once its turn ended, in one call, unless that takes
        over ``events_wait_s``), until the agent's turn ended."""
        first = await created(sid, who)
        seen = list(given) if given else await records(sid, who, start, whole)
        while True:
            snap = response(first, seen, sid, n, label(first))
            yield snap
            if snap["status"] != "in_progress":
                return
            seen += await records(sid, who, start + len(seen), whole)

    async def visible(sid: str, n: int, who: str) -> list[dict[str, Any]]:
        """The session's records, where response ``n`` can be retrieved (404 for one that never was, and
        for one asked with ``store: false``)."""
        seen = await records(sid, who)
        if hidden(seen, n):
            raise NotFound(f"no response {n} in this conversation (it was not stored)")
        return seen

    async def stored(sid: str, n: int, who: str) -> dict[str, Any]:
        """Response ``n`` as it stands now (404 for one that never was)."""
        seen = await visible(sid, n, who)
        return response(seen[0], seen[turn_start(seen, n):], sid, n, label(seen[0]))

    async def resolve(items: list[Any], who: str) -> list[Any]:
        """``items`` with each ``item_reference`` replaced by the tenant's own item it names (404 for any
        other: an id of another tenant's conversation is one that does not exist)."""
        out = []
        for item in items:
            if isinstance(item, ItemReference):
                sid = session_of(item.id)
                seen = await records(sid, who) if sid else []
                found = all_items(seen, sid, label(seen[0])).get(item.id) if seen else None
                if found is None:
                    raise NotFound(f"no item {item.id!r}", "input")
                item = ITEM.validate_python(found)
            out.append(item)
        return out

    async def output_of(rid: str, who: str) -> list[dict[str, Any]]:
        """Response ``rid``'s output items as they stand (none for a response deleted since)."""
        sid, n = parse_response_id(rid)
        try:
            seen = await records(sid, who)
        except NotFound:
            return []
        return response(seen[0], seen[turn_start(seen, n):], sid, n, label(seen[0]))["output"]

    conversations = mount_conversations(app, coordinator, tenant, key, output_of, resolve, errors, terms.strict)

    async def resolved(body: ResponseCreate, who: str) -> tuple[ResponseCreate, list[Any]]:
        """``body``, its input with the history of its ``conversation`` before it and each
        ``item_reference`` resolved (``resolve``); and its own input's items."""
        new = [ITEM.validate_python({"role": "user", "content": body.input})] if isinstance(body.input, str) \
            else await resolve(list(body.input), who)
        cid = conversation_of(body.conversation)
        if cid is None:
            return (body if isinstance(body.input, str) else body.model_copy(update={"input": new})), new
        if body.previous_response_id is not None:
            raise BadRequest("conversation and previous_response_id: give one of them", "conversation",
                             "invalid_value")
        history = [ITEM.validate_python(i) for i in await conversations.history(cid, who)]
        return body.model_copy(update={"input": [*history, *new]}), new

    async def replayed(body: ResponseCreate, who: str) -> tuple[str, int, list[Any]] | None:
        """(session, its latest turn, the new input) where ``body`` replays a session of the tenant's own
        and continues it; None where it starts a new one (no replay, or a replay of an earlier point)."""
        reading = read_input(body)
        sids = sorted(reading.sessions())
        if len(sids) > 8:
            raise BadRequest("input: items of more than 8 conversations", "input")
        histories = {sid: await records(sid, who) for sid in sids}  # 404 for a session not the tenant's
        last = replay_tail(reading)
        if last is None:
            return None
        seen = histories[last[0]]
        if not continues(reading, output_ids(seen, last[0], label(seen[0]))):
            return None
        return last[0], sum(r["t"] == "turn" for r in seen), list(reading.new)

    async def forked(body: ResponseCreate, sid: str, previous: int, who: str) -> ResponseCreate:
        """A new conversation's body for a continuation of response ``previous``, which is not its
        conversation's latest: its input is the history up to that response (context: nothing in it runs
        again), then the new input."""
        seen = await visible(sid, previous, who)
        history = [ITEM.validate_python(i) for i in history_until(seen, sid, previous, label(seen[0]))]
        new = [ITEM.validate_python({"role": "user", "content": body.input})] if isinstance(body.input, str) \
            else list(body.input)
        return body.model_copy(update={"input": [*history, *new], "previous_response_id": None})

    async def respond(sid: str, post: Any, who: str, body: ResponseCreate, key: str | None) -> tuple[int, int, Any]:
        wait = 0.0 if body.stream or body.background else cfg.events_wait_s  # one call: store, run, answer
        out = await coordinator("respond", sid, post, owner=who, idempotency_key=key, retry=key is not None,
                                wait_s=wait)
        return out["turn"], out["start"], out.get("events")

    async def stream(sid: str, n: int, start: int, who: str, after: int = -1) -> AsyncIterator[str]:
        """Response ``n``'s events, those after sequence number ``after`` (a resumed stream: the events
        are a function of the session's records, so each has the same number every time)."""
        async for text in _events(sid, n, start, who, after):
            if text:
                yield text

    async def _events(sid: str, n: int, start: int, who: str, after: int) -> AsyncIterator[str]:
        number = 0

        def event(e: dict[str, Any]) -> str:
            nonlocal number
            number += 1
            return sse({**e, "sequence_number": number - 1}) if number - 1 > after else ""

        sent = 0
        try:
            async for snap in follow(sid, n, start, who):
                if number == 0:
                    begun = {**snap, "status": "in_progress", "output": []}
                    yield event(lifecycle("created", begun))
                    yield event(lifecycle("in_progress", begun))
                for i, item in enumerate(snap["output"][sent:], start=sent):
                    for e in item_events(item, i):
                        yield event(e)
                sent = len(snap["output"])
                end = ended(snap["status"])
                if end is not None:
                    yield event(lifecycle(end, snap))
        except ApiError as exc:  # the coordinator went away mid-stream: say so, in the stream's own terms
            yield event(error_event(str(exc.status), exc.message, exc.param))
        except Exception as exc:  # noqa: BLE001 - the gateway's Unavailable says what to do; nothing else is shown
            unavailable = type(exc).__name__ == "Unavailable"
            if not unavailable:
                log.error("response stream of session %s failed: %s: %s", sid, type(exc).__name__, exc)
            yield event(error_event("unavailable" if unavailable else "internal_error",
                                    str(exc) if unavailable else "internal error (logged on the server)"))

    @app.post("/v1/responses", operation_id="create_response", response_model=None,
              responses={200: {"description": "the response (a JSON object), or its events (stream: true)",
                               "content": {"application/json": {"schema": {"type": "object"}},
                                           "text/event-stream": {"itemSchema": EVENT}},
                               "links": LINKS, "headers": NOTICES}, **errors(400, 403, 404, 409, 413)})
    async def create_response(body: ResponseCreate, answer: Response, who: str = tenant,
                              idempotency_key: str | None = key) -> Any:
        """A response: the next turn of an agent conversation (a new one without ``previous_response_id``).
        Its headers name the fields it ignored and the tools it dropped (``route_docs.noticed``)."""
        now, key = int(time.time()), idempotency_key
        notes = noticed(ignored(body, terms.strict), dropped(body))
        body, new_items = await resolved(body, who)
        own = await replayed(body, who) if body.previous_response_id is None else None

        async def begin(first: ResponseCreate) -> tuple[str, int, int, None]:
            req = create_request(first, terms)
            out = await coordinator("create", req, owner=who, idempotency_key=key,
                                    turn=meta(body, now, echoed_tools(body, terms), bool(req.parallel_calls), req,
                                              terms.sampled),
                                    retry=key is not None)
            return out["session_id"], 0, 0, None

        if body.previous_response_id is None and own is None:
            sid, n, start, given = await begin(body)
        else:
            if own is None:
                sid, previous = parse_response_id(body.previous_response_id or "")
                await visible(sid, previous, who)
                new = None
            else:
                sid, previous, new = own
            request = CreateSession.model_validate((await created(sid, who))["request"])
            try:
                post = turn_post(body, previous, request, terms, now, new)
                n, start, given = await respond(sid, post, who, body, idempotency_key)
            except Conflict as exc:
                # a handoff (other instructions, tools or model), or a response that is not the latest and
                # no repeat of a post it took (a fork): a new session, the history so far its context
                fork = exc.code == "not_latest" and own is None
                if exc.code != "handoff" and not fork:
                    raise
                sid, n, start, given = await begin(body if own is not None else
                                                   await forked(body, sid, previous, who))
        if (cid := conversation_of(body.conversation)) is not None:  # its new input, and its output, join it
            await conversations.link(cid, response_id(sid, n), new_items, who)
        if body.stream:
            return ResponseEvents(stream(sid, n, start, who), headers={"Cache-Control": "no-cache", **notes})
        answer.headers.update(notes)
        async for snap in follow(sid, n, start, who, whole=not body.background, given=given):
            if body.background:
                return snap
        return snap

    @app.post("/v1/responses/input_tokens", operation_id="count_input_tokens", response_model=None,
              responses={200: {"description": "the count", "headers": NOTICES}, **errors(400, 404, 413)})
    async def input_tokens(body: InputTokensBody, answer: Response, who: str = tenant) -> dict[str, Any]:
        """How many tokens a request's input is, its conversation's history included (``input_tokens.py``:
        the verifier's tokenizer where it can be asked, the token model's estimate elsewhere); the tools a
        response would drop are not counted."""
        answer.headers.update(noticed(ignored(body, terms.strict), dropped(body)))
        if body.tools:
            body = body.model_copy(update={"tools": [t for t in body.tools if hosted(t)]})
        history: list[Any] = []
        if (cid := conversation_of(body.conversation)) is not None:
            history = [ITEM.validate_python(i) for i in await conversations.history(cid, who)]
        elif body.previous_response_id is not None:
            sid, n = parse_response_id(body.previous_response_id)
            seen = await visible(sid, n, who)
            history = [ITEM.validate_python(i) for i in history_until(seen, sid, n, label(seen[0]))]
        if isinstance(body.input, list):
            body = body.model_copy(update={"input": await resolve(list(body.input), who)})
        return await terms.counter.count(body, history)

    @app.get("/v1/responses/{rid:rid}", operation_id="get_response", response_model=None,
             responses={200: {"description": "the response, or its events (stream=true)",
                              "content": {"application/json": {"schema": {"type": "object"}},
                                          "text/event-stream": {"itemSchema": EVENT}}}, **errors(400, 404)})
    async def get_response(rid: str, who: str = tenant, stream_: bool = Query(False, alias="stream"),
                           starting_after: int | None = Query(None, ge=-1, le=1_000_000)) -> Any:
        """A response as it stands: poll it until its status is no longer in_progress; ``stream=true``
        streams its events (a background response's too), after ``starting_after`` to resume one."""
        sid, n = parse_response_id(rid)
        if not stream_:
            return await stored(sid, n, who)
        seen = await visible(sid, n, who)
        after = -1 if starting_after is None else starting_after
        return ResponseEvents(stream(sid, n, turn_start(seen, n), who, after), headers={"Cache-Control": "no-cache"})

    @app.post("/v1/responses/{rid:rid}/cancel", operation_id="cancel_response", response_model=None,
              responses=errors(404, 409))
    async def cancel_response(rid: str, who: str = tenant) -> dict[str, Any]:
        """Cancel a response in progress: its conversation's session ends as cancelled. Answers the
        response once its status is no longer in_progress (cancelled, or the end it reached first), or as
        it stands after ``events_wait_s``."""
        sid, n = parse_response_id(rid)
        status = (await stored(sid, n, who))["status"]
        if status != "in_progress":
            raise Conflict(f"response {rid} is {status}; only a response in progress can be cancelled",
                           code="not_in_progress")
        await coordinator("cancel", sid, owner=who)
        deadline, pause = time.monotonic() + cfg.events_wait_s, 0.01
        while (snap := await stored(sid, n, who))["status"] == "in_progress" and time.monotonic() < deadline:
            await asyncio.sleep(pause)  # the session's end is published a moment after the cancel returns
            pause = min(pause * 2, 0.25)
        return snap

    @app.delete("/v1/responses/{rid:rid}", operation_id="delete_response", response_model=None,
                responses=errors(404))
    async def delete_response(rid: str, who: str = tenant) -> dict[str, Any]:
        """Delete the conversation this response belongs to: it ends, and its responses answer 404."""
        sid, n = parse_response_id(rid)
        turn_start(await records(sid, who), n)  # 404 for a turn that never was
        await coordinator("delete", sid, owner=who)
        return {"id": rid, "object": "response.deleted", "deleted": True}

    @app.get("/v1/responses/{rid:rid}/input_items", operation_id="list_input_items", response_model=None,
             responses=errors(400, 404))
    async def list_input_items(rid: str, request: Request, who: str = tenant,
                               limit: int = Query(20, ge=1, le=100), order: str = Query("desc", pattern="^(asc|desc)$"),
                               after: str | None = Query(None, max_length=200)) -> dict[str, Any]:
        """The items the client sent in this response's request, newest first unless ``order=asc``."""
        sid, n = parse_response_id(rid)
        return page(input_items(await visible(sid, n, who), sid, n), limit, order, after)

