"""The engines of a served SpecAgent application (``AppConfig.engines``) and the three-tier chain's rule
(``AppConfig.chain``). Re-exported by ``config.py``, where the rest of the config lives.

The chain: a mid engine (sim ``mid_replicas``, openai ``mid``) reviews each block before the strong verifier,
which reviews only what the mid may not settle (``protocol/review.py``, ``ChainRule``; docs/protocol.md). A
profile with a mid engine names the mid's model in ``hardware.mid_model``: each session's resource report
and the planner price the mid's calls on it, so a mid without it is refused at load (``check_mid``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...protocol.review import ChainRule, CriticalCheck
from ...protocol.types import Tier


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LatencyModel(Strict):
    """SIMULATED engine time. ``fixed``: a batch of n requests takes ``base_s + per_request_s * n`` (prefills
    of one batch share the engine's steps; decode is folded into ``base_s``). ``roofline``: ESTIMATED, the
    cost model's time for each call at the replica's current batch (its requests in flight) on the
    profile's ``hardware`` (``serve/engines/sim_roofline.py``), times ``time_scale``."""

    model: Literal["fixed", "roofline"] = "fixed"
    time_scale: float = Field(1.0, gt=0, description="roofline: engine seconds slept per estimated second "
                              "(below 1 runs a load test faster than a GPU would)")

    draft_base_s: float = Field(0.02, ge=0, description="one drafter batch: weak decode of one step")
    draft_per_request_s: float = Field(0.0005, ge=0, description="added per request in a drafter batch")
    verify_base_s: float = Field(0.04, ge=0, description="one verifier batch: strong verdict decode")
    verify_per_request_s: float = Field(0.002, ge=0, description="added per request (its prefill)")
    step_base_s: float = Field(0.06, ge=0, description="one strong step (repair or Strong-only step)")


class SimEngines(Strict):
    """Simulated weak and strong engines (seeded; see sim/policies.py), as Serve deployments; with
    ``mid_replicas``, a simulated mid verifier too (``sim/gold.py``'s ``mid_judge``): the three-tier chain."""

    kind: Literal["sim"] = "sim"
    drafter_replicas: int = Field(2, ge=1, le=64)
    verifier_replicas: int = Field(1, ge=1, le=64)
    mid_replicas: int = Field(0, ge=0, le=64, description="replicas of the simulated mid verifier (deployment "
                              "SimMid); 0: no chain. Needs hardware.mid_model. Its fixed latency is the "
                              "verifier's verify_*; roofline prices it on hardware.mid_model")
    latency: LatencyModel = LatencyModel()
    seed: int = 0


class Endpoint(Strict):
    """An OpenAI-compatible chat endpoint. The key is read from the named environment variable; a
    config never holds a secret."""

    url: str = Field(description="base URL ending in /v1")
    model: str
    api_key_env: str | None = Field(None, description="environment variable that holds the API key")
    context_tokens: int | None = Field(None, ge=256, description="the model's context window in tokens (vLLM's "
                                       "max_model_len): the verifier's sets the body cap of the conversation "
                                       "routes (gateway.max_body_bytes); None: unknown")
    send_priority: bool = Field(False, description="send each request's priority (serve/engines/priority.py); the "
                                "engine must run vLLM with scheduling_policy: priority, or it refuses every "
                                "request")


class OpenAIEngines(Strict):
    """Engines behind OpenAI-compatible endpoints: Ray Serve LLM's ingress (local-cpu, gpu-tp16) or a
    cloud API (edge-cloud's strong model). ``user`` is tau2's user simulator (the verifier's when None); ``mid``
    an optional mid verifier (the three-tier chain)."""

    kind: Literal["openai"] = "openai"
    drafter: Endpoint
    verifier: Endpoint
    user: Endpoint | None = None
    mid: Endpoint | None = Field(None, description="the three-tier chain's mid verifier (needs hardware.mid_model); "
                                 "None: no chain. Its verdict schema asks for a confidence in 0..1; a verdict "
                                 "without one escalates")
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    max_tokens: int = Field(256, ge=16)
    user_max_tokens: int = Field(512, ge=16)
    strict_schema: bool = Field(True, description="False for cloud APIs whose strict mode forbids free-form objects")
    policy_chars: int | None = Field(None, ge=100, description="cut the domain policy in prompts to this many "
                                     "characters (small local models have short contexts); None keeps it whole")
    observation_chars: int = Field(4000, ge=100, description="longest tool result or user reply in prompts")
    prefill_ahead: bool = Field(False, description="while a block is drafted, prefill the verify prompt's "
                                "leading block (system + H) on the verifier at the lowest priority, so that "
                                "the verify computes only the block (serve/engines/prefill_ahead.py). On where the "
                                "verifier is a vLLM engine with prefix caching; off for a cloud API, which "
                                "bills the prefill and whose cache is not ours")
    prefill_trust_s: float = Field(60.0, gt=0, description="how long the verifier is trusted to keep a session's "
                                   "prefix cached; a block that starts later (after a long tool pause) prefills "
                                   "H again even if the last verify covered it (keep-warm: vLLM evicts prefix "
                                   "blocks least recently used under KV pressure)")
    verifier_kv_tokens: int | None = Field(None, ge=1, description="the verifier's KV cache in tokens, all "
                                           "replicas together (vLLM logs it at start: 'KV cache size: N "
                                           "tokens'); prefill ahead then stops trusting a prefix once new KV "
                                           "of half this size has been computed since, however soon; None: "
                                           "prefill_trust_s alone")


class ScriptedEngines(Strict):
    """Engines that follow the plan written in each user message (SCRIPTED, ``models/scripted_plan.py``): no model
    runs. For tests, demos and the docs' examples, where a client must decide exactly what the agent does."""

    kind: Literal["scripted"] = "scripted"


Engines = Annotated[SimEngines | OpenAIEngines | ScriptedEngines, Field(discriminator="kind")]


class ChainConfig(Strict):
    """What the chain's mid verifier may settle without the strong one (``protocol/review.py``'s ``ChainRule``):
    accepts and repairs of staged steps of the ``settles`` tiers, when its confidence is at least
    ``escalate_below``; everything else escalates to the strong verifier. Read only where a mid engine is."""

    settles: list[Literal["write", "critical"]] = Field(["write"], description="staged-step tiers the mid may "
                                                         "settle alone (a critical call still gets its second check)")
    escalate_below: float = Field(0.7, ge=0, le=1, description="the mid's confidence under which it escalates")

    def rule(self) -> ChainRule:
        return ChainRule(frozenset(Tier(t) for t in self.settles), self.escalate_below)


class CriticalConfig(Strict):
    """The second check a critical call needs after its verdict (``protocol/review.py``'s ``CriticalCheck``):
    ``agree``, the strong policy's own step must make the same call (one strong decode), or ``verdicts``, k
    verdicts in all must accept it (k - 1 more prefills; only as good as they are independent)."""

    mode: Literal["agree", "verdicts"] = "agree"
    k: int = Field(2, ge=2, le=5, description="verdicts in all, for mode verdicts")

    def check(self) -> CriticalCheck:
        return CriticalCheck(self.mode, self.k)


def has_mid(engines: Any) -> bool:
    """Whether ``engines`` include a mid verifier (the chain runs)."""
    return bool(getattr(engines, "mid_replicas", 0)) or getattr(engines, "mid", None) is not None


def check_mid(engines: Any, hardware: Any) -> None:
    """ValueError where a mid engine has no ``hardware.mid_model`` to price its calls on."""
    if has_mid(engines) and hardware.mid_model is None:
        where = "engines.mid_replicas" if engines.kind == "sim" else "engines.mid"
        raise ValueError(f"{where} adds a mid verifier, but hardware.mid_model is not set: name its model "
                         "spec (e.g. hardware: {mid_model: qwen3-32b, mid_gpus: 2}), which the resource "
                         "reports and the planner price its calls on")
