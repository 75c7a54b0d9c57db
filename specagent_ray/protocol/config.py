"""The protocol's knobs: one run's ``SpecConfig``, and the two rules it carries for the reviewing side (the
second check a CRITICAL call needs, and what a mid verifier may settle alone). Frozen and validated on
construction, so a run never meets an impossible setting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .types import MAX_CALLS, Tier


@dataclass(frozen=True)
class CriticalCheck:
    """The independent second check a CRITICAL call needs after its verdict accepted it (second_check.py).

    ``agree`` (default): the strong policy writes its own step from H and the accepted prefix; each accepted
    critical call must be one of its calls (same tool, same arguments), and the strong step is the fused repair
    of those that are not. Costs one strong decode per accepted critical block.
    ``verdicts``: k - 1 more strong verdicts on the same block must all accept each critical call, asked as a
    ``CriticalJudge``'s critical look where the verifier has one (told to check the call argument by argument).
    Costs k - 1 verify calls; worth as much as the verdicts are independent of each other.
    """

    mode: Literal["agree", "verdicts"] = "agree"
    k: int = 2

    def __post_init__(self) -> None:
        if self.mode not in ("agree", "verdicts"):
            raise ValueError(f"critical check mode must be 'agree' or 'verdicts', got {self.mode!r}")
        if self.k < 2:
            raise ValueError(f"a critical call needs k >= 2 verdicts, got {self.k}")


@dataclass(frozen=True)
class ChainRule:
    """What the mid verifier may settle alone (chain.py). ``settles``: the tiers of staged steps it may accept
    or repair without the strong verifier (CRITICAL still gets its second check, and a mid repair is never
    CRITICAL); ``escalate_below``: its self-reported confidence under which it escalates."""

    settles: frozenset[Tier] = field(default_factory=lambda: frozenset({Tier.WRITE}))
    escalate_below: float = 0.7

    def __post_init__(self) -> None:
        if not 0.0 <= self.escalate_below <= 1.0:
            raise ValueError(f"escalate_below must be in 0..1, got {self.escalate_below}")


@dataclass(frozen=True)
class SpecConfig:
    """Knobs of the protocol.

    k: the most steps drafted per block (the paper uses 6 for tau2, 8 for long workflows).
    max_steps: committed-step guard; a run that reaches it ends with ``Termination.MAX_STEPS``.
    review_messages: a message to the user always ends the block (the agent needs the reply, and a
        sent message cannot be taken back, so it must never sit in a droppable suffix). When False
        (default, as in the paper, where only state-changing calls are staged) it is sent at once and
        the block commits without review; the verifier sees it in H at the next review. When True it
        is staged like a write, so the user only ever reads reviewed text, at one strong call per
        message. See docs/protocol.md.
    escalate_below: AgentCollab's confidence threshold for handing a step to the strong model.
    parallel_calls: whether an action may hold several tool calls (at most ``max_calls``). Off, such an
        action is invalid: never executed, and the strong policy writes that step.
    critical: the second check a CRITICAL call needs after its verdict (protocol/second_check.py).
    chain: what a mid verifier, if ``Parts.mid`` is set, may settle without the strong one (protocol/chain.py).
    """

    k: int = 6
    max_steps: int = 100
    review_messages: bool = False
    escalate_below: float = 0.65
    parallel_calls: bool = False
    max_calls: int = MAX_CALLS
    critical: CriticalCheck = CriticalCheck()
    chain: ChainRule = ChainRule()

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
