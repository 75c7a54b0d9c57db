"""The server's tool sources as a session sees them: which requests they take, the task a request names,
and the tool catalog a session gets.

Guarantees: a request names only a configured source (the client never picks a command or a URL) and
only a method the profile serves (403 otherwise: a client cannot switch write verification off); a
tau2 source's tool catalog is built once and cached; an MCP source's is described again for each new
session (the tool host answers from memory) and replaced only when its server came back with other
tools, so a running session keeps the catalog it began with; an MCP source that is down, or a source
whose package or command is not installed here, answers 409.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ...protocol.types import History, Task, Termination, Tier, Trajectory
from ...tools.tiers import TierTable
from ..core.api import CreateSession, refusal
from ..core.catalog import Catalog
from ..core.config import (
    BENCHMARKS,
    AppConfig,
    BfclSource,
    ClientSource,
    McpSource,
    SimEngines,
    Tau2Source,
    unavailable_sources,
)
from ..core.errors import BadRequest, Conflict, Forbidden
from ..core.tenants import TenantRules
from ..core.views import FinishedSession
from .tool_host import ToolHostClient

log = logging.getLogger(__name__)


def benchmark_name(source: Any) -> str:
    """The benchmark a tool source serves (``tasks.benchmark`` loads it): a tau2 domain,
    ``bfcl-<category>``, or '' for a source that is no benchmark."""
    if isinstance(source, BfclSource):
        return f"bfcl-{source.category}"
    return source.domain if isinstance(source, Tau2Source) else ""


class ToolSources:
    def __init__(self, cfg: AppConfig, tool_host: ToolHostClient):
        self.cfg = cfg
        self.tool_host = tool_host
        self.rules = TenantRules(cfg.tenants)
        self._catalogs: dict[str, Catalog] = {}
        self.unavailable = unavailable_sources(cfg.tool_sources)  # name -> what is missing, in one line

    def check(self, req: CreateSession, owner: str = ""):
        """The configured source the request names, if the request suits it, the engines and ``owner``'s
        tenant (400 if not; 403 for a method or source the server or the tenant does not offer; 409 for a
        source whose package or command is not installed here)."""
        source = self.cfg.tool_sources.get(req.tool_source)
        if source is None:
            raise BadRequest(f"unknown tool source {req.tool_source!r}; this server offers: "
                             f"{', '.join(sorted(self.cfg.tool_sources))}")
        if req.tool_source in self.unavailable:
            why = ("its MCP server's command is not installed here (the server log names it)"
                   if isinstance(source, McpSource) else self.unavailable[req.tool_source])  # no command lines
            raise Conflict(f"tool source {req.tool_source!r} is unavailable: {why}")
        method = req.method or self.cfg.defaults.method
        if method not in self.cfg.methods:
            raise Forbidden(f"method {method!r} is not served here; this server serves: {', '.join(self.cfg.methods)}")
        self.rules.allow(owner, method, req.tool_source)
        if req.client_tools and not isinstance(source, ClientSource):
            raise BadRequest(f"client_tools need a client tool source; {req.tool_source!r} is {source.kind}")
        why = refusal(self.cfg, source, req.user)
        if why is not None:
            raise BadRequest(why)
        if req.output_format is not None and isinstance(self.cfg.engines, SimEngines):
            raise BadRequest("output_format needs model or scripted engines: simulated engines replay benchmark "
                             "messages", "output_format")
        if req.user == "client" and not req.message:
            raise BadRequest("a client-user session needs an opening message" if isinstance(source, BENCHMARKS)
                             else f"a {source.kind} session needs user 'client' and an opening message")
        self._check_more(req, owner, method)
        return source

    def _check_more(self, req: CreateSession, owner: str, method: str) -> None:
        """A session's ``more_sources``: each a configured MCP source, available, the tenant's, and named once."""
        names = [u.tool_source for u in req.more_sources]
        if len(set(names) | {req.tool_source}) != len(names) + 1:
            raise BadRequest("a tool source is named more than once")
        for name in names:
            if not isinstance(self.cfg.tool_sources.get(name), McpSource):
                raise BadRequest(f"more_sources: {name!r} is no MCP tool source here")
            if name in self.unavailable:
                raise Conflict(f"tool source {name!r} is unavailable: its MCP server's command is not installed here")
            self.rules.allow(owner, method, name)

    async def warm(self) -> None:
        """Load every tau2 source's domain and catalog and every BFCL source's cases now (about 1 s of
        CPU each, once per process), so that the first sessions do not pay it on the event loop's time.
        A source whose package is missing is skipped with one warning line: only it is unavailable."""
        for name, source in self.cfg.tool_sources.items():
            if name in self.unavailable:
                log.warning("%s", self.unavailable[name])
            elif isinstance(source, Tau2Source):
                req = CreateSession(tool_source=name, task_id="warm-up", user="client", message="-")
                await self.catalog(req, source)
            elif isinstance(source, BfclSource):
                await self.bfcl_cases(source)

    async def graded(self, s: FinishedSession) -> str | None:
        """Set a finished tau2 session's reward; the reason, if tau2's evaluator cannot replay its record."""
        try:
            s.reward = await asyncio.to_thread(self.grade, s)
        except ValueError as exc:  # tau2 replays the record and refuses one its world disagrees with
            log.warning("session %s could not be graded: %s", s.id, exc)
            return "tau2's evaluator could not replay this session's record (see the server log)"
        return None

    @staticmethod
    def grade(s: FinishedSession) -> float:
        """The benchmark's own reward for a finished session (blocking: run it in a thread)."""
        from ...tasks import benchmark

        trajectory = Trajectory(History(s.task, tuple(s.steps)), Termination(s.termination))
        return benchmark(s.domain).grade(s.task, trajectory)

    def domain_of(self, req: CreateSession) -> str:
        """The benchmark a request's source serves: a tau2 domain, ``bfcl-<category>``, or ''."""
        return benchmark_name(self.cfg.tool_sources[req.tool_source])

    async def task(self, req: CreateSession, source) -> Task:
        """The task a request names: a tau2 task or BFCL case (by id) for those sources, else an ad-hoc one."""
        if isinstance(source, BfclSource):
            cases = await self.bfcl_cases(source)
            if req.task_id not in cases:
                raise BadRequest(f"task_id {req.task_id!r} is not a BFCL {source.category} case "
                                 f"({len(cases)} cases, e.g. {', '.join(list(cases)[:3])})")
            case = cases[req.task_id]
            return Task(case.id, case.turns[0] if req.user == "simulated" else req.message or "", case)
        if not isinstance(source, Tau2Source):
            return Task("adhoc", req.message or "")
        domain = await self.domain(source.domain)
        if req.task_id is None or req.task_id not in domain.tasks:
            raise BadRequest(f"task_id {req.task_id!r} is not a {source.domain} task "
                             f"({len(domain.tasks)} tasks, e.g. {', '.join(list(domain.tasks)[:3])})")
        if req.user == "simulated":
            from ...tasks import benchmark

            return benchmark(source.domain).task(req.task_id)  # the scripted customer's opening
        return Task(req.task_id, req.message or "", domain.tasks[req.task_id])  # a tau2 user speaks first in the runner

    @staticmethod
    async def bfcl_cases(source: BfclSource) -> dict[str, Any]:
        from ...tools.bfcl import load_cases

        return await asyncio.to_thread(load_cases, source.category)

    @staticmethod
    async def domain(name: str):
        from ...tools.tau2 import Tau2Domain

        return await asyncio.to_thread(Tau2Domain.load, name)

    async def catalog(self, req: CreateSession, source) -> Catalog:
        """The session's tools: its source's, then each of ``more_sources``', each narrowed to its
        ``allowed_tools`` (400 naming any the source lacks, or a tool name in two sources)."""
        catalog = _narrowed(await self._catalog(req, source), req.allowed_tools, req.tool_source)
        for use in req.more_sources:
            more = CreateSession(tool_source=use.tool_source, user="client", message="-")
            tools = await self._catalog(more, self.cfg.tool_sources[use.tool_source])
            catalog = catalog.joined(_narrowed(tools, use.allowed_tools, use.tool_source), use.tool_source)
        return catalog

    async def _catalog(self, req: CreateSession, source) -> Catalog:
        """The source's tools under its tiers (the client's own tools for client sources; see the module doc):
        the benchmark's or the MCP server's tiers, then the source's ``overrides`` and ``tier_rules``. A rule
        or override naming a tool the source lacks (an MCP server that dropped it) is a 409, and logged."""
        try:
            return await self._tiered_catalog(req, source)
        except ValueError as exc:
            log.warning("tool source %r: %s", req.tool_source, exc)
            raise Conflict(f"tool source {req.tool_source!r} is misconfigured: {exc}") from None

    async def _tiered_catalog(self, req: CreateSession, source) -> Catalog:
        if isinstance(source, ClientSource):
            from ...tools.mcp import effect_of

            return Catalog({t.name: t.parameters for t in req.client_tools},
                           {t.name: effect_of(t.name, t.read_only, source.trusted, source.reads())
                            for t in req.client_tools}).of_source(source, req.tool_source)
        if isinstance(source, BfclSource):  # each case has its own backends: a catalog per case
            from ...tools.bfcl import effect, load_cases

            tools = load_cases(source.category)[req.task_id].tools(typed=False)  # type: ignore[index]
            return Catalog(tools, {n: effect(n) for n in tools}).of_source(source, req.tool_source)
        cached = self._catalogs.get(req.tool_source)
        if cached is None or isinstance(source, McpSource):
            if isinstance(source, Tau2Source):
                d = await self.domain(source.domain)
                base = d.tiers() if source.domain_tiers else TierTable({n: Tier.of(d.effect(n)) for n in d.tool_schemas})
                cached = Catalog.tiered(d.tool_schemas, source.tier_table(base, req.tool_source), d.policy)
            else:
                assert isinstance(source, McpSource)
                cached = await self._mcp_catalog(req, source, cached)
            self._catalogs[req.tool_source] = cached
        return cached

    async def _mcp_catalog(self, req: CreateSession, source: McpSource, cached: Catalog | None) -> Catalog:
        try:
            tools = await self.tool_host.describe(req.tool_source)
        except Exception as exc:  # noqa: BLE001 - the server is configured but down
            log.warning("tool source %r cannot describe its tools: %s", req.tool_source, exc)
            raise Conflict(f"tool source {req.tool_source!r} is unavailable; try again later") from None
        schemas = {n: t["parameters"] for n, t in tools.items()}
        base = TierTable({n: Tier(t.get("tier", t["effect"])) for n, t in tools.items()})
        fresh = Catalog.tiered(schemas, source.tier_table(base, req.tool_source))
        same = cached is not None and (cached.schemas, cached.tiers) == (fresh.schemas, fresh.tiers)
        if not same:
            return fresh  # a new object: running sessions keep the one they have
        return cached


def _narrowed(full: Catalog, allowed: list[str] | None, name: str) -> Catalog:
    """``full`` narrowed to ``allowed`` (400 naming any tool the source lacks)."""
    missing = sorted(set(allowed or ()) - set(full.schemas))
    if missing:
        raise BadRequest(f"allowed_tools names tools that {name!r} does not have: {', '.join(missing)}")
    return full.narrowed(None if allowed is None else set(allowed))
