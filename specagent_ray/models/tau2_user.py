"""tau2's own LLM user simulator as the protocol's ``User``, on an OpenAI-compatible endpoint (real models).

The simulated users (tau2's scripted customer, a BFCL case's turns) are ``sim/users.py``'s.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..protocol.types import Observation, ToolCall, UserToolCall
from .backend import BackendError, ChatEndpoint

if TYPE_CHECKING:
    from ..tools.tau2 import Tau2Tools

GREETING = "Hi! How can I help you today?"  # tau2's default first agent message
MAX_USER_CALLS = 8  # tools the user may run on their side before one reply


class Tau2User:
    """tau2's own ``UserSimulator`` as the protocol's ``User`` (blocking litellm calls run in a thread).
    In a dual-control domain (``tools`` with user tools: tau2 telecom) it is given the user's tools, as
    tau2's runner gives them; the calls it makes run on the user's side of the environment, their results
    go back to it, and its reply carries them (``Observation.user_calls``), at most ``MAX_USER_CALLS``."""

    def __init__(self, tau2_task: Any, endpoint: ChatEndpoint, max_tokens: int = 512, tools: Tau2Tools | None = None):
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
