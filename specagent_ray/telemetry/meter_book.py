"""The meter's book: MEASURED windows joined with the engine calls that ran in them.

Windows arrive per (role, node) from the node meters (``node_meter.py``); spans, one per engine call, arrive
per role from every coordinator shard, so the split sees every request that shared the devices. The rule:
a window's GPU-seconds and DRAM bytes go to the role's calls active in it, in proportion to the tokens each
processed in it (``attribution.spread``: a call's tokens spread evenly over its time). A window in which no
call of the role was active is *unattributed*: busy time with no request, reported, never charged.

A role's devices are one pool: every node that hosts the role is split among all the role's calls. With
several replicas of a role, a call can get a share of another replica's window; per tenant and in total
the figures are exact, per request they are exact per role.

Windows are kept live for ``seal_after_s`` (the longest a call may still be running over them), then
sealed: attributed once and for all and added to the totals by (tenant, day, role) and (session, role).
Queries add the live windows' attribution to the sealed totals, so answers are current.

Guarantees (each has a test):
- conservation: for every role, charged + unattributed == measured, sealed and live, to float rounding;
- a role is reported measured only while every node that hosts it has a working meter; otherwise its
  figures are None, and the callers fall back to ESTIMATED;
- nothing is charged twice: a sealed window is never attributed again.
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from typing import Any

from .attribution import Attributed, Attribution, Span, Window, attribute, spread

Key = tuple[str, str, str]  # (tenant, session id, UTC day of the call's end)


def day_of(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).date().isoformat()


def span_of(tenant: str, session: str, start: float, end: float, tokens: int) -> Span:
    return Span((tenant, session, day_of(end)), start, end, tokens)


class MeterBook:
    """See the module's docstring. Not thread-safe: one owner (the meter fleet's replica) calls it."""

    def __init__(self, seal_after_s: float = 30.0, max_sessions: int = 100_000):
        if seal_after_s <= 0:
            raise ValueError(f"seal_after_s must be > 0, got {seal_after_s}")
        self.seal_after_s, self.max_sessions = seal_after_s, max_sessions
        self._windows: dict[tuple[str, str], list[Window]] = defaultdict(list)  # (role, node) -> live windows
        self._spans: dict[str, list[Span]] = defaultdict(list)  # role -> spans that live windows may need
        self._sealed_until: dict[str, float] = {}
        self.by_tenant: dict[tuple[str, str, str], Attributed] = {}  # (tenant, day, role), sealed
        self.by_session: OrderedDict[tuple[str, str], Attributed] = OrderedDict()  # (session, role), sealed
        self.unattributed: dict[str, Attributed] = {}  # role -> sealed busy time no call was active in
        self.measured: dict[str, Attributed] = {}  # role -> every sealed window's totals
        self.nodes: dict[str, dict[str, str | None]] = defaultdict(dict)  # role -> node -> None or why unmeasured
        self.late_spans = 0
        self._live_cache: dict[str, Attribution] = {}  # role -> its live windows' attribution, until either changes

    # -- input ---------------------------------------------------------------------------------------
    def node_state(self, role: str, node: str, reason: str | None) -> None:
        """Node ``node`` hosts ``role``; ``reason`` is None while its meter measures, else why it does not."""
        self.nodes[role][node] = reason

    def forget_node(self, role: str, node: str) -> None:
        """The role left the node (its replica ended): the node no longer decides the role's state."""
        self.nodes[role].pop(node, None)

    def add_windows(self, role: str, node: str, windows: Iterable[Window]) -> None:
        live = self._windows[(role, node)]
        live.extend(windows)
        live.sort(key=lambda w: w.start)
        self._live_cache.pop(role, None)

    def add_spans(self, role: str, spans: Iterable[Span]) -> None:
        sealed = self._sealed_until.get(role, float("-inf"))
        for s in spans:
            self.late_spans += s.start < sealed  # its share of windows already sealed went unattributed
            self._spans[role].append(s)
        self._live_cache.pop(role, None)

    # -- sealing -------------------------------------------------------------------------------------
    def seal(self, now: float) -> dict[tuple[str, str], Attributed]:
        """Attribute the windows that ended ``seal_after_s`` before ``now``, for good. Returns what was
        charged by (tenant, role) in this call (for counters that only go up)."""
        cut = now - self.seal_after_s
        charged: dict[tuple[str, str], Attributed] = {}
        self._live_cache.clear()
        for (role, node), live in list(self._windows.items()):
            done = [w for w in live if w.end <= cut]
            if not done:
                continue
            self._windows[(role, node)] = live[len(done):] if live[:len(done)] == done else \
                [w for w in live if w.end > cut]
            a = attribute(done, spread(done, self._spans[role]))
            self._fold(role, a, charged)
            self._sealed_until[role] = max(self._sealed_until.get(role, cut), cut)
        keep = cut - self.seal_after_s  # a window that arrives up to seal_after_s late still finds its calls
        for role, spans in self._spans.items():
            self._spans[role] = [s for s in spans if s.end > keep]
        return charged

    def _fold(self, role: str, a: Attribution, charged: dict[tuple[str, str], Attributed]) -> None:
        self.measured[role] = self.measured.get(role, Attributed()) + a.totals
        self.unattributed[role] = self.unattributed.get(role, Attributed()) + a.unattributed
        for (tenant, session, day), share in a.requests.items():
            _add(self.by_tenant, (tenant, day, role), share)
            _add(charged, (tenant, role), share)
            _add(self.by_session, (session, role), share)
            self.by_session.move_to_end((session, role))
        while len(self.by_session) > self.max_sessions:
            self.by_session.popitem(last=False)

    def _live(self, role: str) -> Attribution:
        """The live windows' attribution (computed once per change of the role's windows or spans)."""
        if role not in self._live_cache:
            out = Attribution()
            for (r, _), live in self._windows.items():
                if r == role and live:
                    out = out + attribute(live, spread(live, self._spans[role]))
            self._live_cache[role] = out
        return self._live_cache[role]

    # -- answers -------------------------------------------------------------------------------------
    def state(self, role: str) -> str | None:
        """None if ``role`` is measured now (it has nodes and each has a working meter), else why not."""
        nodes = self.nodes.get(role)
        if not nodes:
            return "no meter ran on this role's nodes"
        broken = {n: why for n, why in nodes.items() if why is not None}
        return None if not broken else "; ".join(f"node {n[:12]}: {why}" for n, why in sorted(broken.items()))

    def roles(self) -> list[str]:
        return sorted(set(self.nodes) | {r for r, _ in self._windows} | set(self._spans))

    def tenant_usage(self, tenant: str | None = None, since: str | None = None) -> dict[str, Any]:
        """{tenant: {day: {role: {gpu_seconds, dram_bytes}}}} for the roles measured now, sealed and live."""
        out: dict[str, Any] = {}
        for role in self.roles():
            if self.state(role) is not None:
                continue
            rows = {(t, d): a for (t, d, r), a in self.by_tenant.items() if r == role}
            for (t, _, d), a in self._live(role).requests.items():
                _add(rows, (t, d), a)
            for (t, d), a in rows.items():
                if (tenant is None or t == tenant) and (since is None or d >= since):
                    out.setdefault(t, {}).setdefault(d, {})[role] = figures(a)
        return out

    def session(self, session: str) -> dict[str, Attributed]:
        """The session's measured share by role, for the roles measured now."""
        out: dict[str, Attributed] = {}
        for role in self.roles():
            if self.state(role) is not None:
                continue
            a = self.by_session.get((session, role), Attributed())
            for (_, sid, _), share in self._live(role).requests.items():
                a = a + share if sid == session else a
            if a.tokens > 0:
                out[role] = a
        return out

    def totals(self) -> dict[str, Any]:
        """Per role: measured, charged to calls and unattributed (sealed and live), and its state."""
        out = {}
        for role in self.roles():
            live = self._live(role)
            measured = self.measured.get(role, Attributed()) + live.totals
            unattributed = self.unattributed.get(role, Attributed()) + live.unattributed
            charged = sum((a for (_, _, r), a in self.by_tenant.items() if r == role), Attributed())
            charged = sum(live.requests.values(), charged)
            out[role] = {"measured": figures(measured), "charged": figures(charged),
                         "unattributed": figures(unattributed), "state": self.state(role) or "measured",
                         "nodes": len(self.nodes.get(role, {}))}
        return {"roles": out, "late_spans": self.late_spans}


def figures(a: Attributed) -> dict[str, Any]:
    return {"gpu_seconds": a.gpu_seconds, "dram_bytes": a.dram_bytes}


def _add(table: dict, key: Any, a: Attributed) -> None:
    table[key] = table[key] + a if key in table else a
