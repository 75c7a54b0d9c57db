"""Conversations (the OpenAI Conversations API): lists of items that a tenant keeps on the server, to
replay as a response's history (``conversation`` on a response, or a client such as the Agents SDK's
``OpenAIConversationsSession`` that lists them and replays them itself).

A conversation's records live in its shard's session log, under its id, beside the sessions: the same
lease, group commit and replay. Every change is answered only once its record is stored. Records:

- ``conversation``: its owner, creation time, metadata and the create's Idempotency-Key;
- ``conv_items``: items the client added (each with an id: the client's, or one given here);
- ``conv_response``: a response run with ``conversation``: its new input items; its output items are
  that response's, read from its session when the conversation is listed (``conversation_items.py``);
- ``conv_item_deleted``, ``conv_metadata``; ``final`` (status ``deleted``) ends it, and it is archived.

Guarantees: another tenant's conversation, and a deleted one, is one that does not exist (404); an item
id names one item of a conversation (a client's duplicate id is refused); a create repeated with the
same owner and Idempotency-Key answers with the first conversation. Items are context: nothing here runs.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import BadRequest, NotFound
from .shards import session_id

CID = re.compile(r"^conv_\d{1,3}-[0-9a-f]{16}$")
MAX_ITEMS = 2_000  # a conversation's entries (items, and responses as one entry each)
PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
Record = dict[str, Any]


def conversation_id(shard: int) -> str:
    return f"conv_{session_id(shard, secrets.token_hex(8))}"


def is_conversation(sid: str) -> bool:
    return sid.startswith("conv_")


@dataclass
class Conversation:
    """One conversation's state, a function of its records (``apply``)."""

    id: str
    owner: str
    created_at: int
    metadata: dict[str, str]
    key: str | None = None
    entries: list[Record] = field(default_factory=list)  # {"item": {...}} or {"response": rid, "input": [...]}
    deleted_items: set[str] = field(default_factory=set)
    deleted: bool = False

    def apply(self, r: Record) -> None:
        kind = r["t"]
        if kind == "conv_items":
            self.entries += [{"item": i} for i in r["items"]]
        elif kind == "conv_response":
            self.entries.append({"response": r["response"], "input": r["input"]})
        elif kind == "conv_item_deleted":
            self.deleted_items.add(r["id"])
        elif kind == "conv_metadata":
            self.metadata = dict(r["metadata"])
        elif kind == "final":
            self.deleted = True
        elif kind != "conversation":
            raise ValueError(f"conversation {self.id}: unknown record kind {kind!r}")

    def ids(self) -> set[str]:
        return {i["id"] for e in self.entries for i in ([e["item"]] if "item" in e else e["input"])}

    def view(self) -> dict[str, Any]:
        """What the gateway needs to answer: the object's fields, and its entries to read items from."""
        return {"id": self.id, "object": "conversation", "created_at": self.created_at, "metadata": self.metadata,
                "entries": self.entries, "deleted_items": sorted(self.deleted_items)}


