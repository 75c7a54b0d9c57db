"""The coordinator, as the agent service and the gateway's routes call it: one typed method per call.

``CoordinatorPort`` wraps the gateway's ``call(method, *args, owner=, retry=, **kwargs)`` (which routes a
call to the coordinator shard its session names, maps errors and waits out a restart for calls safe to
repeat: ``gateway/routes.py``). Nothing above it names a coordinator method by a string. The bodies a
turn takes (``TurnPost``, ``ApprovalPost``) are re-exported here, so the wires never import the sessions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..core.api import CreateSession, ToolResult, UserMessage
from ..log.records import TurnMeta
from ..sessions.turns import ApprovalPost, TurnPost

Call = Callable[..., Awaitable[Any]]  # (coordinator method, *args, owner=, retry=, **kwargs) -> its answer
__all__ = ["ApprovalPost", "Call", "CoordinatorPort", "TurnPost"]


class CoordinatorPort:
    """Each coordinator call, typed. ``key``: an Idempotency-Key; a call that carries one is retried
    while the coordinator restarts (it is safe to repeat), as reads, cancels and keyed posts are."""

    def __init__(self, call: Call):
        self.call = call

    async def create(self, req: CreateSession, owner: str, key: str | None = None,
                     turn: TurnMeta | None = None) -> dict[str, Any]:
        """Start a session; its summary (``session_id``, ...). ``turn``: an agent wire's first turn's meta."""
        extra = {"turn": turn} if turn is not None else {}
        return await self.call("create", req, owner=owner, idempotency_key=key, retry=key is not None, **extra)

    async def respond(self, sid: str, post: TurnPost, owner: str, key: str | None = None,
                      wait_s: float = 0.0) -> dict[str, Any]:
        """The session's next turn: its number (``turn``), where its records start (``start``) and, with
        ``wait_s``, its records once the agent's turn ended (``events``)."""
        return await self.call("respond", sid, post, owner=owner, idempotency_key=key, retry=key is not None,
                               wait_s=wait_s)

    async def events(self, sid: str, after: int, wait_s: float, owner: str, whole_turn: bool = False) -> dict[str, Any]:
        """The session's published records after ``after`` (``events``) and whether it ended (``done``)."""
        return await self.call("events", sid, after, wait_s, owner=owner, whole_turn=whole_turn)

    async def cancel(self, sid: str, owner: str) -> dict[str, Any]:
        return await self.call("cancel", sid, owner=owner)

    async def delete(self, sid: str, owner: str) -> dict[str, Any]:
        return await self.call("delete", sid, owner=owner)

    async def post_message(self, sid: str, msg: UserMessage, owner: str, key: str | None = None) -> dict[str, Any]:
        return await self.call("post_message", sid, msg, owner=owner, idempotency_key=key, retry=key is not None)

    async def post_tool_result(self, sid: str, res: ToolResult, owner: str) -> dict[str, Any]:
        return await self.call("post_tool_result", sid, res, owner=owner)

    async def post_approval(self, sid: str, post: ApprovalPost, owner: str) -> dict[str, Any]:
        return await self.call("post_approval", sid, post, owner=owner)

    async def trajectory(self, sid: str, grade: bool, owner: str) -> dict[str, Any]:
        return await self.call("trajectory", sid, grade, owner=owner)

    async def conversation(self, cid: str, op: str, arg: Any = None, owner: str = "", read: bool = False) -> Any:
        """A conversation's call ``op`` (``get``, ``link``, ``add``, ...); ``read``: safe to repeat."""
        args = (cid, op) if op == "get" and arg is None else (cid, op, arg)
        return await self.call("conversation", *args, owner=owner, **({"retry": True} if read else {}))

    async def create_conversation(self, items: list[dict[str, Any]], metadata: dict[str, Any], owner: str,
                                  key: str | None = None) -> dict[str, Any]:
        return await self.call("create_conversation", items, metadata, owner=owner, idempotency_key=key,
                               retry=key is not None)

    async def stats(self) -> dict[str, Any]:
        return await self.call("stats")

    async def usage(self, tenant: str | None, since: str | None) -> Any:
        return await self.call("usage", tenant, since)
