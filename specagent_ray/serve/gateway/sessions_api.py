"""The sessions API's routes (``/v1/sessions``) and the operators' ``/v1/stats`` and ``/v1/usage``: thin
routes over the typed coordinator calls (``agents.port.CoordinatorPort``). Bodies are the core's models
(``core/api.py``); a session's events stream through the gateway's shared polls (``event_hub.py``)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Query
from fastapi.responses import StreamingResponse

from ..agents.port import ApprovalPost, CoordinatorPort
from ..core.api import (
    CreateSession,
    SessionSummary,
    SessionTrajectory,
    ToolResult,
    UserMessage,
)
from ..core.config import GatewayConfig
from ..core.errors import documented
from ..log.records import SessionEvent
from .event_hub import EventHub

KEYED = (401, 429, 500, 503)  # every keyed route's own error statuses; each route adds its others
SESSION = "$response.body#/session_id"
# From a session's summary to the routes that take its id and nothing a fuzzer must guess: tool results
# need a call id from a tool_call_pending event, so they are reached from the event stream, not linked.
LINKS = {name: {"operationId": op, "parameters": {"sid": SESSION}, "description": text} for name, op, text in (
    ("GetSession", "get_session", "its trajectory"), ("SessionEvents", "session_events", "its event stream"),
    ("PostMessage", "post_message", "the user's next message (client-user sessions)"),
    ("CancelSession", "cancel_session", "cancel it"))}


class EventStream(StreamingResponse):
    media_type = "text/event-stream"


def answers(status: int, *errors: int) -> dict[int | str, dict[str, Any]]:
    """A session route's ``responses``: its answer (the session's summary, linked to the session's
    routes), the ``KEYED`` statuses and its own ``errors``."""
    return {status: {"model": SessionSummary, "links": LINKS}, **documented(*KEYED, *errors)}


def sse(event: dict[str, Any]) -> str:
    """One session event as a server-sent event: its seq is the id a client resumes after."""
    return f"id: {event['seq']}\nevent: {event['t']}\ndata: {json.dumps(event, default=str)}\n\n"


def mount_sessions(app: FastAPI, port: CoordinatorPort, hub: EventHub, cfg: GatewayConfig, tenant: Any, key: Any,
                   operator: Any) -> None:
    """Add the sessions API's routes to ``app``; ``tenant``, ``key`` and ``operator`` are the gateway's
    dependencies for the caller's tenant, the Idempotency-Key header and an operator's key."""
    _mount_inputs(app, port, tenant, key)
    _mount_reads(app, port, hub, cfg, tenant)
    _mount_operators(app, port, operator)


def _mount_inputs(app: FastAPI, port: CoordinatorPort, tenant: Any, key: Any) -> None:
    """A session's start and what its client sends it: messages, tool results, approval answers."""

    @app.post("/v1/sessions", status_code=201, operation_id="create_session", response_model=None,
              responses=answers(201, 400, 403, 409, 413))
    async def create_session(body: CreateSession, who: str = tenant,
                             idempotency_key: str | None = key) -> dict[str, Any]:
        """Start a session; its events stream from ``/v1/sessions/{id}/events``. With an
        ``Idempotency-Key``, a repeated create answers with the first session instead of starting another."""
        return await port.create(body, who, idempotency_key)

    @app.post("/v1/sessions/{sid}/messages", status_code=202, operation_id="post_message", response_model=None,
              responses=answers(202, 400, 404, 409, 413))
    async def post_message(sid: str, body: UserMessage, who: str = tenant,
                           idempotency_key: str | None = key) -> dict[str, Any]:
        """The user's next message (client-user sessions); an ``Idempotency-Key`` makes a repeat harmless."""
        return await port.post_message(sid, body, who, idempotency_key)

    @app.post("/v1/sessions/{sid}/tool_results", status_code=202, operation_id="post_tool_result",
              response_model=None, responses=answers(202, 400, 404, 409, 413))
    async def post_tool_result(sid: str, body: ToolResult, who: str = tenant) -> dict[str, Any]:
        """The result of a pending client-side tool call (see ``tool_call_pending`` events)."""
        return await port.post_tool_result(sid, body, who)

    @app.post("/v1/sessions/{sid}/approvals", status_code=202, operation_id="post_approval", response_model=None,
              responses=answers(202, 400, 404, 409, 413))
    async def post_approval(sid: str, body: ApprovalPost, who: str = tenant) -> dict[str, Any]:
        """The answer to an ``approval_request`` event (sessions created with ``approval``): approved, the
        verified write runs, once; denied, it never does. The same answer posted again changes nothing."""
        return await port.post_approval(sid, body, who)