class Conversations:
    """A shard's conversations. ``append(cid, record)`` queues a record in the session log; ``stored()``
    returns once everything queued is stored (503 otherwise: the change is queued, not acknowledged)."""

    def __init__(self, shard: int, append: Callable[[str, Record], None], stored: Callable[[], Awaitable[None]],
                 serving: Callable[[], None] = lambda: None, wall: Callable[[], float] = time.time):
        self.shard, self._append, self._stored, self.wall = shard, append, stored, wall
        self._serving = serving  # raises once the shard's coordinator was fenced
        self.all: dict[str, Conversation] = {}
        self._keys: dict[tuple[str, str], str] = {}

    async def create(self, items: list[Record], metadata: dict[str, str], owner: str,
                     idempotency_key: str | None = None) -> dict[str, Any]:
        self._serving()
        first = self._keys.get((owner, idempotency_key)) if idempotency_key else None
        if first is not None and first in self.all:
            return self.get(first, owner)
        c = Conversation(conversation_id(self.shard), owner, int(self.wall()), dict(metadata), idempotency_key)
        self.all[c.id] = c
        if idempotency_key:
            self._keys[(owner, idempotency_key)] = c.id
        self._record(c, {"t": "conversation", "owner": owner, "at": c.created_at, "metadata": c.metadata,
                         "idempotency_key": idempotency_key})
        if items:
            self._record(c, {"t": "conv_items", "items": self._identified(c, items)})
        await self._stored()
        return c.view()

    async def call(self, cid: str, op: str = "get", arg: Any = None, owner: str = "local") -> dict[str, Any]:
        """The gateway's call: conversation ``cid`` of ``owner``'s as it stands (``op="get"``), or ``change``d."""
        self._serving()
        return self.get(cid, owner) if op == "get" else await self.change(cid, op, arg, owner)

    def get(self, cid: str, owner: str) -> dict[str, Any]:
        return self._own(cid, owner).view()

    async def change(self, cid: str, op: str, arg: Any, owner: str) -> dict[str, Any]:
        """One change: ``add`` items (answered under ``added`` too), ``link`` a response (``{"response", "input"}``), ``delete_item`` an
        id, set ``metadata``, or ``delete`` the conversation. Answers its view once the record is stored."""
        c = self._own(cid, owner)
        if op == "add":
            record = {"t": "conv_items", "items": self._identified(c, arg)}
        elif op == "link":
            if any(e.get("response") == arg["response"] for e in c.entries):
                return c.view()  # a repeated request (its Idempotency-Key) links nothing twice
            record = {"t": "conv_response", "response": arg["response"], "input": self._identified(c, arg["input"])}
        elif op == "delete_item":  # the gateway checks that the id is one of the items it lists
            if arg in c.deleted_items:
                raise NotFound(f"no item {arg!r} in conversation {cid}")
            record = {"t": "conv_item_deleted", "id": arg}
        elif op == "metadata":
            record = {"t": "conv_metadata", "metadata": dict(arg)}
        elif op == "delete":
            record = {"t": "final", "status": "deleted"}
        else:
            raise ValueError(f"unknown conversation change {op!r}")
        self._record(c, record)
        await self._stored()
        return {**c.view(), "added": record.get("items", [])}

    def restore(self, cid: str, records: list[Record]) -> None:
        """Rebuild a conversation from its records (replay after a restart)."""
        first = records[0] if records else {}
        if first.get("t") != "conversation":
            raise ValueError(f"conversation {cid}: its log does not start with 'conversation'")
        c = Conversation(cid, first["owner"], int(first["at"]), dict(first.get("metadata") or {}),
                         first.get("idempotency_key"))
        for r in records[1:]:
            c.apply(r)
        self.all[cid] = c
        if c.key:
            self._keys[(c.owner, c.key)] = cid

    def _record(self, c: Conversation, record: Record) -> None:
        self._append(c.id, record)
        c.apply(record)

    def _own(self, cid: str, owner: str) -> Conversation:
        c = self.all.get(cid)
        if c is None or c.owner != owner or c.deleted:
            raise NotFound(f"no conversation {cid!r}", "conversation_id")
        return c

    def _identified(self, c: Conversation, items: list[Record]) -> list[Record]:
        """``items``, each with an id: its own where it has one (refused where the conversation has it
        already), a new one otherwise."""
        taken, out = c.ids(), []
        if len(c.entries) + len(items) > MAX_ITEMS:
            raise BadRequest(f"a conversation holds at most {MAX_ITEMS} entries; start a new one", "items")
        for item in items:
            given = item.get("id")
            if given in taken:
                raise BadRequest(f"item id {given!r} is in this conversation already", "items", "duplicate_item")
            ident = given or f"{PREFIX.get(item.get('type') or 'message', 'item')}_{secrets.token_hex(12)}"
            taken.add(ident)
            out.append({**item, "id": ident})
        return out
