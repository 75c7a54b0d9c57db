"""Propositions 1 and 2 of the paper: predicted strong-model traffic and latency ratios (ESTIMATED).

Assumptions:

- **Assumption 1** (strong decode is bandwidth-bound): the strong model decodes at a batch below the
  compute/bandwidth balance point, so its cost per decoded step is set by weight reads from HBM.
- **Assumption 2** (i.i.d. acceptance): within a task u, each drafted step is accepted by the verifier
  independently with the same probability ``p`` (p_u in the paper).

Symbols:

- ``p``: per-step acceptance probability of task u (0 <= p <= 1);
- ``n``: block length, the number of drafted steps one verdict reviews (n >= 1);
- ``d``: the strong model's weight reads for one step decoded in full;
- ``v``: the strong model's weight reads for one verdict; only the ratio ``v_over_d = v / d`` matters;
- ``rho``: the probability that a rejection needs a separate strong repair, because the fused repair ã
  was missing or invalid (0 <= rho <= 1);
- ``kappa``: the weak model's per-step latency relative to the strong model's (kappa >= 0).

A block of n drafted steps commits ``E = sum_{k<n} p**k = (1 - p**n) / (1 - p)`` steps on average
(the accepted prefix, plus the repair step when a step is rejected). Written as that finite sum, E is exact
and numerically stable for every p in [0, 1], including the limit p -> 1 where E = n.
"""

from __future__ import annotations

from dataclasses import dataclass


def _check(p: float, n: int) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")


def _check_nonneg(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def expected_steps_per_block(p: float, n: int) -> float:
    """Expected committed steps per reviewed block of length n under Assumption 2:
    ``(1 - p**n) / (1 - p)``, equal to n at p = 1 (computed as ``sum_{k<n} p**k``)."""
    _check(p, n)
    return sum(p**k for k in range(n))


def r_u(p: float, n: int, v_over_d: float, rho: float) -> float:
    """Proposition 1 (ESTIMATED): the strong model's HBM traffic per committed step, relative to Strong-only,

        R_u = (1 - p) / (1 - p**n) * v/d + rho * (1 - p),

    under Assumptions 1 and 2. At p = 1 the first factor is its limit 1/n. Raises ValueError for p outside
    [0, 1], n < 1, v_over_d < 0 or rho outside [0, 1].
    """
    _check(p, n)
    _check_nonneg(v_over_d=v_over_d, rho=rho)
    if rho > 1:
        raise ValueError(f"rho must lie in [0, 1], got {rho}")
    return v_over_d / expected_steps_per_block(p, n) + rho * (1.0 - p)


def l_u(p: float, n: int, v_over_d: float, rho: float, kappa: float) -> float:
    """Proposition 2 (ESTIMATED): the end-to-end latency ratio to Strong-only,

        L_u = R_u + kappa * n * (1 - p) / (1 - p**n),

    under Assumptions 1 and 2: the strong model's share R_u plus the weak model drafting n steps per
    block. At p = 1 the second term is kappa. Always ``l_u >= r_u`` for kappa >= 0.
    """
    _check_nonneg(kappa=kappa)
    return r_u(p, n, v_over_d, rho) + kappa * n / expected_steps_per_block(p, n)


@dataclass(frozen=True, slots=True)
class FittedRates:
    """Maximum-likelihood estimates of p and rho from protocol counts (ESTIMATED)."""

    p: float
    rho: float


def fit_from_counts(accepted_steps: int, rejections: int, separate_repairs: int) -> FittedRates:
    """Estimate ``p`` and ``rho`` from a run's verdict counts under Assumption 2.

    Each verdict reports an accepted prefix of j steps and, unless the whole block passed, one rejected
    step; steps after the first rejection are never judged. So the Bernoulli trials are the accepted steps
    plus the rejections, and the MLE is ``p = accepted / (accepted + rejections)``. ``rho`` is the share of
    rejections that needed a separate strong repair. With no trials p is 1.0; with no rejections rho is 0.0.
    """
    _check_nonneg(accepted_steps=accepted_steps, rejections=rejections, separate_repairs=separate_repairs)
    if separate_repairs > rejections:
        raise ValueError(f"separate_repairs {separate_repairs} > rejections {rejections}")
    trials = accepted_steps + rejections
    p = accepted_steps / trials if trials else 1.0
    rho = separate_repairs / rejections if rejections else 0.0
    return FittedRates(p=p, rho=rho)
