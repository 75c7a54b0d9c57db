"""How served sessions choose each block's K: the profile's ``speculation`` section, wired to the
speculation controller (``costs/controller.py``) and the engines' load as this coordinator sees it.

- ``mode: fixed`` (the default): every block may draft the session's K, as before.
- ``mode: adaptive``: per block, the controller minimizes ``objective`` per committed step over K in
  0..K at the session's online acceptance estimate and the engines' current batches (ESTIMATED by the
  cost model on the profile's ``hardware``). K = 0 lets the strong model write the step itself.
- ``mode: table``: K from ``table`` by the verifier's current batch, like vLLM's
  ``num_speculative_tokens_per_batch_size``.

The load: the running sessions of this coordinator and the requests it has in flight at each engine role
(``ProgramPriority.in_flight``), times the coordinator shards (each sees its share of the traffic); the
batches per replica over the role's replicas (the sim engines' own counts, else ``verifier_replicas`` and
``drafter_replicas``: the replicas of an OpenAI-compatible endpoint are not visible to this app).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..costs.controller import Controller, Load, TokenModel
from ..costs.online import AdaptiveK, Prior
from ..costs.planner import Engine
from ..protocol.interfaces import BlockSize


class PriorConfig(BaseModel):
    """A session's estimates before it has any blocks of its own (``costs/controller.Prior``): rounded from
    `bench tau2 --domain airline` (simulated), as `specagent-ray plan`'s defaults are."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p_read: float = Field(0.82, ge=0, le=1, description="acceptance of a drafted read")
    p_write: float = Field(0.82, ge=0, le=1, description="acceptance of a drafted (staged) write")
    write_share: float = Field(0.3, ge=0, le=1, description="share of drafted steps that are writes")
    rho: float = Field(0.2, ge=0, le=1, description="separate strong repairs per rejection")
    weight: float = Field(4.0, gt=0, description="how many observations the prior counts as")


class TokensConfig(BaseModel):
    """The controller's token model (``costs/controller.TokenModel``): prompt tokens are ``system`` plus
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
    objective: Literal["latency", "gpu_seconds", "strong_hbm"] = Field(
        "gpu_seconds", description="what adaptive K minimizes per committed step (ESTIMATED)")
    table: tuple[tuple[float, int], ...] = Field((), description="[[verifier batch upper bound, K], ...], "
                                                 "rising; for mode table")
    review_slack: float = Field(0.03, ge=0, lt=1, description="the extra cost adaptive K pays to review more "
                                "reads before they commit (costs/controller.py)")
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

    @model_validator(mode="after")
    def _table(self) -> SpeculationConfig:
        if self.mode == "table" and not self.table:
            raise ValueError("speculation.mode table needs a table: [[verifier batch upper bound, K], ...]")
        bounds = [b for b, _ in self.table]
        if bounds != sorted(bounds) or any(k < 0 for _, k in self.table):
            raise ValueError(f"speculation.table needs rising batch bounds and K >= 0, got {self.table}")
        return self


class BlockSizes:
    """Makes each session's ``BlockSize`` (None in mode fixed) and counts the K chosen (``/v1/stats``)."""

    def __init__(self, cfg: SpeculationConfig, hardware: Any, k_max: int, load: Callable[[], Load],
                 replicas: tuple[int, int] = (1, 1)):
        self.cfg, self.load = cfg, load
        self.chosen: Counter[int] = Counter()
        self.controller: Controller | None = None
        self.prior = Prior(**cfg.prior.model_dump())
        if cfg.mode != "fixed":
            roles = hardware.deployments()
            strong, weak = (Engine(roles[r].spec, roles[r].gpu, roles[r].n_gpus, n)
                            for r, n in zip(("strong", "weak"), replicas, strict=True))
            self.controller = Controller(strong, weak, cfg.objective, k_max, cfg.table if cfg.mode == "table" else (),
                                         cfg.review_slack, explore_blocks=cfg.explore_blocks,
                                         explore_margin=cfg.explore_margin, tokens=TokenModel(**cfg.tokens.model_dump()),
                                         steps_per_session=cfg.steps_per_session,
                                         think_time_s=cfg.think_time_s)

    def for_session(self) -> BlockSize | None:
        if self.controller is None:
            return None
        return AdaptiveK(self.controller, self.load, self.prior, self._count)

    def _count(self, k: int) -> None:
        self.chosen[k] += 1

    def stats(self) -> dict[str, Any]:
        return {"mode": self.cfg.mode, "chosen_k": {str(k): n for k, n in sorted(self.chosen.items())}}


def replicas(cfg: SpeculationConfig, engines: Any) -> tuple[int, int]:
    """(verifier, drafter) replicas the sessions share: configured, or the sim engines' own, else 1."""
    return (cfg.verifier_replicas or getattr(engines, "verifier_replicas", 1),
            cfg.drafter_replicas or getattr(engines, "drafter_replicas", 1))


def engine_load(priority: Any, sessions: Callable[[], int], shards: int, reps: tuple[int, int]) -> Callable[[], Load]:
    """The load as this coordinator sees it, scaled to all shards (see the module docstring)."""
    def load() -> Load:
        f = priority.in_flight
        return Load(sessions() * shards, f["strong"] * shards / reps[0], f["weak"] * shards / reps[1])
    return load
