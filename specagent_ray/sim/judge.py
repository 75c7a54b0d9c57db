"""The simulated judges' stated assumptions beyond one verdict (SIMULATED: never claims about a real model).

- **Repeated looks.** A second verdict on the same block at the same history (a critical call's ``verdicts``
  check) shares the first look's draw with correlation ``repeat_correlation`` (a Gaussian copula). 1 (the
  default, the pessimistic reading) makes it a copy of the first, as the per-stage judge always was; 0 makes it
  an independent judge. The first look is exactly the calibrated draw.
- **The mid verifier** of the three-tier chain: a judge of the same kind as the strong one, with its own noise,
  more false accepts and rejects (``MID_VERIFIER_RATES``, relative to the strong judge's), a repair policy
  between the weak and strong policies, and a self-reported confidence that separates its right verdicts from
  its wrong ones at ``MID_CONFIDENCE_AUC``. None of these numbers has public per-step evidence behind it; they
  are assumptions, stated in docs/simulation.md, and the bench labels what depends on them.
"""

from __future__ import annotations

import math
import random
from dataclasses import fields
from statistics import NormalDist

REPEAT_CORRELATION = 1.0  # a second look at the same block is a copy of the first (stated; swept by the bench)
MID_FALSE_ACCEPT_FACTOR = 1.5  # the mid judge false-accepts 1.5x as often as the strong one (at most 0.9)
MID_FALSE_REJECT = 0.05
MID_FUSED_REPAIR = 0.7
MID_CONFIDENCE_AUC = 0.75


class Look:
    """A uniform draw for the n-th look at one question: look 1 is ``first`` itself, a later look mixes the
    first's normal score with its own at ``correlation``."""

    def __init__(self, first: random.Random, own: random.Random | None, correlation: float):
        self.first, self.own, self.correlation = first, own, correlation

    def random(self) -> float:
        u = self.first.random()
        if self.own is None or self.correlation >= 1.0:
            return u
        z1 = NormalDist().inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
        rho = self.correlation
        return NormalDist().cdf(rho * z1 + math.sqrt(1 - rho * rho) * self.own.gauss(0, 1))


def confidence(auc: float, erred: bool, rng: random.Random) -> float:
    """A self-report in (0, 1) whose AUC at telling right from wrong is ``auc``: logistic(z), z ~ N(+d/2, 1)
    when right and N(-d/2, 1) when wrong, d = sqrt(2) * Phi^-1(auc)."""
    if not 0.5 <= auc < 1.0:
        raise ValueError(f"a confidence's AUC must be in [0.5, 1), got {auc}")
    d = math.sqrt(2) * NormalDist().inv_cdf(auc)
    return 1 / (1 + math.exp(-rng.gauss(-d / 2 if erred else d / 2, 1.0)))


def mid_verifier_rates(strong):
    """The mid judge's rates, from the strong judge's (a ``VerifierRates``)."""
    return type(strong)(false_accept=min(0.9, strong.false_accept * MID_FALSE_ACCEPT_FACTOR),
                        false_reject=MID_FALSE_REJECT, fused_repair=MID_FUSED_REPAIR,
                        repeat_correlation=strong.repeat_correlation)


def mid_policy_rates(strong, weak):
    """The mid model's policy (its repairs): each error rate halfway between the strong and weak policies'."""
    return type(strong)(**{f.name: (getattr(strong, f.name) + getattr(weak, f.name)) / 2 for f in fields(strong)})
