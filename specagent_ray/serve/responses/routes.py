"""The Responses API's routes on the gateway: the same keys, tenants, rate limits, body cap and
Idempotency-Key as the sessions API, over the same agent service (``agents/service.py``). Thin: requests
are translated by ``responses/translate.py`` and ``responses/flow.py``, turns read back by the service
(``agents/readback.py``) and shaped as the Responses API's events by ``responses/items.py``.

- ``POST /v1/responses`` answers once the agent's turn ended (a message, a function call, an approval
  request); ``background: true`` answers at once (poll ``GET``); ``stream: true`` streams the Responses
  events, each with a ``sequence_number``, each sent only once its record is durable.
- ``POST /v1/responses/{id}/cancel`` cancels the conversation's session while that response runs (409 once
  it ended); ``DELETE /v1/responses/{id}`` ends the conversation and hides all its responses (404 after).
- Another tenant's response is one that does not exist (404), on every route.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from ..agents.service import AgentService, Started
from ..agents.terms import Terms
from ..core.errors import OPENAI_ERROR, RESPONSES
from .conversations import conversation_of, mount_conversations
from .flow import Flow
from .input_tokens import rendered
from .items import input_items, page, turn_start
from .models import InputTokensBody, ResponseCreate
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
from .tools import dropped, hosted
from .translate import ignored, parse_response_id


def mount_responses(app: FastAPI, service: AgentService, tenant: Any, key: Any) -> None:
    """Add the Responses API's routes to ``app`` over the agent ``service`` (its terms are the server's);
    ``tenant`` and ``key`` are the gateway's dependencies for the caller and the Idempotency-Key header."""
    _publish_schemas(app, service.terms)
    _answer_invalid(app)
    flow = Flow(service)
    flow.conversations = mount_conversations(app, service.port, tenant, key, flow.output_of, flow.resolve, errors,
                                             service.terms.strict)
    _mount_create(app, service, flow, tenant, key)
    _mount_reads(app, service, flow, tenant)


def _publish_schemas(app: FastAPI, terms: Terms) -> None:
    """Make ``app.openapi()`` publish OpenAI's error body and this server's ``ResponseCreate`` (its terms)."""
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        spec = default_openapi()
        schemas = spec["components"]["schemas"]
        schemas["OpenAIError"], (schemas["ResponseCreate"], defs) = OPENAI_ERROR, create_schema(terms)
        schemas.update(defs)
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def _answer_invalid(app: FastAPI) -> None:
    """A body that does not parse: 400 in OpenAI's shape on the Responses API's paths, FastAPI's 422 elsewhere."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        """A Responses API body that does not parse is a 400 naming the field, as OpenAI answers it (a
        field it does not know parses: ``noticed``)."""
        if not request.url.path.startswith(RESPONSES):
            return await request_validation_exception_handler(request, exc)
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if p != "body")
        return error_response(request, 400, f"{where}: {first['msg']}", param=where or None, code="invalid_value")


def _mount_create(app: FastAPI, service: AgentService, flow: Flow, tenant: Any, key: Any) -> None:
    """``POST /v1/responses`` (a turn) and ``POST /v1/responses/input_tokens`` (a count, nothing runs)."""
    terms = service.terms

    @app.post("/v1/responses", operation_id="create_response", response_model=None,
              responses={200: {"description": "the response (a JSON object), or its events (stream: true)",
                               "content": {"application/json": {"schema": {"type": "object"}},
                                           "text/event-stream": {"itemSchema": EVENT}},
                               "links": LINKS, "headers": NOTICES}, **errors(400, 403, 404, 409, 413)})
    async def create_response(body: ResponseCreate, answer: Response, who: str = tenant,
                              idempotency_key: str | None = key) -> Any:
        """A response: the next turn of an agent conversation (a new one without ``previous_response_id``).
        Its headers name the fields it ignored and the tools it dropped (``route_docs.noticed``)."""
        notes = noticed(ignored(body, terms.strict), dropped(body))
        turn, body = await flow.create(body, who, idempotency_key, int(time.time()))
        remember = partial(flow.remember, body, turn, who=who)
        if body.stream:
            return ResponseEvents(flow.stream(turn, who, done=remember), headers={"Cache-Control": "no-cache", **notes})
        answer.headers.update(notes)
        async for snap in service.follow(turn, who, whole=not body.background):
            if body.background:
                return snap
        remember(snap)
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
            history = await flow.history(cid, who)
        elif body.previous_response_id is not None:
            history = [ITEM.validate_python(i) for i in await service.history(*parse_response_id(
                body.previous_response_id), who)]
        if isinstance(body.input, list):
            body = body.model_copy(update={"input": await flow.resolve(list(body.input), who)})
        return {"object": "response.input_tokens", **await terms.counter.count_prompt(rendered(body, history))}


def _mount_reads(app: FastAPI, service: AgentService, flow: Flow, tenant: Any) -> None:
    """A response's read (or its events), cancel, delete, and its input items."""

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
            return await service.snapshot(sid, n, who)
        turn = Started(sid, n, turn_start(await service.visible(sid, n, who), n))
        after = -1 if starting_after is None else starting_after
        return ResponseEvents(flow.stream(turn, who, after), headers={"Cache-Control": "no-cache"})

    @app.post("/v1/responses/{rid:rid}/cancel", operation_id="cancel_response", response_model=None,
              responses=errors(404, 409))
    async def cancel_response(rid: str, who: str = tenant) -> dict[str, Any]:
        """Cancel a response in progress: its conversation's session ends as cancelled. Answers the
        response once its status is no longer in_progress (cancelled, or the end it reached first), or as
        it stands after ``events_wait_s``."""
        return await service.cancel_turn(*parse_response_id(rid), who)

    @app.delete("/v1/responses/{rid:rid}", operation_id="delete_response", response_model=None,
                responses=errors(404))
    async def delete_response(rid: str, who: str = tenant) -> dict[str, Any]:
        """Delete the conversation this response belongs to: it ends, and its responses answer 404."""
        sid, n = parse_response_id(rid)
        turn_start(await service.records(sid, who), n)  # 404 for a turn that never was
        await service.delete(sid, who)
        return {"id": rid, "object": "response.deleted", "deleted": True}

    @app.get("/v1/responses/{rid:rid}/input_items", operation_id="list_input_items", response_model=None,
             responses=errors(400, 404))
    async def list_input_items(rid: str, request: Request, who: str = tenant,
                               limit: int = Query(20, ge=1, le=100), order: str = Query("desc", pattern="^(asc|desc)$"),
                               after: str | None = Query(None, max_length=200)) -> dict[str, Any]:
        """The items the client sent in this response's request, newest first unless ``order=asc``."""
        sid, n = parse_response_id(rid)
        return page(input_items(await service.visible(sid, n, who), sid, n), limit, order, after)

