"""The SpecAgent protocol: pure async code over small interfaces (no Ray, no HTTP, no vLLM).

Its pieces, from the loops down (each imports only pieces below it):

    baselines.py      the paper's other methods, on the same runtime
    speculation.py    Algorithm 1: the loop, draft, commit
    hooks.py          what watches each block: the K controller, the block's span
    review.py         who rules on a block: chain.py (the mid verifier's remit), then second_check.py (tiers)
    accept.py         the staged step after an accept, call by call on a partial accept
    repair.py         the strong model's own steps: repairs, and steps at K = 0
    model_calls.py    asking a policy (propose) or a verifier (one verify skeleton, strong and mid)
    runtime.py        Parts, and Run: one run's state and the one guarded path to an effect
    execution.py      where an action meets the tools or the user
    recorder.py       the ledger and the spans
    tiers.py          an action's effect and risk tier
    validity.py       the paper's valid()
    config.py         SpecConfig, CriticalCheck, ChainRule
    blocks.py         Block, Ruling
    interfaces.py     what the protocol is written against
    types.py          the vocabulary
"""

from .baselines import METHODS, ExactMatchVerifier
from .config import ChainRule, CriticalCheck
from .interfaces import (
    CallRecord,
    EngineUnavailable,
    Journal,
    Ledger,
    MalformedOutput,
    Policy,
    TieredTools,
    ToolAdapter,
    User,
    Verifier,
)
from .runtime import Parts, Run, SpecConfig
from .speculation import run_specagent
from .types import (
    Action,
    ActionKind,
    Effect,
    Event,
    History,
    Observation,
    Proposal,
    Review,
    Step,
    Task,
    Termination,
    Tier,
    ToolCall,
    Trajectory,
    Usage,
    Verdict,
)

__all__ = [
    "METHODS",
    "Action",
    "ActionKind",
    "CallRecord",
    "ChainRule",
    "CriticalCheck",
    "Effect",
    "EngineUnavailable",
    "Event",
    "ExactMatchVerifier",
    "History",
    "Journal",
    "Ledger",
    "MalformedOutput",
    "Observation",
    "Parts",
    "Policy",
    "Proposal",
    "Review",
    "Run",
    "SpecConfig",
    "Step",
    "Task",
    "Termination",
    "Tier",
    "TieredTools",
    "ToolAdapter",
    "ToolCall",
    "Trajectory",
    "Usage",
    "User",
    "Verdict",
    "Verifier",
    "run_specagent",
]
