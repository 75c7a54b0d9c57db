"""Proposition 1 against a Monte-Carlo run of the real loop under Assumption 2."""

import pytest

from specagent_ray.bench.theory.montecarlo import measure


@pytest.mark.parametrize("p", [0.5, 0.7, 0.9])
def test_proposition_1_matches_measurement_within_0_01(p):
    point = measure(p, n=4, rho=0.3, steps=30_000, seed=1)
    assert point.committed_steps >= 30_000
    assert abs(point.predicted - point.measured) <= 0.01, point


def test_measurement_moves_with_p_and_rho():
    # guards against a measurement that ignores its inputs
    low, high = measure(0.5, steps=5_000), measure(0.9, steps=5_000)
    assert high.measured < low.measured - 0.05
    assert measure(0.5, rho=1.0, steps=5_000).measured > low.measured + 0.2
