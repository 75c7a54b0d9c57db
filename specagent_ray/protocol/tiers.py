"""What an action may do if it runs: its effect (READ runs at once, WRITE is staged) and its risk tier
(READ < WRITE < CRITICAL; a CRITICAL call also needs a second check). The tier rule is here once, so the
drafter, the reviewers and the executor can never disagree about what a call is."""

from __future__ import annotations

from .interfaces import TieredTools, ToolAdapter
from .types import Action, ActionKind, Effect, Tier, ToolCall


class Tiers:
    """The tools' classification, raised (never lowered) by a tier table where the adapter has one.

    Guarantees: a tool action is a WRITE if any of its calls is one; an unknown answer from a tier table makes
    the call CRITICAL (fail closed); a stop is always staged, a message is staged iff ``review_messages``."""

    def __init__(self, tools: ToolAdapter, review_messages: bool) -> None:
        self.tools = tools
        self.review_messages = review_messages
        self._tiered = isinstance(tools, TieredTools)

    def classify(self, action: Action) -> Effect:
        """A tool action is a WRITE if any of its calls is one by tier (a parallel action is staged whole)."""
        if action.kind is ActionKind.TOOL:
            return self.tier(action).effect
        if action.kind is ActionKind.MESSAGE and not self.review_messages:
            return Effect.READ  # sent without review; it still ends the block (see SpecConfig)
        return Effect.WRITE  # a stop ends the session: staged and reviewed

    def tier(self, action: Action) -> Tier:
        """The highest tier of a tool action's calls; a message or a stop has its effect's tier."""
        if action.kind is ActionKind.TOOL:
            return Tier.highest([self.call_tier(c) for c in action.calls])
        return Tier.of(self.classify(action))

    def call_tier(self, call: ToolCall) -> Tier:
        """The higher of what the adapter's ``classify`` and (if it knows tiers) its ``tier`` say: a tier
        table can raise a call (a side-effecting read is staged), never lower one."""
        base = Tier.of(self.tools.classify(call))
        if not self._tiered:
            return base
        raised = self.tools.tier(call)  # type: ignore[attr-defined]
        if not isinstance(raised, Tier):  # an adapter's answer that is no tier: fail closed
            return Tier.CRITICAL
        return raised if raised.rank > base.rank else base
