"""The speculation controller's route: a block it routes past the mid verifier goes to the strong verifier
alone; one it routes to the chain, or a controller without an opinion, leaves the chain as configured. And
served sessions in ``adaptive`` mode route by the controller only where a mid verifier is deployed."""

from __future__ import annotations

import pytest

from specagent_ray.control.controller import Load
from specagent_ray.costs.hardware import Hardware
from specagent_ray.costs.ledger import Ledger
from specagent_ray.models.scripted import ScriptedPolicy, ScriptedUser, ScriptedVerifier
from specagent_ray.protocol import METHODS, Action, Effect, Parts, SpecConfig, Task, Verdict
from specagent_ray.protocol.types import History, Review, Usage
from specagent_ray.serve.core.tuning import SpeculationConfig
from specagent_ray.serve.sessions.block_sizes import BlockSizes, mid_replicas
from specagent_ray.tools.scripted import InMemoryTools, ToolSpec, object_schema

LOOKUP = Action.tool("lookup", id="a")
NOTE = Action.tool("note", id="a", text="x")
STOP = Action.stop()


def mid_says(verdict):
    return Review(verdict, Usage(150, 0, 5), 0.9)


def make(weak, mid, verdicts=()):
    tools = InMemoryTools({"lookup": ToolSpec(Effect.READ, object_schema(id="string"), lambda id: f"record {id}"),
                           "note": ToolSpec(Effect.WRITE, object_schema(id="string", text="string"))})
    return Parts(ScriptedPolicy(weak), ScriptedPolicy([]), ScriptedVerifier(verdicts), tools, ScriptedUser(),
                 Ledger(), mid=ScriptedVerifier(mid))


async def run(parts):
    return await METHODS["specagent"](Task("t", "help"), parts, SpecConfig())


class Routed:
    """A BlockSize that drafts whole blocks and routes each by ``chain``."""

    def __init__(self, chain):
        self.chain = chain

    def next_k(self, history):
        return 4

    def drafted(self, block, staged):
        pass

    def reviewed(self, block, accepted, separate_repair):
        pass


@pytest.mark.parametrize("route", [True, None])
async def test_a_block_routed_to_the_chain_or_not_routed_goes_to_the_mid_first(route):
    parts = make([LOOKUP, NOTE, STOP], [mid_says(Verdict(2)), mid_says(Verdict(1))])
    parts.block_size = Routed(route)
    await run(parts)
    assert parts.mid.calls and not parts.verifier.calls


async def test_a_block_routed_past_the_mid_goes_to_the_strong_verifier_alone():
    parts = make([LOOKUP, NOTE, STOP], [mid_says(Verdict(2))], verdicts=[Verdict(2), Verdict(1)])
    parts.block_size = Routed(False)
    await run(parts)
    assert not parts.mid.calls and parts.verifier.calls
    assert parts.tools.executed == [LOOKUP.call, NOTE.call]  # accepted by the strong verifier


HARDWARE = Hardware(strong_model="qwen3.5-397b-a17b", strong_gpus=16, weak_model="qwen3-4b", weak_gpus=1,
                          gpu="h20", mid_model="qwen3.5-35b-a3b", mid_gpus=2)


@pytest.mark.parametrize(("mode", "mids", "routed"), [("adaptive", 1, True), ("adaptive", 0, False),
                                                      ("table", 1, False)])
def test_served_sessions_route_by_the_controller_only_in_adaptive_with_a_mid(mode, mids, routed):
    cfg = SpeculationConfig(mode=mode, objective="hbm", table=((1e9, 2),) if mode == "table" else ())
    sizes = BlockSizes(cfg, HARDWARE, 4, lambda: Load(10), mid_replicas=mids)
    size = sizes.for_session()
    size.next_k(History(Task("t", "x")))
    assert (size.chain is not None) is routed
    assert ("routes" in sizes.stats()) is routed


def test_the_mid_replicas_are_zero_without_a_mid_engine():
    class Sim:
        mid_replicas = 3

    class NoMid:
        pass

    assert mid_replicas(SpeculationConfig(), Sim()) == 3
    assert mid_replicas(SpeculationConfig(mid_replicas=2), Sim()) == 2
    assert mid_replicas(SpeculationConfig(mid_replicas=2), NoMid()) == 0
