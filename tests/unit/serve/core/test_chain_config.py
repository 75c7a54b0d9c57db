"""The three-tier chain in the served config: a mid engine (sim ``mid_replicas``, openai ``mid``), the profile's
``chain`` rule, strict like every operator setting, and a mid that the resource report can price."""

from __future__ import annotations

import contextlib
import types

import pytest
from pydantic import ValidationError

from specagent_ray.models.backend import Completion
from specagent_ray.protocol.review import ChainRule
from specagent_ray.protocol.types import (
    Action,
    Effect,
    History,
    Step,
    Task,
    Tier,
    Usage,
)
from specagent_ray.serve.core.catalog import Catalog
from specagent_ray.serve.core.config import (
    AppConfig,
    ChainConfig,
    CoordinatorConfig,
    Endpoint,
    OpenAIEngines,
)

MID_HW = {"mid_model": "qwen3-32b", "mid_gpus": 2}
E = {"url": "http://127.0.0.1:9/v1"}


def test_no_mid_by_default_and_the_default_rule_is_the_protocols():
    cfg = AppConfig()
    assert cfg.engines.mid_replicas == 0
    assert OpenAIEngines(drafter=Endpoint(model="d", **E), verifier=Endpoint(model="v", **E)).mid is None
    assert cfg.chain.rule() == ChainRule() == ChainRule(frozenset({Tier.WRITE}), 0.7)
    rule = ChainConfig(settles=["write", "critical"], escalate_below=0.5).rule()
    assert rule == ChainRule(frozenset({Tier.WRITE, Tier.CRITICAL}), 0.5)


@pytest.mark.parametrize("bad, field", [
    ({"chain": {"settle": ["write"]}}, "settle"),                       # a typo
    ({"chain": {"settles": ["read"]}}, "settles"),                      # reads are never reviewed alone
    ({"chain": {"settles": ["dangerous"]}}, "settles"),
    ({"chain": {"escalate_below": 1.5}}, "escalate_below"),
    ({"chain": {"escalate_below": -0.1}}, "escalate_below"),
    ({"engines": {"kind": "sim", "mid_replicas": -1}}, "mid_replicas"),
    ({"engines": {"kind": "sim", "mid_replicas": 65}}, "mid_replicas"),
    ({"engines": {"kind": "sim", "mid": 1}}, "mid"),
    ({"engines": {"kind": "openai", "drafter": {"model": "d", **E}, "verifier": {"model": "v", **E},
                  "mid": {"model": "m", "port": 1, **E}}}, "port"),
])
def test_chain_config_is_strict(bad, field):
    with pytest.raises(ValidationError, match=field):
        AppConfig.model_validate({"hardware": MID_HW, **bad})


@pytest.mark.parametrize("engines", [
    {"kind": "sim", "mid_replicas": 1},
    {"kind": "openai", "drafter": {"model": "d", **E}, "verifier": {"model": "v", **E}, "mid": {"model": "m", **E}},
])
def test_a_mid_engine_needs_the_hardware_its_calls_are_priced_on(engines):
    with pytest.raises(ValidationError, match="hardware.mid_model"):
        AppConfig.model_validate({"engines": engines})
    cfg = AppConfig.model_validate({"engines": engines, "hardware": MID_HW})
    assert "mid" in cfg.hardware.deployments()


def test_the_engine_classes_are_still_config_s():
    """Moved to engine_config.py, they are imported from config.py as before."""
    from specagent_ray.serve.core import config, engine_config

    for name in ("LatencyModel", "SimEngines", "Endpoint", "OpenAIEngines", "ScriptedEngines", "Engines",
                 "ChainConfig"):
        assert getattr(config, name) is getattr(engine_config, name)


class Backend:
    def __init__(self, confidence=""):
        self.requests, self.schemas, self.confidence = [], [], confidence

    async def complete(self, messages, json_schema, max_tokens, temperature=0.0, headers=None, priority=None):
        self.requests.append(messages)
        self.schemas.append(json_schema)
        body = '{"accepted_prefix": 1, "reason": "", "repair": null' + self.confidence + "}"
        return Completion(body, Usage(10, 0, 5), "stop", "m")


def _session():
    return types.SimpleNamespace(id="s1", outside=contextlib.nullcontext,
                                 request=types.SimpleNamespace(instructions=None, context=None))


async def test_the_openai_client_asks_the_mid_endpoint_for_the_mid_verdict():
    from specagent_ray.serve.engines.engine_client import OpenAIEngineClient

    catalog = Catalog({"lookup": {"type": "object", "properties": {}}}, {"lookup": Effect.READ}, "Be careful.")
    plain = OpenAIEngines(drafter=Endpoint(model="d", **E), verifier=Endpoint(model="v", **E))
    assert OpenAIEngineClient(plain, CoordinatorConfig(), {}).mid(_session(), catalog) is None  # type: ignore[arg-type]
    engines = plain.model_copy(update={"mid": Endpoint(model="m", **E)})
    client = OpenAIEngineClient(engines, CoordinatorConfig(batch_window_ms=1), {})
    assert client.mid_backend is not None and client.mid_backend.model == "m"
    client.verifier, client.mid_backend = Backend(), Backend(', "confidence": 0.8')
    mid = client.mid(_session(), catalog)  # type: ignore[arg-type]
    block = [Step(Action.tool("lookup"), None, "weak", Effect.READ)]
    review = await mid.verify(History(Task("t", "hi")), block)
    assert review.verdict.accepted_prefix == 1 and review.confidence == 0.8  # the model's own, from its verdict
    assert "confidence" in client.mid_backend.schemas[0]["properties"]  # asked for by the schema
    assert "confidence" in client.mid_backend.requests[0][-1]["content"]  # and by the instruction
    assert len(client.mid_backend.requests) == 1 and client.verifier.requests == []
    assert "mid" in client.batchers()


def test_the_profile_sets_the_critical_check_strictly():
    from pydantic import ValidationError

    from specagent_ray.protocol.review import CriticalCheck
    from specagent_ray.serve.core.config import AppConfig

    assert AppConfig().critical.check() == CriticalCheck("agree", 2)
    assert AppConfig(critical={"mode": "verdicts", "k": 3}).critical.check() == CriticalCheck("verdicts", 3)
    for bad in ({"mode": "vibes"}, {"k": 1}, {"mode": "agree", "retries": 2}):
        with pytest.raises(ValidationError):
            AppConfig(critical=bad)


def test_a_remote_verifiers_critical_look_asks_its_engine_with_the_critical_criterion():
    from specagent_ray.serve.engines.engine_client import RemoteVerifier

    asked = []

    async def judge(h, b, crit):
        asked.append(crit)

    v = RemoteVerifier(_session(), "verifier", 1, 1.0, judge)  # type: ignore[arg-type]
    assert v.for_critical().criterion == "critical" and v.by_exact_match().criterion == "exact"
