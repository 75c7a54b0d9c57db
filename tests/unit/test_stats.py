"""Pass@1, the paired bootstrap and the gap recovered."""

import math

import pytest

from specagent_ray.results.trial import BlockStats, RoleUsage, TrialResult
from specagent_ray.results.stats import gap_recovered, paired_bootstrap, pass_at_1

ZERO = RoleUsage(calls=0, prompt_tokens=0, cached_prompt_tokens=0, decode_tokens=0, flops=0, hbm_low=0, hbm_high=0,
                 gpu_latency_s=0)


def result(method, task, trial, reward):
    return TrialResult(method=method, task_id=str(task), trial=trial, reward=reward, termination="agent_stop",
                       committed_steps=1, wall_s=0.0, strong=ZERO, weak=ZERO, blocks=BlockStats())


def test_pass_at_1_averages_over_tasks_and_trials():
    rs = [result("m", 0, 0, 1.0), result("m", 0, 1, 0.0), result("m", 1, 0, 1.0), result("m", 1, 1, 1.0)]
    assert pass_at_1(rs) == 75.0


def test_identical_methods_have_a_zero_width_interval():
    rs = [result("a", t, 0, float(t % 2)) for t in range(20)]
    assert paired_bootstrap(rs, rs) == (0.0, 0.0, 0.0)


def test_bootstrap_interval_covers_the_difference_and_excludes_zero_for_a_clear_gap():
    better = [result("a", t, 0, 1.0) for t in range(40)]
    worse = [result("b", t, 0, 1.0 if t % 4 else 0.0) for t in range(40)]
    diff, lo, hi = paired_bootstrap(better, worse, resamples=2000)
    assert diff == pytest.approx(25.0)
    assert 0 < lo < diff < hi <= 50


def test_bootstrap_pairs_by_task_and_needs_overlap():
    a = [result("a", t, 0, 1.0) for t in range(5)]
    with pytest.raises(ValueError, match="no task in common"):
        paired_bootstrap(a, [result("b", 99, 0, 1.0)])


def test_gap_recovered():
    assert gap_recovered(86.0, 80.0, 86.0) == 1.0
    assert gap_recovered(83.0, 80.0, 86.0) == pytest.approx(0.5)
    assert math.isnan(gap_recovered(80.0, 80.0, 80.0))
