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


@dataclass(frozen=True, slots=True)
class ChainTraffic:
    """Proposition 1 for the three-tier chain (ESTIMATED): HBM traffic per committed step relative to
    Strong-only's (one strong step decoded in full), for the strong and the mid engine, with the chain's
    escalation rate per reviewed block and its expected committed steps per reviewed block."""

    strong: float
    mid: float
    escalation: float
    steps_per_block: float


def chain_traffic(p: float, n: int, v_over_d: float, rho: float, *, e_accept: float, e_reject: float | None = None,
                  p_mid: float | None = None, vm_over_d: float = 0.0, rho_mid: float = 0.0) -> ChainTraffic:
    """Proposition 1 extended to the chain weak -> mid -> strong (ESTIMATED).

    The mid verifier reviews every block first; it settles the block itself or escalates it to the strong
    verifier, whose verdict is final. Assumptions 1 and 2 hold for both verifiers (the mid accepts each step
    i.i.d. with ``p_mid`` = q, default p; the strong with p), and

    - **Assumption 3** (independent tiers): on an escalated block the strong verdict is independent of the
      mid's verdict. The mid escalates a block it fully accepted with probability ``e_accept`` (e_a) and one
      it rejected with ``e_reject`` (e_r, default e_a). e_r counts every escalation of a rejected block: low
      confidence, and a fused repair that fails ``valid()`` (the loop escalates those). A block whose staged
      tier the mid may not settle always escalates: with a share c of such blocks, use c + (1 - c) e.
    - A rejection the mid settles commits its fused repair, which is valid (the loop escalates an invalid
      one, protocol/review.py); ``rho_mid`` is the share of settled rejections that carry no repair, for
      which the strong policy writes the step (a separate strong repair, d).

    Derivation, per reviewed block (E(x, n) = sum_{k<n} x**k, a = q**n the chance the mid accepts all n):

        escalated      (prob. e = a e_a + (1 - a) e_r): the strong verdict is final and independent, so the
                       block commits E(p, n) steps on average and reads v + rho (1 - p**n) d (one verify,
                       and a separate repair after a rejection with probability rho, as in Proposition 1);
        mid accepts    (prob. a (1 - e_a)): commits n, no strong reads;
        mid rejects    (prob. (1 - a)(1 - e_r)): commits j + 1 (prefix and the mid's repair), where
                       E[(j + 1) 1{j < n}] = E(q, n) - n a; strong reads rho_mid d.

    so, with E_c = e E(p, n) + a (1 - e_a) n + (1 - e_r)(E(q, n) - n a) committed steps per block,

        R_chain = [e (v/d + rho (1 - p**n)) + (1 - e_r)(1 - a) rho_mid] / E_c,
        M_chain = (v_m / d) / E_c,

    with v_m the mid's weight reads for one verdict (``vm_over_d`` = v_m / d, d the strong step's). Checks:
    e_a = e_r = 1 gives E_c = E(p, n) and R_chain = R_u (today's SpecAgent); e_a = e_r = 0 leaves only the
    rho_mid repairs; with q = p and e_a = e_r = e, E_c = E(p, n) and R_chain = e R_u + (1 - e) rho_mid (1 - p).
    """
    e_reject = e_accept if e_reject is None else e_reject
    q = p if p_mid is None else p_mid
    _check(q, n)
    for name, value in (("e_accept", e_accept), ("e_reject", e_reject), ("rho_mid", rho_mid)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {value}")
    _check_nonneg(vm_over_d=vm_over_d)
    strong_block = r_u(p, n, v_over_d, rho) * expected_steps_per_block(p, n)  # v/d + rho (1 - p**n)
    a = q**n
    esc = a * e_accept + (1 - a) * e_reject
    settled_reject = (1 - e_reject) * (expected_steps_per_block(q, n) - n * a)
    steps = esc * expected_steps_per_block(p, n) + a * (1 - e_accept) * n + settled_reject
    strong = esc * strong_block + (1 - e_reject) * (1 - a) * rho_mid
    return ChainTraffic(strong / steps, vm_over_d / steps, esc, steps)


def r_chain(p: float, n: int, v_over_d: float, rho: float, **chain: float | None) -> float:
    """The chain's strong traffic per committed step relative to Strong-only: ``chain_traffic(...).strong``."""
    return chain_traffic(p, n, v_over_d, rho, **chain).strong  # type: ignore[arg-type]
