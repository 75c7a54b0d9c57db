"""The SpecAgent protocol: pure async code over small interfaces (no Ray, no HTTP, no vLLM)."""

from .baselines import METHODS, ExactMatchVerifier
from .interfaces import (
    CallRecord, EngineUnavailable, Journal, Ledger, MalformedOutput, Policy, ToolAdapter, User, Verifier,
)
from .runtime import Parts, Run, SpecConfig
from .speculation import run_specagent
from .types import (
    Action, ActionKind, Effect, Event, History, Observation, Proposal, Review, Step, Task,
    Termination, ToolCall, Trajectory, Usage, Verdict,
)

__all__ = [
    "METHODS", "ExactMatchVerifier", "CallRecord", "EngineUnavailable", "Journal", "Ledger", "MalformedOutput", "Policy", "ToolAdapter",
    "User", "Verifier", "Parts", "Run", "SpecConfig", "run_specagent", "Action", "ActionKind", "Effect",
    "Event", "History", "Observation", "Proposal", "Review", "Step", "Task", "Termination", "ToolCall",
    "Trajectory", "Usage", "Verdict",
]
