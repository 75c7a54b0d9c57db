"""Pass@1, paired-bootstrap confidence intervals, and the share of the weak-to-strong gap recovered."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .trial import TrialResult


def pass_at_1(results: Sequence[TrialResult]) -> float:
    """Mean reward over every (task, trial), in percent."""
    return 100.0 * sum(r.reward for r in results) / len(results) if results else float("nan")


def per_task_means(results: Sequence[TrialResult]) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for r in results:
        sums.setdefault(r.task_id, []).append(r.reward)
    return {t: sum(v) / len(v) for t, v in sums.items()}


def paired_bootstrap(method: Sequence[TrialResult], baseline: Sequence[TrialResult],
                     resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(difference, low, high) of Pass@1 in points, method minus baseline, resampling tasks with
    replacement and keeping each task's pair together. Only tasks both ran are compared."""
    a, b = per_task_means(method), per_task_means(baseline)
    tasks = sorted(set(a) & set(b))
    if not tasks:
        raise ValueError("no task in common between method and baseline")
    diff = np.array([a[t] - b[t] for t in tasks]) * 100.0
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(tasks), size=(resamples, len(tasks)))
    means = diff[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0
    return float(diff.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def gap_recovered(method: float, weak: float, strong: float) -> float:
    """(method - weak) / (strong - weak); NaN when the two references do not differ."""
    gap = strong - weak
    return (method - weak) / gap if abs(gap) > 1e-9 else math.nan
