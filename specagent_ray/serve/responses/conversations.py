"""The Conversations API's routes on the gateway (``/v1/conversations``): the same keys, tenants, rate
limits and body cap as the Responses API, errors in OpenAI's shape. Only wiring: the coordinator shard
that a conversation's id names keeps it (``sessions/conversation_records.py``, reached through the typed
``agents.port.CoordinatorPort``).

A conversation's items are those the client added and, for each response run with ``conversation``, that
response's input items then its output items (read from its session each time, so a response still
running shows what it has so far). A deleted item is left out wherever it came from.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Query, Response

from ..agents.port import CoordinatorPort
from ..core.errors import NotFound, documented
from .items import page
from .models import (
    ConversationCreate,
    ConversationItems,
    ConversationRef,
    ConversationUpdate,
    MessageItem,
)
from .route_docs import noticed
from .translate import ignored

CID = re.compile(r"^conv_\d{1,3}-[0-9a-f]{16}$")  # a conversation's id, as its coordinator shard mints it
Outputs = Callable[[str, str], Awaitable[list[dict[str, Any]]]]  # (response id, tenant) -> its output items
Resolve = Callable[[list[Any], str], Awaitable[list[Any]]]  # item_references -> the tenant's own items
LINKS = {name: {"operationId": op, "parameters": {"cid": "$response.body#/id"}} for name, op in (
    ("GetConversation", "get_conversation"), ("UpdateConversation", "update_conversation"),
    ("DeleteConversation", "delete_conversation"), ("ListItems", "list_conversation_items"),
    ("AddItems", "create_conversation_items"))}
LIST_ORDER = Query("desc", pattern="^(asc|desc)$")
INCLUDE = Query(None, max_length=16, description="accepted; every item is answered whole")


def stored_item(item: Any) -> dict[str, Any]:
    """An input item as a conversation keeps it: a message with a list of typed parts and a status."""
    out = item.model_dump(mode="json", exclude_none=True, by_alias=True)
    if isinstance(item, MessageItem):
        kind = "output_text" if item.role == "assistant" else "input_text"
        if isinstance(item.content, str):
            out["content"] = [{"type": kind, "text": item.content}]
        out.setdefault("status", "completed")
    return out


def conversation_of(value: str | ConversationRef | None) -> str | None:
    """The id in a response's ``conversation`` (an id, or ``{"id": ...}``)."""
    return value.id if isinstance(value, ConversationRef) else value


@dataclass
class ConversationStore:
    """What the Responses API's routes use of conversations: a conversation's items, to replay, and a
    response's link into it."""

    port: CoordinatorPort
    outputs: Outputs

    async def view(self, cid: str, who: str) -> dict[str, Any]:
        if not CID.match(cid):
            raise NotFound(f"no conversation {cid!r}", "conversation_id")
        return await self.port.conversation(cid, "get", owner=who, read=True)

    async def change(self, cid: str, op: str, arg: Any, who: str) -> dict[str, Any]:
        await self.view(cid, who)
        return await self.port.conversation(cid, op, arg, owner=who)

    async def items(self, view: dict[str, Any], who: str) -> list[dict[str, Any]]:
        """The conversation's items, oldest first."""
        out: list[dict[str, Any]] = []
        for entry in view["entries"]:
            if "item" in entry:
                out.append(entry["item"])
            else:
                out += entry["input"]
                out += await self.outputs(entry["response"], who)
        deleted = set(view["deleted_items"])
        return [i for i in out if i.get("id") not in deleted]

    async def history(self, cid: str, who: str) -> list[dict[str, Any]]:
        return await self.items(await self.view(cid, who), who)

    async def link(self, cid: str, rid: str, new: list[Any], who: str) -> None:
        """Response ``rid``, its new input ``new``, joins the conversation (once: a repeat adds nothing)."""
        await self.change(cid, "link", {"response": rid, "input": [stored_item(i) for i in new]}, who)


def public(view: dict[str, Any]) -> dict[str, Any]:
    return {k: view[k] for k in ("id", "object", "created_at", "metadata")}


def mount_conversations(app: FastAPI, port: CoordinatorPort, tenant: Any, key: Any, outputs: Outputs,
                        resolve: Resolve, errors: Callable[..., dict[int | str, dict[str, Any]]] = documented,
                        strict: bool = False) -> ConversationStore:
    """Add the Conversations API's routes to ``app``; answers the store the Responses routes use. A body's
    fields that this server does not know are ignored and named in a header (``strict``: refused), as the
    Responses routes do."""
    routes = _Routes(ConversationStore(port, outputs), tenant, key, resolve, errors, strict)
    _mount_conversation(app, routes)
    _mount_items(app, routes)
    return routes.store


