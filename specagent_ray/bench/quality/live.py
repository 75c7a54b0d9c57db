"""``bench tau2 --backend vllm`` (and ``bench bfcl --backend vllm``): the same methods on the same
tasks, through real engines.

Weak and strong models sit behind OpenAI-compatible endpoints (Ray Serve LLM's ingress, a vLLM
server, or a cloud API). The customer is tau2's own LLM user simulator, called through litellm
against an OpenAI-compatible endpoint (the strong model's by default). Tokens, cached tokens, wall
time and Pass@1 are measured; FLOPs, HBM and GPU latency are estimated; dollars use list prices from
``costs/data/pricing.yaml``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ...costs.deployment import Pricing
from ...costs.hardware import Hardware
from ...costs.ledger import Ledger
from ...models.backend import BackendError, ChatEndpoint
from ...models.llm import LLMPolicy, LLMVerifier
from ...models.prompts import PromptConfig
from ...models.tau2_user import GREETING, Tau2User
from ...protocol.baselines import METHODS
from ...protocol.runtime import Parts, SpecConfig
from ...protocol.types import Event, History, Task, Termination, Trajectory
from ...results.trial import TrialResult, block_stats, repair_cache, role_usage
from ...sim.users import BfclUser
from ...tasks import Benchmark, Tau2Benchmark, benchmark
from ...telemetry.resources import report_from_ledger
from ...tools.tau2 import Tau2Domain, Tau2Tools
from .runs import HIDDEN


@dataclass(frozen=True)
class LiveConfig:
    weak: ChatEndpoint
    strong: ChatEndpoint
    user: ChatEndpoint | None = None  # tau2's user simulator; the strong endpoint when None
    domain: str = "airline"
    methods: tuple[str, ...] = ("strong", "specagent")
    task_ids: tuple[str, ...] = ("0", "1", "2", "3", "4")
    trials: int = 1
    spec: SpecConfig = SpecConfig(max_steps=30)
    hardware: Hardware = Hardware()
    prices: dict[str, Pricing] = field(default_factory=dict)  # role -> list prices (cloud roles only)
    max_tokens: int = 256
    timeout_s: float = 120.0
    prompt: PromptConfig | None = None  # default: the domain's policy, observations up to 4,000 chars
    temperature: float = 0.0
    user_max_tokens: int = 512  # a reply of tau2's user simulator


def live_parts(cfg: LiveConfig, domain: Tau2Domain, task_id: str) -> tuple[Tau2User, Parts]:
    prompt_cfg = cfg.prompt or PromptConfig(policy=domain.policy)
    tools = Tau2Tools(domain, task=domain.tasks[task_id])  # in the task's initial state
    user = Tau2User(domain.tasks[task_id], cfg.user or cfg.strong, cfg.user_max_tokens, tools)
    return user, Parts(**_models(cfg, prompt_cfg, domain.tool_schemas), tools=tools, user=user, ledger=Ledger())


def _models(cfg: LiveConfig, prompt_cfg: PromptConfig, schemas: dict[str, Any]) -> dict[str, Any]:
    """The weak and strong policies and the verifier on the configured endpoints."""
    weak_backend, strong_backend = cfg.weak.backend(cfg.timeout_s), cfg.strong.backend(cfg.timeout_s)
    sampling = {"max_tokens": cfg.max_tokens, "temperature": cfg.temperature}
    return {"weak": LLMPolicy(weak_backend, prompt_cfg, schemas, **sampling),
            "strong": LLMPolicy(strong_backend, prompt_cfg, schemas, **sampling),
            "verifier": LLMVerifier(strong_backend, prompt_cfg, schemas, **sampling)}


def bfcl_live_parts(cfg: LiveConfig, case: Any) -> Parts:
    """Real weak and strong models on one BFCL case's backends; the case's turns are the user's."""
    from ...tasks import BFCL_POLICY
    from ...tools.bfcl import BfclTools

    tools = BfclTools(case)
    return Parts(**_models(cfg, cfg.prompt or PromptConfig(policy=BFCL_POLICY), tools.schemas), tools=tools,
                 user=BfclUser(case), ledger=Ledger())


async def _live_world(cfg: LiveConfig, bench: Benchmark, task_id: str
                      ) -> tuple[Parts, Task, Callable[[Trajectory], float]]:
    """Parts, the task as the user opens it, and its grader: a tau2 task (tau2's LLM user simulator answers
    tau2's greeting first, maybe after using their phone) or a BFCL case (its turns are the user's)."""
    if isinstance(bench, Tau2Benchmark):
        user, parts = live_parts(cfg, bench.domain, task_id)
        first = await user.reply(GREETING)
        return (parts, Task(task_id, first.content, bench.domain.tasks[task_id]),
                lambda t: bench.grader.reward(task_id, t, first.content, first.user_calls))
    task = bench.task(task_id)
    return bfcl_live_parts(cfg, task.context), task, lambda t: bench.grade(task, t)


async def run_live_trial(cfg: LiveConfig, bench: Benchmark, method: str, task_id: str, trial: int) -> TrialResult:
    start = time.perf_counter()
    parts, task, grade = await _live_world(cfg, bench, task_id)
    try:
        trajectory = await METHODS[method](task, parts, cfg.spec)
    except BackendError as exc:  # e.g. a prompt over the engine's context: this run fails, the bench goes on
        trajectory = Trajectory(History(Task(task_id, task.instruction)), Termination.MAX_STEPS,
                                [Event("malformed_output", f"backend error: {exc}")])
        failure = str(exc)
    else:
        failure = ""
    wall = time.perf_counter() - start
    deployments = {role: d.model_copy(update={"pricing": cfg.prices.get(role)})
                   for role, d in cfg.hardware.deployments().items()}
    strong, weak = deployments["strong"], deployments["weak"]
    return TrialResult(
        method=method, task_id=task_id, trial=trial,
        reward=0.0 if failure else grade(trajectory),
        termination=f"backend_error: {failure[:200]}" if failure else trajectory.termination.value, committed_steps=len(trajectory.steps), wall_s=wall,
        strong=role_usage(parts.ledger, "strong", strong.spec, strong.gpu, strong.n_gpus),
        weak=role_usage(parts.ledger, "weak", weak.spec, weak.gpu, weak.n_gpus, HIDDEN.get(method, frozenset())),
        blocks=block_stats(trajectory), resources=report_from_ledger(parts.ledger, deployments),
        label="live engines", **repair_cache(parts.ledger),
    )


def run_live(cfg: LiveConfig, on_done: Callable[[int], None] = lambda n: None) -> list[TrialResult]:
    """Every (method, task, trial), one at a time (engines on a small machine serve one session well).
    A tau2 domain, or a BFCL category as ``bfcl-<category>`` (graded by BFCL's checker)."""
    bench = benchmark(cfg.domain)
    missing = [t for t in cfg.task_ids if not bench.knows(t)]
    if missing:
        raise ValueError(f"{cfg.domain} has no task(s) {', '.join(missing)}")

    async def all_runs() -> list[TrialResult]:
        out = []
        for trial in range(cfg.trials):
            for task_id in cfg.task_ids:
                for method in cfg.methods:
                    out.append(await run_live_trial(cfg, bench, method, task_id, trial))
                    on_done(1)
        return out

    return asyncio.run(all_runs())
