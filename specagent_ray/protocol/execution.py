"""Where an action meets the world: a tool call runs on the tool adapter, a message goes to the user. Only
``Run.execute_and_commit`` (after validation, and for a weak write only after an accepting verdict) and the
drafter (for reads) come here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .interfaces import Spans, ToolAdapter, User
from .tiers import Tiers
from .types import Action, ActionKind, Effect, Observation, Unavailable

Note = Callable[..., None]  # Run.note: (kind, detail, action)


class Executor:
    """Runs valid, non-stop actions. A tool that raises becomes an error observation (the tool's failure is
    data for the agent); ``Unavailable`` (the infrastructure's failure) is never an observation: it propagates."""

    def __init__(self, tools: ToolAdapter, user: User, spans: Spans, tiers: Tiers, note: Note) -> None:
        self.tools, self.user, self.spans, self.tiers, self.note = tools, user, spans, tiers, note

    async def observe(self, action: Action) -> Observation:
        """Execute a valid, non-stop action. A tool that raises becomes an error observation. A parallel
        action's reads run together, then its writes (accepted already) together."""
        if action.more:
            return await self.observe_calls(action)
        if action.kind is ActionKind.TOOL:
            name, attributes = f"execute_tool {action.call.name}", {  # type: ignore[union-attr]
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": action.call.name}  # type: ignore[union-attr]
        else:
            name, attributes = "user_message", {}
        with self.spans.span(name, attributes) as span:
            try:
                if action.kind is ActionKind.TOOL:
                    return await self.tools.execute(action.call)  # type: ignore[arg-type]
                return await self.user.reply(action.text)
            except Unavailable:  # the infrastructure's failure is never the tool's answer
                raise
            except Exception as exc:  # the tool's failure is data for the agent, not a crash of the run
                self.note("tool_error", f"{action.describe()}: {type(exc).__name__}: {exc}", action)
                span.set("error.type", type(exc).__name__)
                return Observation(f"Error: {type(exc).__name__}: {exc}", error=True)

    async def observe_calls(self, action: Action) -> Observation:
        """Each call of a parallel action as an action of its own: its reads together, then its writes together
        (the policy said they are independent; each write is still one keyed call, so a write never runs twice,
        and in a served session each write runs only once its own intent is durable)."""
        singles = [Action(ActionKind.TOOL, c) for c in action.calls]
        writes = [i for i, c in enumerate(action.calls) if self.tiers.call_tier(c).effect is Effect.WRITE]
        reads = [i for i in range(len(singles)) if i not in writes]
        parts: dict[int, Observation] = {}
        for group in (reads, writes):
            parts.update(zip(group, await asyncio.gather(*(self.observe(singles[i]) for i in group)), strict=True))
        return Observation.of_calls(action.calls, [parts[i] for i in range(len(singles))])
