"""Simulated engines as served replicas (SIMULATED models, real serving path).

``SimEngine`` answers batches the way an engine replica would: a batch costs the latency model's time,
then each request is answered by the seeded simulated policy or verifier of its session. A replica
keeps one session's models, prefix caches included, for as long as the session is routed to it (the
coordinator keeps that affinity), like an engine's KV cache. A restarted replica starts cold. A session
with parallel calls (``SimRequest.parallel``) gets models that draft its independent calls together. A
mid replica (the three-tier chain) answers verifies only, with the session's mid judge (``sim/gold.py``'s
``mid_judge`` beside the session's simulated verifier, on the domain's weak error rates).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from ...protocol.types import History, Proposal, Review, Task
from ..core.config import SimEngines
from .batch_wire import SimRequest, unpacked

Role = Literal["drafter", "verifier", "mid"]
MAX_SESSIONS = 20_000  # per replica; the least recently used session's models are dropped first


class SimEngine:
    """A drafter (weak policy), verifier (strong policy and verifier) or mid (mid verifier) replica. Guarantees
    one answer per request, in order; an answer is a ``Proposal``/``Review`` or the exception that request
    raised."""

    def __init__(self, role: Role, engines: SimEngines, hardware: Any = None):
        from ...sim.gold import SimSettings

        self.role = role
        self.latency = engines.latency
        self.roofline = None
        if engines.latency.model == "roofline":
            from ...costs.hardware import Hardware
            from .sim_roofline import Roofline

            self.roofline = Roofline(role, hardware or Hardware(), engines.latency.time_scale)
        self.settings = SimSettings(seed=engines.seed)
        self._sessions: OrderedDict[str, tuple] = OrderedDict()
        self.served = 0

    def _models(self, r: SimRequest) -> tuple:
        models = self._sessions.get(r.session_id)
        if models is None:
            from ...tasks import benchmark
            from ...sim.gold import SimSettings

            settings = SimSettings.for_domain(r.domain, self.settings.seed)  # the domain's calibration
            if r.parallel:  # a session with parallel calls: independent gold calls, writes too, as one action
                settings = replace(settings, parallel=True, parallel_writes=True)
            models = benchmark(r.domain).sim_models(r.task_id, r.trial, settings)
            if self.role == "mid":  # its judge in the verifier's place: a mid replica verifies only
                from ...sim.gold import mid_judge

                models = (*models[:2], mid_judge(models[2], settings.weak))
            self._sessions[r.session_id] = models
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(r.session_id)
        return models

    def _exact_judge(self, r: SimRequest) -> Any:
        """The session's judge with the exact-match criterion, made once and kept with its models."""
        models = self._models(r)
        if len(models) == 3:
            models = self._sessions[r.session_id] = (*models, models[2].by_exact_match())
        return models[3]

    @staticmethod
    def _history(r: SimRequest) -> History:
        return History(Task(r.task_id, ""), r.steps)

    async def _engine_time(self, kind: str, requests: Sequence[SimRequest], answers: Sequence[Any] = ()) -> None:
        """Sleep the batch's engine time: the fixed model's, or the roofline's for the answers' tokens at this
        replica's batch."""
        lat, roof = self.latency, self.roofline
        if roof is None:
            base = {"draft": lat.draft_base_s, "step": lat.step_base_s, "verify": lat.verify_base_s}[kind]
            per = lat.verify_per_request_s if kind == "verify" else lat.draft_per_request_s
            await asyncio.sleep(base + per * len(requests))
            return
        await roof.serve(kind, requests, [getattr(a, "usage", None) for a in answers])  # type: ignore[arg-type]

    async def _served(self, kind: str, requests: Sequence[SimRequest], answer) -> list[Any]:
        """Each request's answer after the batch's engine time. With roofline latencies the answers come
        first, since their tokens set the time; the fixed model sleeps first (a cancelled caller's
        request then never advances its session's simulated models)."""
        if self.roofline is None:
            await self._engine_time(kind, requests)
        out = [await _answer(answer(r)) for r in requests]
        if self.roofline is not None:
            await self._engine_time(kind, requests, out)
        self.served += len(requests)
        return out

    async def propose_batch(self, requests: Sequence[SimRequest] | bytes) -> list[Proposal | BaseException]:
        requests = unpacked(requests)
        if self.role == "mid":
            raise ValueError("propose_batch: mid replicas only verify")

        def answer(r: SimRequest):
            weak, strong = self._models(r)[:2]
            return (weak if self.role == "drafter" else strong).propose(self._history(r), r.draft, r.feedback)
        return await self._served("draft" if self.role == "drafter" else "step", requests, answer)

    async def verify_batch(self, requests: Sequence[SimRequest] | bytes) -> list[Review | BaseException]:
        requests = unpacked(requests)
        if self.role == "drafter":
            raise ValueError("verify_batch is served by verifier and mid replicas only")

        def answer(r: SimRequest):
            judge = self._exact_judge(r) if r.criterion == "exact" else self._models(r)[2]
            return judge.verify(self._history(r), r.draft)
        return await self._served("verify", requests, answer)

    def ping(self) -> int:
        return self.served

    def meters(self) -> dict[str, float]:
        """What this replica served: with roofline latencies, ESTIMATED GPU-seconds and HBM bytes too."""
        return {"served": self.served, **(self.roofline.read() if self.roofline else {})}


async def _answer(call) -> object:
    try:
        return await call
    except Exception as exc:  # noqa: BLE001 - one request's failure is that request's answer
        return exc
