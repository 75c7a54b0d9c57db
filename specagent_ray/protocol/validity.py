"""The paper's ``valid()``: whether an action may run at all. An invalid action is never executed; the
strong policy writes that step instead. Parallel calls are valid only as the config allows them."""

from __future__ import annotations

from .config import SpecConfig
from .interfaces import MessageRules, ToolAdapter
from .types import Action, ActionKind


class Validity:
    """``invalid_reason`` answers None for an action that may run, else why not (kept for the trajectory)."""

    def __init__(self, tools: ToolAdapter, config: SpecConfig) -> None:
        self.tools = tools
        self.config = config
        self._message_rules = isinstance(tools, MessageRules)

    def invalid_reason(self, action: object) -> str | None:
        """The paper's ``valid()``, with the reason kept for the trajectory."""
        if not isinstance(action, Action):
            return f"not an action: {type(action).__name__}"
        if action.kind is ActionKind.TOOL:
            if action.call is None:
                return "tool action without a call"
            return self.parallel_reason(action) or next(
                (r for r in map(self.tools.validate, action.calls) if r is not None), None)
        if action.kind is ActionKind.MESSAGE and not action.text.strip():
            return "empty message"
        if action.kind is ActionKind.MESSAGE and self._message_rules:
            return self.tools.validate_message(action.text)  # type: ignore[attr-defined]
        return None

    def parallel_reason(self, action: Action) -> str | None:
        """Why an action's number or repetition of calls is refused, if it is."""
        calls = action.calls
        if len(calls) == 1:
            return None
        if not self.config.parallel_calls:
            return f"{len(calls)} tool calls in one action; this session takes one tool call per action"
        if len(calls) > self.config.max_calls:
            return f"{len(calls)} tool calls in one action; at most {self.config.max_calls}"
        if len({c.key() for c in calls}) < len(calls):
            return "the same tool call twice in one action"
        return None
