"""Anthropic's Messages API on the gateway: ``POST /v1/messages`` (its beta form, ``?beta=true``, too) and
``POST /v1/messages/count_tokens``, with the same keys (``x-api-key`` or a bearer token), tenants, rate
limits, body caps and Idempotency-Key as every other route. Only wiring: a request is translated
(``translate.py``), its turn run by the shared ``AgentService``, and its snapshot answered as Anthropic's
``Message`` or stream (``answer.py``).

A stateless client resends the whole conversation. A request whose history is one of the tenant's
sessions up to its latest turn (``AgentService.bind``: the binder's index, then the server-minted call
ids it names) continues that session; anything else (no match, an earlier point, another model, other
instructions or tools) starts a new session with the history as context, never run. After each turn the
conversation as the client will replay it is remembered for the next request. Errors are Anthropic's
shape (``core/errors.error_body``), a body that does not parse included (400 ``invalid_request_error``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute

from ..agents import fields
from ..agents.service import AgentService, Started
from ..agents.terms import Terms
from ..core.api import CreateSession
from ..core.errors import ApiError, Conflict, documented, error_body
from .answer import (
    block_events,
    blocks,
    ended,
    error_event,
    failure,
    message,
    sse,
    started,
)
from .models import STREAM_EVENT, CountTokensBody, MessagesCreate
from .translate import (
    Reading,
    content_canon,
    continues,
    create_request,
    dropped,
    ignored,
    meta,
    read,
    rendered,
    turn_post,
)

log = logging.getLogger(__name__)
ANTHROPIC_ERROR = {"title": "AnthropicError", "type": "object", "required": ["type", "error"],
                   "description": "An error on the Messages API's routes, in Anthropic's shape (its SDK reads it)",
                   "properties": {"type": {"const": "error"}, "error": {"type": "object", "required": [
                       "type", "message"], "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}


class AnthropicRoute(APIRoute):
    """A route whose body that does not parse is Anthropic's 400 ``invalid_request_error`` naming the field,
    whatever the app's own handler for validation errors does elsewhere."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"] if p != "body")
                if first["type"] == "json_invalid":
                    where = "body"  # its position in the text says nothing to the client
                text = f"{where}: {first['msg']}" if where else str(first["msg"])
                return JSONResponse(error_body(request.url.path, 400, text), status_code=400)

        return route


class MessageEvents(StreamingResponse):
    media_type = "text/event-stream"


def notices(ignored_fields: list[str], dropped_tools: list[str]) -> dict[str, str]:
    """The headers naming the fields this server ignored and the server tools it dropped."""
    return fields.noticed(ignored_fields, dropped_tools, "the Messages API")


