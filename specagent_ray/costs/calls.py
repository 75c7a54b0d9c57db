"""What each method calls per committed step: the planner's acceptance model and call counts (ESTIMATED).

Moved out of ``costs/planner.py`` (which re-exports every name here): :class:`Acceptance` (how speculation
goes), the call shapes, and :func:`calls_per_step`, the (calls per committed step, shape) of each role.

Roles are strong, mid and weak; only the three-tier chain (method ``chain``, ``Acceptance.chain`` set) calls
the mid verifier. Per committed step the chain makes ``f / E_c`` mid verifies, ``f e / E_c`` strong verifies
(the escalated blocks), ``f S / E_c`` separate strong repairs and ``f n / E_c + 1 - f`` drafts plus the wasted
ones (``Acceptance.wasted_drafts``, as SpecAgent's), where, per reviewed block, ``E_c`` is the expected
committed steps, ``e`` the escalation rate and ``S`` the separate strong repairs of ``theory.chain_traffic`` (a
ratio of expectations over the block-length mix, as ``E``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .theory import chain_traffic, expected_steps_per_block

Method = Literal["strong", "specagent", "chain"]
METHODS: tuple[Method, ...] = ("strong", "specagent")  # what a plan compares without a chain
ROLES = ("strong", "mid", "weak")


@dataclass(frozen=True)
class Chain:
    """The three-tier chain's rates: the mid verifier escalates a block it fully accepted with probability
    ``e_accept`` and one it rejected with ``e_reject`` (default e_accept; counting invalid mid repairs, which
    escalate); it accepts a step with ``p_mid`` (default the strong verifier's p); ``rho_mid`` is the share of
    the rejections it settles that need a separate strong repair (no fused repair). ValueError out of [0, 1]."""

    e_accept: float
    e_reject: float | None = None
    p_mid: float | None = None
    rho_mid: float = 0.0

    def __post_init__(self) -> None:
        for name in ("e_accept", "e_reject", "p_mid", "rho_mid"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {value}")


@dataclass(frozen=True)
class Acceptance:
    """How speculation goes: per-step acceptance ``p``, the mix of reviewed block lengths (length, share of
    blocks; shares sum to 1), ``rho`` (separate repairs per rejection), ``f`` (reviewed share of committed
    steps) and, for the three-tier chain, its rates (``chain``). Raises ValueError for anything outside its
    range."""

    p: float
    blocks: tuple[tuple[int, float], ...]
    rho: float
    f: float
    chain: Chain | None = None

    def __post_init__(self) -> None:
        for name, value, lo in (("p", self.p, 0.0), ("rho", self.rho, 0.0), ("f", self.f, 1e-9)):
            if not lo <= value <= 1.0:
                raise ValueError(f"{name} must lie in [{lo:g}, 1], got {value}")
        if not self.blocks or any(n < 1 or int(n) != n or w < 0 for n, w in self.blocks):
            raise ValueError(f"block lengths must be integers >= 1 with shares >= 0, got {self.blocks}")
        if not math.isclose(sum(w for _, w in self.blocks), 1.0, rel_tol=1e-6):
            raise ValueError(f"block shares must sum to 1, got {sum(w for _, w in self.blocks)}")

    @classmethod
    def from_mean(cls, p: float, n: float, rho: float, f: float, chain: Chain | None = None) -> Acceptance:
        """A mean block length ``n`` as a mix of floor(n) and ceil(n) blocks with that mean."""
        if not n >= 1:
            raise ValueError(f"the block length n must be >= 1, got {n}")
        lo = math.floor(n)
        hi_share = n - lo
        blocks = ((lo, 1.0),) if hi_share == 0 else ((lo, 1 - hi_share), (lo + 1, hi_share))
        return cls(p, blocks, rho, f, chain)

    @classmethod
    def from_counts(cls, p: float, lengths: Mapping[int, int], rho: float, f: float,
                    chain: Chain | None = None) -> Acceptance:
        """The mix from counted block lengths ``{length: blocks}``."""
        total = sum(lengths.values())
        if total <= 0:
            raise ValueError("no reviewed blocks to take block lengths from")
        return cls(p, tuple((int(n), c / total) for n, c in sorted(lengths.items()) if c), rho, f, chain)

    @property
    def mean_n(self) -> float:
        return sum(n * w for n, w in self.blocks)

    @property
    def per_block(self) -> float:
        """Expected committed steps per reviewed block, ``sum_n w_n E(p, n)`` (Assumption 2 per block)."""
        return sum(w * expected_steps_per_block(self.p, n) for n, w in self.blocks)

    @property
    def verifies_per_step(self) -> float:
        return self.f / self.per_block

    @property
    def repairs_per_step(self) -> float:
        return self.f * self.rho * (1 - self.p)

    @property
    def wasted_drafts(self) -> float:
        """Drafted steps per committed step that commit unreviewed and make no progress: none here, where every
        committed step counts; the controller's accounting per useful step (``CappedAcceptance``) has some."""
        return 0.0

    @property
    def drafts_per_step(self) -> float:
        return self.f * self.mean_n / self.per_block + (1 - self.f) + self.wasted_drafts

    def r_u(self, v_over_d: float) -> float:
        """Proposition 1 over the block mix: ``v/d / E + rho (1 - p)`` (``theory.r_u`` for one length)."""
        return v_over_d / self.per_block + self.rho * (1 - self.p)

    def l_u(self, v_over_d: float, kappa: float) -> float:
        """Proposition 2 over the block mix: ``R_u + kappa * n / E`` (``theory.l_u`` for one length)."""
        return self.r_u(v_over_d) + kappa * self.mean_n / self.per_block

    def chain_per_block(self) -> tuple[float, float, float]:
        """The chain's (committed steps, escalations, separate strong repairs) per reviewed block over the mix
        (``theory.chain_traffic`` per length). ValueError without ``chain``."""
        c = self.chain
        if c is None:
            raise ValueError("no chain: Acceptance.chain is None")
        steps = escalated = repairs = 0.0
        for n, w in self.blocks:
            t = chain_traffic(self.p, n, 0.0, self.rho, e_accept=c.e_accept, e_reject=c.e_reject, p_mid=c.p_mid,
                              rho_mid=c.rho_mid)
            steps, escalated = steps + w * t.steps_per_block, escalated + w * t.escalation
            repairs += w * t.strong * t.steps_per_block  # with v/d = 0, the strong traffic is the repairs
        return steps, escalated, repairs

    def r_chain(self, v_over_d: float) -> float:
        """The chain's Proposition over the block mix: ``(e v/d + S) / E_c`` (``theory.r_chain`` for one length)."""
        steps, escalated, repairs = self.chain_per_block()
        return (escalated * v_over_d + repairs) / steps

    def l_chain(self, v_over_d: float, kappa: float, kappa_mid: float) -> float:
        """Proposition 2 for the chain: ``R_chain + (kappa n + kappa_mid) / E_c``, with ``kappa_mid`` the mid
        verify's latency over a strong step's."""
        steps = self.chain_per_block()[0]
        return self.r_chain(v_over_d) + (kappa * self.mean_n + kappa_mid) / steps


@dataclass(frozen=True)
class CallShape:
    """One call's mean tokens: prompt, the cached part of it, and decode."""

    prompt: float
    cached: float
    decode: float

    def __post_init__(self) -> None:
        if min(self.prompt, self.cached, self.decode) < 0 or self.cached > self.prompt:
            raise ValueError(f"a call shape needs 0 <= cached <= prompt and decode >= 0, got {self}")


@dataclass(frozen=True)
class Shapes:
    """The calls of both methods: a strong step (Strong-only), a verify, a separate repair and a weak draft
    step; ``max_context`` (tokens) sizes the KV cache a session may need at its end."""

    step: CallShape
    verify: CallShape
    repair: CallShape
    draft: CallShape
    max_context: float


Calls = dict[str, list[tuple[float, CallShape]]]  # per role: (calls per committed step, shape)


def calls_per_step(method: Method | Calls, acc: Acceptance, shapes: Shapes) -> Calls:
    """(calls per committed step, shape) per role (strong, mid, weak); a ``Calls`` mix (measured, or a
    controller's) as it is. The mid verify takes the strong verify's shape (same prompt and verdict)."""
    if isinstance(method, dict):
        return method
    if method == "strong":
        return {"strong": [(1.0, shapes.step)], "mid": [], "weak": []}
    if method == "specagent":
        return {"strong": [(acc.verifies_per_step, shapes.verify), (acc.repairs_per_step, shapes.repair)],
                "mid": [], "weak": [(acc.drafts_per_step, shapes.draft)]}
    if method == "chain":  # a mid verify per block, a strong verify per escalated block (module docstring)
        steps, escalated, repairs = acc.chain_per_block()
        per = acc.f / steps
        return {"strong": [(per * escalated, shapes.verify), (per * repairs, shapes.repair)],
                "mid": [(per, shapes.verify)],
                "weak": [(per * acc.mean_n + 1 - acc.f + acc.wasted_drafts, shapes.draft)]}
    raise ValueError(f"unknown method {method!r}; the planner knows {', '.join(METHODS)}, chain")


