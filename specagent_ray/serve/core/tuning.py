"""The profile's tuning knobs that the coordinator's parts read: ``speculation`` (how each block's K is
chosen, see ``speculation.py``) and ``priority`` (how engine requests are ordered, see ``priority.py``).
Plain config, so that ``config.py`` can hold them without importing the parts that use them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...control.controller import TokenModel

Kind = Literal["write", "strong", "draft", "prefill"]
KINDS: tuple[Kind, ...] = ("write", "strong", "draft", "prefill")


class PriorityConfig(BaseModel):
    """How engine requests are ordered: by kind first, then by the session's attained strong service."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quantum_s: float = Field(0.01, gt=0, description="resolution of the deadlines sent as priorities")
    slack_s: dict[Kind, float] = Field(
        default_factory=lambda: {"write": 0.0, "strong": 1.0, "draft": 2.0, "prefill": 3.0},
        description="each kind's slack, seconds: write (verify or repair of a session blocked on a staged "
                    "write), strong (other verifies and strong steps), draft, prefill (ahead of a verify)")
    level_s: float = Field(0.2, ge=0, description="slack per level of attained strong-engine service")
    levels: int = Field(5, ge=1, le=64, description="service levels; level = floor(log2(1 + tokens / unit))")
    unit_tokens: int = Field(2048, ge=1, description="strong-engine tokens (uncached prompt + decode) of level 1")

    @model_validator(mode="after")
    def _kinds_apart(self) -> PriorityConfig:
        if set(self.slack_s) != set(KINDS):
            raise ValueError(f"slack_s needs exactly the kinds {', '.join(KINDS)}")
        ordered = [self.slack_s[k] for k in KINDS]
        widest = self.level_s * (self.levels - 1)
        if any(b - a <= widest for a, b in zip(ordered, ordered[1:])):
            raise ValueError(f"slack_s must grow write < strong < draft < prefill by more than "
                             f"level_s x (levels - 1) = {widest:g}s, so that kinds never swap places")
        return self

    @property
    def max_slack_s(self) -> float:
        """The window within which a later request can still pass an earlier one."""
        return max(self.slack_s.values()) + self.level_s * (self.levels - 1) - min(self.slack_s.values())


class PriorConfig(BaseModel):
    """A session's estimates before it has any blocks of its own (``control/online.Prior``): rounded from
    `bench tau2 --domain airline` (simulated), as `specagent-ray plan`'s defaults are."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p_read: float = Field(0.82, ge=0, le=1, description="acceptance of a drafted read")
    p_write: float = Field(0.82, ge=0, le=1, description="acceptance of a drafted (staged) write")
    write_share: float = Field(0.3, ge=0, le=1, description="share of drafted steps that are writes")
    rho: float = Field(0.2, ge=0, le=1, description="separate strong repairs per rejection")
    weight: float = Field(4.0, gt=0, description="how many observations the prior counts as")


class TokensConfig(BaseModel):
    """The controller's token model (``control/controller.TokenModel``): prompt tokens are ``system`` plus
    ``new`` per committed step; a step decodes ``step``, a verdict ``verdict``. `bench adaptive` prints
    them as fitted on a fixed-K run of the domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: float = Field(TokenModel.system, ge=0, description="the prompt before the first step")
    new: float = Field(TokenModel.new, ge=0, description="prompt tokens each committed step adds")
    step: float = Field(TokenModel.step, ge=0, description="decode tokens of a step")
    verdict: float = Field(TokenModel.verdict, ge=0, description="decode tokens of a verdict")


class SpeculationConfig(BaseModel):
    """The profile's ``speculation`` section (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["fixed", "adaptive", "table"] = "fixed"
    objective: Literal["latency", "gpu_seconds", "strong_hbm", "hbm"] = Field(
        "gpu_seconds", description="what adaptive K minimizes per committed step (ESTIMATED)")
    table: tuple[tuple[float, int], ...] = Field((), description="[[verifier batch upper bound, K], ...], "
                                                 "rising; for mode table")
    review_slack: float = Field(0.03, ge=0, lt=1, description="the extra cost adaptive K pays to review more "
                                "reads before they commit (control/controller.py)")
    explore_blocks: int = Field(2, ge=0, description="blocks a session drafts before its own estimate may stop "
                                "it drafting (unless K = 0 wins by explore_margin at the prior)")
    explore_margin: float = Field(0.25, ge=0, lt=1, description="how much cheaper K = 0 must be, at the prior, "
                                  "to skip the exploring blocks")
    prior: PriorConfig = PriorConfig()
    tokens: TokensConfig = TokensConfig()
    steps_per_session: float = Field(14.0, ge=1, description="the planner's traffic: committed steps per session")
    think_time_s: float = Field(1.0, ge=0, description="the planner's traffic: time per step outside the engines")
    verifier_replicas: int | None = Field(None, ge=1, description="replicas the sessions share (None: the sim "
                                          "engines' count, else 1)")
    drafter_replicas: int | None = Field(None, ge=1)
    mid_replicas: int | None = Field(None, ge=1, description="the chain's mid verifier replicas the sessions "
                                     "share (None: the sim engines' count, else 1)")
    chain_escalation: float = Field(0.35, ge=0, le=1, description="adaptive, with a mid verifier deployed: the "
                                    "share of its blocks the mid escalates to the strong verifier, which prices "
                                    "the chain (bench adaptive measured 0.31 on airline and 0.40 on retail, "
                                    "SIMULATED; measure yours)")

    @model_validator(mode="after")
    def _table(self) -> SpeculationConfig:
        if self.mode == "table" and not self.table:
            raise ValueError("speculation.mode table needs a table: [[verifier batch upper bound, K], ...]")
        bounds = [b for b, _ in self.table]
        if bounds != sorted(bounds) or any(k < 0 for _, k in self.table):
            raise ValueError(f"speculation.table needs rising batch bounds and K >= 0, got {self.table}")
        return self
