"""The meter fleet: a ``NodeMeter`` wherever an engine holds GPUs, and the book that charges their windows.

Engine replicas report where they run (``placement``: role, Ray node, device indices) every few seconds;
the fleet starts a meter on each such node (a Ray actor with hard node affinity), tells it which devices
each role holds there, and drains its windows every ``poll_s``. A placement not renewed for ``ttl_s`` (the
replica ended, autoscaling took the node) is forgotten. A meter that dies is started again at the next poll;
the time in between is not measured (never invented). The coordinator shards send each engine call's span
(``spans``). The book (``meter_book.py``) does the charging.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .attribution import Attributed, Window
from .meter_book import MeterBook, span_of

log = logging.getLogger(__name__)
SpanRow = tuple[str, str, float, float, int]  # (tenant, session id, start, end, tokens processed)


async def call(meter: Any, method: str, *args: Any) -> Any:
    """A method of a meter: a Ray actor handle's (``.remote``, awaited) or a local object's."""
    fn = getattr(meter, method)
    out = fn.remote(*args) if hasattr(fn, "remote") else fn(*args)
    return await out if inspect.isawaitable(out) else out


class MeterFleet:
    """Guarantees: every node with a live placement has at most one meter; a role's windows on a node
    are those of the devices its replicas reported there; a meter that fails or dies makes its roles
    unmeasured (``book.state``) until it answers again."""

    def __init__(self, spawn: Callable[[str], Any], seal_after_s: float = 30.0, ttl_s: float = 10.0,
                 clock: Callable[[], float] = time.time,
                 on_charged: Callable[[dict[tuple[str, str], Attributed], dict[str, Attributed]], None] = lambda c, u: None):
        self.spawn, self.ttl_s, self.clock, self.on_charged = spawn, ttl_s, clock, on_charged
        self.book = MeterBook(seal_after_s)
        self.placements: dict[tuple[str, str], tuple[frozenset[int], float]] = {}
        self.meters: dict[str, Any] = {}
        self.assigned: dict[str, dict[str, frozenset[int]]] = defaultdict(dict)  # node -> role -> devices
        self.restarts = 0

    def placement(self, role: str, node: str, devices: list[int]) -> None:
        """An engine replica of ``role`` runs on ``node`` with these devices (a heartbeat: repeat it). No
        devices: nothing to meter there (vLLM on the CPU)."""
        if not devices:
            return
        old = self.placements.get((role, node), (frozenset(), 0.0))[0]
        self.placements[(role, node)] = (old | frozenset(devices), self.clock())

    def spans(self, role: str, rows: list[SpanRow]) -> None:
        self.book.add_spans(role, [span_of(*row) for row in rows])

    async def poll(self) -> None:
        """Expire placements, keep one meter per placed node, drain every meter, seal what is old enough."""
        now = self.clock()
        for (role, node), (_, seen) in list(self.placements.items()):
            if now - seen > self.ttl_s:
                del self.placements[(role, node)]
                self.book.forget_node(role, node)
        wanted: dict[str, dict[str, frozenset[int]]] = defaultdict(dict)
        for (role, node), (devices, _) in self.placements.items():
            wanted[node][role] = devices
        for node in list(self.meters):
            if node not in wanted:
                await self._retire(node)
        for node, roles in wanted.items():
            await self._poll_node(node, roles)
        self.on_charged(self.book.seal(now), self.book.unattributed)

    async def _poll_node(self, node: str, roles: dict[str, frozenset[int]]) -> None:
        shared = {r for r in roles for o in roles if o != r and roles[r] & roles[o]}
        try:
            meter = self.meters.get(node)
            if meter is None:
                meter = self.meters[node] = self.spawn(node)
                self.assigned.pop(node, None)
            for role, devices in roles.items():
                if self.assigned[node].get(role) != devices:
                    await call(meter, "assign", role, sorted(devices))
                    self.assigned[node][role] = devices
            drained = await call(meter, "drain")
        except Exception as exc:  # noqa: BLE001 - a dead meter: its roles are unmeasured until it is back
            log.warning("GPU meter on node %s failed (%s: %s); starting it again", node[:12],
                        type(exc).__name__, exc)
            self.meters.pop(node, None)
            self.restarts += 1
            for role in roles:
                self.book.node_state(role, node, f"meter restarting after {type(exc).__name__}")
            return
        for role, got in drained.items():  # a device two roles hold cannot be split between them by role
            why = f"a device is shared with another role ({sorted(roles[role])})" if role in shared else None
            self.book.node_state(role, node, got["reason"] or why)
            self.book.add_windows(role, node, [Window(*w) for w in got["windows"]])

    async def _retire(self, node: str) -> None:
        meter = self.meters.pop(node)
        self.assigned.pop(node, None)
        try:
            await call(meter, "stop")
        except Exception:  # noqa: BLE001 - the node may be gone already
            log.debug("meter on node %s did not stop cleanly", node[:12], exc_info=True)

    async def devices(self) -> dict[str, Any]:
        """Each node meter's own account, by node and role: its devices and the busy GPU-seconds they measured
        since it started (a meter that does not answer: its error)."""
        out: dict[str, Any] = {}
        for node, meter in list(self.meters.items()):
            try:
                out[node] = await call(meter, "status")
            except Exception as exc:  # noqa: BLE001 - a dead meter is reported, not raised
                out[node] = {"error": f"{type(exc).__name__}: {exc}"}
        return out

    def stats(self) -> dict[str, Any]:
        placements = [{"role": r, "node": n, "devices": sorted(d)} for (r, n), (d, _) in self.placements.items()]
        return {**self.book.totals(), "nodes": sorted(self.meters), "restarts": self.restarts, "placements": placements}
