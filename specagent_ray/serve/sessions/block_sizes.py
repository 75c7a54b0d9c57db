"""How served sessions choose each block's K: the profile's ``speculation`` section, wired to the
speculation controller (``control/controller.py``) and the engines' load as this coordinator sees it.

- ``mode: fixed`` (the default): every block may draft the session's K, as before.
- ``mode: adaptive``: per block, the controller minimizes ``objective`` per committed step over K in
  0..K at the session's online acceptance estimate and the engines' current batches (ESTIMATED by the
  cost model on the profile's ``hardware``). K = 0 lets the strong model write the step itself.
- ``mode: table``: K from ``table`` by the verifier's current batch, like vLLM's
  ``num_speculative_tokens_per_batch_size``.

With a mid verifier deployed (the three-tier chain), ``adaptive`` also routes each block: to the mid first
(the chain) or to the strong verifier alone, whichever is cheaper on ``objective`` at the session's
estimate, the chain priced at ``chain_escalation``. ``fixed`` and ``table`` leave every block to the chain.

The load: the running sessions of this coordinator and the requests it has in flight at each engine role
(``ProgramPriority.in_flight``), times the coordinator shards (each sees its share of the traffic); the
batches per replica over the role's replicas (the sim engines' own counts, else ``verifier_replicas`` and
``drafter_replicas``: the replicas of an OpenAI-compatible endpoint are not visible to this app).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ...control.controller import Controller, Load, TokenModel
from ...control.online import AdaptiveK, Prior
from ...costs.calls import Chain
from ...costs.planner import Engine
from ...protocol.interfaces import BlockSize
from ..core.engine_config import has_mid
from ..core.tuning import SpeculationConfig


class BlockSizes:
    """Makes each session's ``BlockSize`` (None in mode fixed) and counts the K and the routes chosen
    (``/v1/stats``). ``mid_replicas`` > 0 says a mid verifier is deployed: only then, and only in mode
    adaptive, may a block's route leave the chain."""

    def __init__(self, cfg: SpeculationConfig, hardware: Any, k_max: int, load: Callable[[], Load],
                 replicas: tuple[int, int] = (1, 1), mid_replicas: int = 0):
        self.cfg, self.load = cfg, load
        self.chosen: Counter[int] = Counter()
        self.routes: Counter[str] = Counter()
        self.controller: Controller | None = None
        self.prior = Prior(**cfg.prior.model_dump())
        if cfg.mode != "fixed":
            roles = hardware.deployments()
            strong, weak = (Engine(roles[r].spec, roles[r].gpu, roles[r].n_gpus, n)
                            for r, n in zip(("strong", "weak"), replicas, strict=True))
            routed = cfg.mode == "adaptive" and mid_replicas > 0 and "mid" in roles
            mid = Engine(roles["mid"].spec, roles["mid"].gpu, roles["mid"].n_gpus, mid_replicas) if routed else None
            self.controller = Controller(strong, weak, cfg.objective, k_max, cfg.table if cfg.mode == "table" else (),
                                         cfg.review_slack, explore_blocks=cfg.explore_blocks,
                                         explore_margin=cfg.explore_margin, tokens=TokenModel(**cfg.tokens.model_dump()),
                                         steps_per_session=cfg.steps_per_session,
                                         think_time_s=cfg.think_time_s, mid=mid,
                                         chain=Chain(cfg.chain_escalation) if routed else None)

    def for_session(self) -> BlockSize | None:
        if self.controller is None:
            return None
        return AdaptiveK(self.controller, self.load, self.prior, self._count, self._route)

    def _count(self, k: int) -> None:
        self.chosen[k] += 1

    def _route(self, chain: bool) -> None:
        self.routes["chain" if chain else "strong"] += 1

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.cfg.mode, "chosen_k": {str(k): n for k, n in sorted(self.chosen.items())}}
        if self.routes:
            out["routes"] = dict(sorted(self.routes.items()))
        return out


def mid_replicas(cfg: SpeculationConfig, engines: Any) -> int:
    """The chain's mid verifier replicas the sessions share: 0 without a mid engine; else configured, or the
    sim engines' own, else 1."""
    if not has_mid(engines):
        return 0
    return cfg.mid_replicas or getattr(engines, "mid_replicas", 0) or 1


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