@dataclass
class _Routes:
    """What the Conversations API's routes share: the store, the gateway's dependencies for the caller's
    tenant and Idempotency-Key, and how a body is read (``mount_conversations``' arguments)."""

    store: ConversationStore
    tenant: Any
    key: Any
    resolve: Resolve
    errors: Callable[..., dict[int | str, dict[str, Any]]]
    strict: bool

    def note(self, body: Any, answer: Response) -> None:
        answer.headers.update(noticed(ignored(body, self.strict)))

    async def given(self, items: list[Any], who: str) -> list[dict[str, Any]]:
        return [stored_item(i) for i in await self.resolve(items, who)]


def _mount_conversation(app: FastAPI, r: _Routes) -> None:
    """A conversation's create, read, metadata update and delete."""
    store, tenant, key, errors, note, given = r.store, r.tenant, r.key, r.errors, r.note, r.given

    @app.post("/v1/conversations", operation_id="create_conversation",
              responses={200: {"description": "the conversation", "links": LINKS}, **errors(400, 404, 413)})
    async def create_conversation(body: ConversationCreate, answer: Response, who: str = tenant,
                                  idempotency_key: str | None = key) -> dict[str, Any]:
        """A conversation, with its first items (context for the responses that use it: nothing runs)."""
        note(body, answer)
        items = await given(list(body.items or []), who)
        return public(await store.port.create_conversation(items, dict(body.metadata or {}), who, idempotency_key))

    @app.get("/v1/conversations/{cid}", operation_id="get_conversation", responses=errors(404))
    async def get_conversation(cid: str, who: str = tenant) -> dict[str, Any]:
        return public(await store.view(cid, who))

    @app.post("/v1/conversations/{cid}", operation_id="update_conversation", responses=errors(400, 404))
    async def update_conversation(cid: str, body: ConversationUpdate, answer: Response,
                                  who: str = tenant) -> dict[str, Any]:
        """Replace the conversation's metadata."""
        note(body, answer)
        return public(await store.change(cid, "metadata", dict(body.metadata), who))

    @app.delete("/v1/conversations/{cid}", operation_id="delete_conversation", responses=errors(404))
    async def delete_conversation(cid: str, who: str = tenant) -> dict[str, Any]:
        """Delete the conversation: 404 for it from now on (the responses it holds stay theirs)."""
        await store.change(cid, "delete", None, who)
        return {"id": cid, "object": "conversation.deleted", "deleted": True}


def _mount_items(app: FastAPI, r: _Routes) -> None:
    """A conversation's items: list, add, read one, delete one."""
    store, tenant, errors, note, given = r.store, r.tenant, r.errors, r.note, r.given

    @app.get("/v1/conversations/{cid}/items", operation_id="list_conversation_items", responses=errors(400, 404))
    async def list_items(cid: str, who: str = tenant, limit: int = Query(20, ge=1, le=100), order: str = LIST_ORDER,
                         after: str | None = Query(None, max_length=200),
                         include: list[str] | None = INCLUDE) -> dict[str, Any]:
        """The conversation's items, newest first unless ``order=asc``."""
        return page(await store.history(cid, who), limit, order, after)

    @app.post("/v1/conversations/{cid}/items", operation_id="create_conversation_items",
              responses=errors(400, 404, 413))
    async def add_items(cid: str, body: ConversationItems, answer: Response, who: str = tenant,
                        include: list[str] | None = INCLUDE) -> dict[str, Any]:
        """Add items (context: nothing in them runs); answers the items added, with their ids."""
        note(body, answer)
        added = (await store.change(cid, "add", await given(list(body.items), who), who))["added"]
        return page(added, len(added), "asc", None)

    @app.get("/v1/conversations/{cid}/items/{item_id}", operation_id="get_conversation_item",
             responses=errors(404))
    async def get_item(cid: str, item_id: str, who: str = tenant) -> dict[str, Any]:
        for item in await store.history(cid, who):
            if item.get("id") == item_id:
                return item
        raise NotFound(f"no item {item_id!r} in conversation {cid}")

    @app.delete("/v1/conversations/{cid}/items/{item_id}", operation_id="delete_conversation_item",
                responses=errors(404))
    async def delete_item(cid: str, item_id: str, who: str = tenant) -> dict[str, Any]:
        """Delete one item; answers the conversation."""
        if item_id not in {i.get("id") for i in await store.history(cid, who)}:
            raise NotFound(f"no item {item_id!r} in conversation {cid}")
        return public(await store.change(cid, "delete_item", item_id, who))