def _mount_reads(app: FastAPI, port: CoordinatorPort, hub: EventHub, cfg: GatewayConfig, tenant: Any) -> None:
    """A session's event stream and trajectory, and its cancel."""

    @app.get("/v1/sessions/{sid}/events", response_class=EventStream, operation_id="session_events",
             responses={200: {"model": SessionEvent, "description": "a stream of session events"},
                        **documented(*KEYED, 404)})
    async def events(sid: str, after: int = Query(0, ge=0, description="the seq to start after"),
                     who: str = tenant) -> StreamingResponse:
        """Server-sent events, from ``after`` on: drafted, staged, accepted, rejected, tool_result, commit,
        fused_repair, strong_repair, agent_message, tool_call_pending, ..., final. Each has ``id: seq``."""
        first = await port.events(sid, after, 0.0, who)  # 404 before the stream starts

        async def stream():
            out = first
            for e in out["events"]:
                yield sse(e)
            if out["done"]:
                return
            with hub.follow(sid, after + len(out["events"]), who) as follower:  # one poll for every stream
                while not out["done"]:
                    if not out["events"]:
                        yield ": keep-alive\n\n"
                    out = await follower.next(cfg.events_wait_s)
                    for e in out["events"]:
                        yield sse(e)

        return EventStream(stream(), headers={"Cache-Control": "no-cache"})

    @app.get("/v1/sessions/{sid}", operation_id="get_session", response_model=None,
             responses={200: {"model": SessionTrajectory, "links": LINKS}, **documented(*KEYED, 404)})
    async def trajectory(sid: str, grade: bool = False, who: str = tenant) -> dict[str, Any]:
        """The committed trajectory, token usage, the resource report and (``grade=true``) tau2's reward."""
        return await port.trajectory(sid, grade, who)

    @app.delete("/v1/sessions/{sid}", operation_id="cancel_session", response_model=None,
                responses=answers(200, 404))
    async def cancel(sid: str, who: str = tenant) -> dict[str, Any]:
        """Cancel the session; it stays readable (``GET``) as ``cancelled``. A finished one is left as it is."""
        return await port.cancel(sid, who)


def _mount_operators(app: FastAPI, port: CoordinatorPort, operator: Any) -> None:
    """The operators' cluster-wide ``/v1/stats`` and ``/v1/usage``."""

    @app.get("/v1/stats", dependencies=[operator], operation_id="stats", responses=documented(*KEYED, 403))
    async def stats() -> dict[str, Any]:
        """Sessions by status, verifier batch sizes, coordinator overhead per committed step."""
        return await port.stats()

    @app.get("/v1/usage", dependencies=[operator], operation_id="usage", responses=documented(*KEYED, 403))
    async def usage(tenant: str | None = Query(None, max_length=64, description="one tenant (a name, or key-<hash>)"),
                    since: str | None = Query(None, pattern=r"^\d{4}-\d{2}-\d{2}$", description="first day, YYYY-MM-DD (UTC)")
                    ) -> dict[str, Any]:
        """Usage by tenant and day, from the session log: tokens by role, strong calls, GPU-seconds and strong
        HBM (MEASURED by the GPU meter where it ran, else ESTIMATED: each figure says which), sessions created
        and ended by status (``serve/sessions/usage.py``)."""
        return {"tenants": await port.usage(tenant, since), "label": "GPU-s and HBM measured or "
                "estimated, as each figure's source says; tokens as the engines reported them (simulated "
                "engines: the token model's)"}
