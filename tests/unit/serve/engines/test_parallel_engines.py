"""A session with parallel calls on tells its engines so: the simulated engines draft its gold path's
independent calls as parallel actions (``SimSettings.parallel``, writes too), and the OpenAI engine client's
prompts and schemas offer several calls per action (``PromptConfig.parallel_calls``). Sessions with them off
get exactly what they always got."""

from __future__ import annotations

import contextlib
import json
import types
from dataclasses import replace

import pytest

from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.backend import Completion
from specagent_ray.sim.gold import SimSettings
from specagent_ray.protocol.types import Effect, History, Task, Usage
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.core.config import (
    CoordinatorConfig,
    Endpoint,
    OpenAIEngines,
    SimEngines,
)
from specagent_ray.serve.engines import sim_engine
from specagent_ray.serve.engines.batch_wire import SimRequest, packed, unpacked
from specagent_ray.serve.engines.engine_client import (
    OpenAIEngineClient,
    SimEngineClient,
)

CATALOG = Catalog({"lookup": {"type": "object", "properties": {}}, "book": {"type": "object", "properties": {}}},
                  {"lookup": Effect.READ, "book": Effect.WRITE}, "Be careful.")
H = History(Task("t", "Book me a flight."))


def session(sid="s1"):
    return types.SimpleNamespace(id=sid, outside=contextlib.nullcontext, ledger=Ledger(), domain="airline",
                                 task=Task("0", "hi"), request=types.SimpleNamespace(
                                     instructions=None, context=None, trial=0))


def test_a_sim_request_carries_its_sessions_parallel_flag_across_the_wire():
    req = SimRequest("s1", "airline", "0", 0, (), parallel=True)
    assert unpacked(packed([req])) == [req] and unpacked(packed([req]))[0].parallel is True
    assert SimRequest("s1", "airline", "0", 0, ()).parallel is False


@pytest.mark.parametrize("parallel", [False, True])
async def test_the_sim_engine_builds_a_parallel_sessions_models_with_parallel_calls_and_writes(monkeypatch, parallel):
    seen = []

    class Bench:
        def sim_models(self, task_id, trial, settings):
            seen.append(settings)
            return ("weak", "strong", "judge")

    monkeypatch.setattr("specagent_ray.tasks.benchmark", lambda domain: Bench())
    engine = sim_engine.SimEngine("drafter", SimEngines())
    engine._models(SimRequest("s1", "airline", "0", 0, (), parallel=parallel))
    assert (seen[0].parallel, seen[0].parallel_writes) == (parallel, True)
    assert seen[0] == replace(SimSettings.for_domain("airline", 0), parallel=parallel)  # else: the calibration


class Replica:
    """A simulated replica's handle that records the requests of each batch."""

    def __init__(self):
        self.requests: list[SimRequest] = []

    def routed(self, lane):
        return self

    async def propose_batch(self, batch):
        from specagent_ray.protocol.types import Action, Proposal
        reqs = unpacked(batch)
        self.requests += reqs
        return packed([Proposal(Action.stop(), Usage()) for _ in reqs])

    async def verify_batch(self, batch):
        raise AssertionError("not asked")


@pytest.mark.parametrize("parallel", [False, True])
async def test_the_sim_engine_client_passes_the_sessions_flag_on_every_request(parallel):
    drafter, verifier = Replica(), Replica()
    c = SimEngineClient(drafter, verifier, SimEngines(), CoordinatorConfig(batch_window_ms=1))
    weak, strong, _ = c.models(session(), CATALOG, parallel=parallel)  # type: ignore[arg-type]
    await weak.propose(H)
    await strong.propose(H)
    assert [r.parallel for r in drafter.requests + verifier.requests] == [parallel, parallel]


class Backend:
    def __init__(self):
        self.calls = []

    async def complete(self, messages, json_schema, max_tokens, temperature=0.0, headers=None, priority=None):
        self.calls.append({"messages": messages, "schema": json_schema})
        return Completion('{"kind": "stop"}', Usage(100, 10, 1), "stop", "m")


@pytest.mark.parametrize("parallel", [False, True])
async def test_the_openai_engine_client_offers_several_calls_per_action_only_to_a_parallel_session(parallel):
    engines = OpenAIEngines(drafter=Endpoint(url="http://127.0.0.1:9/v1", model="d"),
                            verifier=Endpoint(url="http://127.0.0.1:9/v1", model="v"), prefill_ahead=False)
    c = OpenAIEngineClient(engines, CoordinatorConfig(batch_window_ms=1), {})
    c.drafter, c.verifier = Backend(), Backend()
    weak, strong, _ = c.models(session(), CATALOG, parallel=parallel)  # type: ignore[arg-type]
    await weak.propose(H)
    await strong.propose(H)
    for call in c.drafter.calls + c.verifier.calls:
        assert ('"tools"' in json.dumps(call["schema"])) is parallel
        assert ("calls several tools at once" in json.dumps(call["messages"])) is parallel