class MessagesWire:
    """The Messages API's handlers over the shared ``AgentService``: translation in, a turn, translation out."""

    def __init__(self, service: AgentService, terms: Terms):
        self.service, self.terms = service, terms

    async def create(self, body: MessagesCreate, who: str, key: str | None) -> Response:
        """The agent's next turn, as Anthropic's Message (``stream``: its events). The history continues the
        tenant's session it extends, or starts a new one; the headers name ignored fields and dropped tools."""
        now, notes = int(time.time()), notices(ignored(body, self.terms.strict), dropped(body))
        reading = read(body)
        wanted = create_request(body, reading, self.terms)
        turn = await self.continued(reading, wanted, body, who, key, now)
        if turn is None:
            turn = await self.service.start(wanted, meta(body, now), who, key)
        if body.stream:
            return MessageEvents(self.stream(turn, who, body.model, reading),
                                 headers={"Cache-Control": "no-cache", **notes})
        async for snap in self.service.follow(turn, who, whole=True):
            pass
        if (error := failure(snap)) is not None:
            raise error
        answer = message(snap, turn.sid, turn.n, body.model)
        self.remember(who, reading, answer, turn)
        return JSONResponse(answer, headers=notes)

    async def continued(self, reading: Reading, wanted: CreateSession, body: MessagesCreate, who: str,
                        key: str | None, now: int) -> Started | None:
        """The turn that continues the tenant's session whose latest turn the history is; None where a new
        session starts (no match, a fork, a handoff, nothing new to post)."""
        if not reading.replayed:
            return None
        found = await self.service.bind(who, reading.history)
        if found is None or not found[1]:
            return None
        binding = found[0]
        post = turn_post(reading, binding.turn, meta(body, now))
        if post is None or not continues(await self.service.request_of(binding.sid, who), wanted):
            return None
        try:
            return await self.service.post(binding.sid, post, who, key, wait=not body.stream)
        except Conflict as exc:
            if exc.code in ("not_latest", "handoff"):  # another request took that turn first: a fork
                return None
            raise

    def remember(self, who: str, reading: Reading, answer: dict[str, Any], turn: Started) -> None:
        """What the client will replay next: its history, its new input and this answer."""
        if answer["stop_reason"] in ("end_turn", "tool_use"):
            self.service.remember(who, [*reading.history, *reading.new, *content_canon(answer["content"])], turn)

    async def stream(self, turn: Started, who: str, model: str, reading: Reading) -> AsyncIterator[str]:
        """Anthropic's events of ``turn`` (``answer.py``); a failure mid-stream is an ``error`` event."""
        turn = Started(turn.sid, turn.n, turn.start)  # read from its start (a post that did not wait has no records)
        for event in started(turn.sid, turn.n, model):
            yield sse(event)
        sent = 0
        try:
            async for snap in self.service.follow(turn, who, whole=False):
                content = blocks(snap["output"])
                for index, block in enumerate(content[sent:], start=sent):
                    for event in block_events(block, index):
                        yield sse(event)
                if len(content) == sent:
                    yield sse({"type": "ping"})  # a keep-alive while the agent works
                sent = len(content)
            if (error := failure(snap)) is not None:
                yield sse(error_event(error.status, error.message))
                return
            answer = message(snap, turn.sid, turn.n, model)
            self.remember(who, reading, answer, turn)
            for event in ended(answer):
                yield sse(event)
        except ApiError as exc:  # the coordinator went away mid-stream: say so, in the stream's own terms
            yield sse(error_event(exc.status, exc.message))
        except Exception as exc:  # noqa: BLE001 - the gateway's Unavailable says what to do; nothing else is shown
            unavailable = type(exc).__name__ == "Unavailable"
            if not unavailable:
                log.error("message stream of session %s failed: %s: %s", turn.sid, type(exc).__name__, exc)
            yield sse(error_event(503 if unavailable else 500,
                                  str(exc) if unavailable else "internal error (logged on the server)"))

    async def count(self, body: CountTokensBody) -> Response:
        """How many tokens the request's system, messages and custom tools are (the verifier's tokenizer
        where it can be asked, else the token model's estimate: ``counted_by``); server tools not counted."""
        notes = notices(ignored(body, self.terms.strict), dropped(body))
        self.terms.method(body.model)
        counted = await self.terms.counter.count_prompt(rendered(body))
        return JSONResponse({"input_tokens": counted["input_tokens"], "counted_by": counted["counted_by"]},
                            headers=notes)


def mount_messages(app: FastAPI, service: AgentService, tenant: Any, key: Any, terms: Terms | None = None) -> None:
    """Add ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` to ``app``. ``service``: the agent
    service every wire shares; ``tenant`` and ``key``: the gateway's dependencies for the caller's tenant
    (``x-api-key`` or ``Authorization: Bearer``) and the Idempotency-Key header; ``terms``: what the
    server offers (``Terms.of(app_config)``; None: the service's)."""
    wire = MessagesWire(service, terms if terms is not None else service.terms)
    router = APIRouter(route_class=AnthropicRoute)
    _publish(app)
    fields.publish_models(app, ("MessagesCreate", "CountTokensBody"), (*wire.terms.methods, *wire.terms.aliases))

    @router.post("/v1/messages", operation_id="create_message", response_model=None,
                 responses={200: {"description": "the message (a JSON object), or its events (stream: true)",
                                  "content": {"application/json": {"schema": {"type": "object"}},
                                              "text/event-stream": {"itemSchema": STREAM_EVENT}}},
                            **documented(400, 401, 404, 409, 413, 429, 500, 503, body_schema="AnthropicError")})
    async def create_message(body: MessagesCreate, who: str = tenant, idempotency_key: str | None = key) -> Response:
        """The agent's next turn, as Anthropic's Message, or its events with ``stream: true`` (``?beta=true``,
        the SDK's beta form, is the same route). A history that extends one of the tenant's sessions
        continues it; anything else starts a new session, the history its context, never run."""
        return await wire.create(body, who, idempotency_key)

    @router.post("/v1/messages/count_tokens", operation_id="count_message_tokens", response_model=None,
                 responses={200: {"description": "the count"},
                            **documented(400, 401, 413, 429, 500, 503, body_schema="AnthropicError")})
    async def count_tokens(body: CountTokensBody, who: str = tenant) -> Response:
        """How many tokens the request's system, messages and custom tools are."""
        return await wire.count(body)

    app.include_router(router)


def _publish(app: FastAPI) -> None:
    """Make ``app.openapi()`` define the ``AnthropicError`` body that these routes' errors refer to."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        spec = default()
        spec.setdefault("components", {}).setdefault("schemas", {})["AnthropicError"] = ANTHROPIC_ERROR
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
