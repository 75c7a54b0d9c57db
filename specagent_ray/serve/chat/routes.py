"""``POST /v1/chat/completions`` on the gateway: the same keys, tenants, rate limits, body cap and
Idempotency-Key as every route, over the shared agent service (``agents/service.py``). Thin: the request is
translated by ``translate.py``, the turn's snapshot by ``answer.py``.

A stateless client resends the whole conversation each time. The route finds the tenant's session that the
history already is (``AgentService.bind``: the binder's index, then the sessions its minted call ids name)
and posts the new input as that session's next turn, so one agent loop is one session: its adaptive K, its
staged write and its engines' prefix caches live on. Anything else (no match, a replay of an earlier point,
other instructions, tools or model) starts a new session whose context is the history: nothing in a
replayed history ever runs. Another tenant's history is no match, and nothing of its session shows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

from ..agents.fields import NOTICES, noticed, publish_models
from ..agents.port import TurnPost
from ..agents.service import AgentService, Started
from ..agents.terms import Terms
from ..agents.transcript import canon_of
from ..core.errors import ApiError, Conflict, documented
from .answer import DONE, Chunks, Turn, completion, error_chunk, failure, sse
from .models import STREAM_EVENT, ChatCreate
from .translate import (
    ChatTurn,
    applied,
    continues,
    dropped,
    ignored,
    meta_of,
    translate,
)

log = logging.getLogger(__name__)
API = "Chat Completions"
FORKS = ("not_latest", "handoff")  # a bound session that cannot take this turn: start a new one instead


class ChatEvents(StreamingResponse):
    media_type = "text/event-stream"


class ChatFlow:
    """The route's logic over the agent ``service``: which turn a request runs, its stream, and what the
    binder remembers of it."""

    def __init__(self, service: AgentService, terms: Terms):
        self.service, self.terms = service, terms

    async def begin(self, turn: ChatTurn, body: ChatCreate, who: str, key: str | None,
                    now: int) -> tuple[Started, bool]:
        """The turn this request runs, and whether it continues a session (else it started one)."""
        service, meta = self.service, meta_of(body, now, turn.request.client_tools)
        found = await service.bind(who, turn.reading.history) if turn.reading.bindable() else None
        if found is not None and found[1] and continues(turn, await service.request_of(found[0].sid, who)):
            post = TurnPost(previous=found[0].turn, inputs=list(turn.inputs), meta=meta)
            try:
                started = await service.post(found[0].sid, post, who, key, wait=not body.stream)
                # a post that did not wait answers its summary's event count, not its records (issue 54:
                # AgentService.post passes it on as ``given``; until it does not, read the records afresh)
                return (started if isinstance(started.given, list) else replace(started, given=None)), True
            except Conflict as exc:  # the session moved on meanwhile, or will not take it: a fork
                if exc.code not in FORKS:
                    raise
        return await service.start(turn.request, meta, who, key), False

    def remember(self, turn: ChatTurn, started: Started, snap: dict[str, Any], who: str) -> None:
        """Index what the client will replay next: its history, its new input and the turn's output."""
        self.service.remember(who, [*turn.reading.history, *turn.said, *canon_of(snap["output"])], started)

    async def stream(self, turn: ChatTurn, started: Started, info: Turn, who: str, usage: bool) -> AsyncIterator[str]:
        """The turn's chunks, then ``[DONE]``; an error after the stream began is its last chunk."""
        chunks = Chunks(info, usage)
        try:
            async for snap in self.service.follow(started, who, whole=False):
                if (err := failure(snap)) is not None:
                    yield error_chunk(err.status, err.message, err.code)
                    return
                if snap["status"] != "in_progress":
                    self.remember(turn, started, snap, who)  # before the end is sent: the next request binds
                for chunk in chunks.feed(snap):
                    yield sse(chunk)
            yield DONE
        except ApiError as exc:
            yield error_chunk(exc.status, exc.message, exc.code)
        except Exception as exc:
            unavailable = type(exc).__name__ == "Unavailable"
            if not unavailable:
                log.exception("chat stream of session %s failed", started.sid)
            yield error_chunk(503 if unavailable else 500, str(exc) if unavailable else
                              "internal error (logged on the server)")


def mount_chat(app: FastAPI, service: AgentService, tenant: Any, key: Any, terms: Terms | None = None) -> None:
    """Add ``POST /v1/chat/completions`` to ``app`` over the agent ``service``; ``tenant`` and ``key`` are
    the gateway's dependencies for the caller's tenant and the Idempotency-Key header; ``terms``: the
    server's (the service's own where None)."""
    terms = terms or service.terms
    flow = ChatFlow(service, terms)
    publish_models(app, ("ChatCreate",), (*terms.methods, *terms.aliases))

    @app.post("/v1/chat/completions", operation_id="create_chat_completion", response_model=None,
              responses={200: {"description": "the chat completion (a JSON object), or its chunks (stream: true), "
                               "with the extension field `specagent` (session, turn, speculation figures)",
                               "content": {"application/json": {"schema": {"type": "object"}},
                                           "text/event-stream": {"itemSchema": STREAM_EVENT}},
                               "headers": NOTICES},
                         **documented(400, 401, 403, 404, 409, 413, 429, 500, 503, body_schema="OpenAIError")})
    async def create_chat_completion(body: ChatCreate, answer: Response, who: str = tenant,
                                     idempotency_key: str | None = key) -> Any:
        """The agent's next turn of a conversation that the request carries whole: a message, or calls on
        the client's tools (a write only once the verifier accepted it). The session is found from the
        history (one session for a whole agent loop); the headers name the fields ignored and the tools
        dropped."""
        now = int(time.time())
        notes = noticed(ignored(body, terms.strict), dropped(body), API)
        turn = translate(body, terms)
        started, continued = await flow.begin(turn, body, who, idempotency_key, now)
        info = Turn(started.sid, started.n, continued, body.model, now, applied(turn.request, terms.sampled))
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return ChatEvents(flow.stream(turn, started, info, who, usage), headers={"Cache-Control": "no-cache", **notes})
        async for snap in service.follow(started, who, whole=True):
            pass
        if (err := failure(snap)) is not None:
            raise err
        flow.remember(turn, started, snap, who)
        answer.headers.update(notes)
        return completion(snap, info, body.metadata)
