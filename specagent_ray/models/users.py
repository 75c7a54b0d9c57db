"""The protocol's ``User``s: who answers the agent's messages in a session that has no human client.

- ``GoldUser``: tau2's scripted customer (SIMULATED): agrees, runs its own gold calls when asked (telecom).
- ``BfclUser``: a BFCL case's turns, one per agent message (SIMULATED).
- ``Tau2User``: tau2's own LLM user simulator on an OpenAI-compatible endpoint (real models).
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Callable

from ..protocol.types import Action, ActionKind, Observation, ToolCall, UserToolCall
from .backend import BackendError, ChatEndpoint

if TYPE_CHECKING:
    from ..tools.bfcl import BfclCase
    from ..tools.tau2 import Tau2Tools

GREETING = "Hi! How can I help you today?"  # tau2's default first agent message
# BFCL's own words when held-out functions come back (its runner sends them on the reveal turn).
REVEAL = "I have updated some more functions you can choose from. What about now?"


def ask_user(call: ToolCall) -> str:
    """The agent's request that the user run one of their own tools (dual-control domains)."""
    return f"Please {Action(ActionKind.TOOL, call).describe()} on your phone."


class GoldUser:
    """A scripted customer (SIMULATED): agrees to every confirmation and never hangs up first. In a
    dual-control domain, ``requests`` maps the agent's request texts (``ask_user``) to the user-side
    gold calls; the user runs each one once, through ``run`` (their own side of the environment), when
    asked for it, and replies with what they saw."""

    def __init__(self, requests: Sequence[ToolCall] = (),
                 run: Callable[[ToolCall], UserToolCall | Awaitable[UserToolCall]] | None = None):
        self.heard: list[str] = []
        self._todo = Counter(ask_user(c) for c in requests)
        self._calls = {ask_user(c): c for c in requests}
        self._run = run

    async def reply(self, text: str) -> Observation:
        self.heard.append(text)
        if text.endswith("Shall I proceed?"):
            return Observation("Yes, please proceed.")
        if self._todo[text] > 0 and self._run is not None:
            self._todo[text] -= 1
            done = self._run(self._calls[text])
            if inspect.isawaitable(done):
                done = await done
            return Observation(f"Done. My phone shows: {done.content}", user_calls=(done,))
        return Observation("Thank you.")


class BfclUser:
    """The case's user (SIMULATED): each agent message gets the next turn; after the last, a stop.
    ``answered``: turns already given in a committed history (a session resumed after a restart)."""

    def __init__(self, case: BfclCase, answered: int = 0):
        self.turns = list(case.turns[1 + answered:])
        self.heard: list[str] = []

    async def reply(self, text: str) -> Observation:
        self.heard.append(text)
        if not self.turns:
            return Observation("###STOP###", user_stop=True)
        return Observation(self.turns.pop(0) or REVEAL)


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
