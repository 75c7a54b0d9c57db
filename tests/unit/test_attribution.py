"""Per-request attribution by token share: ratios, conservation, unattributed windows, bucketing."""

from __future__ import annotations

import math
import random

import pytest

from specagent_ray.telemetry.attribution import Attributed, Attribution, Window, attribute, bucket_tokens


def windows(*totals: tuple[float, float | None]) -> list[Window]:
    return [Window(float(i), float(i + 1), g, d) for i, (g, d) in enumerate(totals)]


def assert_conserved(result: Attribution, ws: list[Window]) -> None:
    gpu = math.fsum(a.gpu_seconds for a in result.requests.values()) + result.unattributed.gpu_seconds
    assert gpu == pytest.approx(math.fsum(w.gpu_seconds for w in ws), rel=1e-12, abs=1e-15)
    assert result.totals.gpu_seconds == pytest.approx(math.fsum(w.gpu_seconds for w in ws), rel=1e-12)
    if all(w.dram_bytes is not None for w in ws):
        dram = math.fsum(a.dram_bytes for a in result.requests.values()) + result.unattributed.dram_bytes
        assert dram == pytest.approx(math.fsum(w.dram_bytes for w in ws), rel=1e-12)


def test_three_to_one_tokens_get_three_to_one_resources() -> None:
    ws = windows((0.7, 6e11), (0.8, 9e11), (0.05, 1e10))
    tokens = [{"a": 30, "b": 10}, {"a": 3, "b": 1}, {"a": 600, "b": 200}]
    result = attribute(ws, tokens)
    a, b = result.requests["a"], result.requests["b"]
    assert a.gpu_seconds / b.gpu_seconds == pytest.approx(3, rel=0.01)
    assert a.dram_bytes / b.dram_bytes == pytest.approx(3, rel=0.01)
    assert (a.tokens, b.tokens, a.windows) == (633, 211, 3)
    assert result.unattributed == Attributed(0.0, 0.0, 0, 0)
    assert_conserved(result, ws)


def test_shares_follow_each_window_by_hand() -> None:
    ws = windows((1.0, 100.0), (2.0, 300.0))
    result = attribute(ws, [{"a": 1, "b": 3}, {"b": 1, "c": 1}])
    assert result.requests["a"].gpu_seconds == pytest.approx(0.25)
    assert result.requests["b"].gpu_seconds == pytest.approx(0.75 + 1.0)
    assert result.requests["c"].dram_bytes == pytest.approx(150.0)
    assert_conserved(result, ws)


def test_windows_without_tokens_stay_unattributed() -> None:
    ws = windows((1.0, 10.0), (0.5, 4.0), (0.25, 2.0))
    result = attribute(ws, [{"a": 5}, {}, {"a": 0, "b": 0}])
    assert result.requests["a"] == Attributed(1.0, 10.0, 5, 1)
    assert "b" not in result.requests
    assert result.unattributed == Attributed(0.75, 6.0, 0, 2)
    assert_conserved(result, ws)


def test_unmeasured_dram_propagates_as_none() -> None:
    ws = windows((1.0, None), (1.0, 8.0), (1.0, None))
    result = attribute(ws, [{"a": 1}, {"a": 1, "b": 1}, {}])
    assert result.requests["a"].dram_bytes is None  # one of its windows had no DRAM measurement
    assert result.requests["b"].dram_bytes == pytest.approx(4.0)
    assert result.unattributed.dram_bytes is None and result.totals.dram_bytes is None
    assert_conserved(result, ws)


@pytest.mark.parametrize("seed", range(20))
def test_conservation_on_random_windows(seed: int) -> None:
    rng = random.Random(seed)
    ws = windows(*[(rng.uniform(0, 8), rng.uniform(0, 4.8e12)) for _ in range(rng.randint(1, 50))])
    tokens = [{f"r{i}": rng.choice([0, 1, 7, 512]) for i in range(rng.randint(0, 6))} for _ in ws]
    assert_conserved(attribute(ws, tokens), ws)


def test_attributions_from_two_nodes_add() -> None:
    node1 = attribute(windows((1.0, 10.0)), [{"a": 3, "b": 1}])
    node2 = attribute(windows((2.0, 20.0)), [{"a": 1}])
    both = node1 + node2
    assert both.requests["a"] == Attributed(2.75, 27.5, 4, 2)
    assert both.requests["b"] == Attributed(0.25, 2.5, 1, 1)
    assert both.totals.gpu_seconds == pytest.approx(3.0)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        attribute(windows((1.0, 1.0)), [])
    with pytest.raises(ValueError):
        attribute(windows((1.0, 1.0)), [{"a": -1}])
    with pytest.raises(ValueError):
        Window(2.0, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        Window(0.0, 1.0, -1.0, 0.0)


def test_bucket_tokens_places_events_by_time() -> None:
    ws = windows((1.0, 1.0), (1.0, 1.0))  # [0, 1) and [1, 2)
    events = [(0.0, "a", 5), (0.99, "a", 1), (1.0, "b", 2), (1.5, "a", 3), (2.0, "a", 100), (-0.1, "b", 9)]
    assert bucket_tokens(ws, events) == [{"a": 6}, {"b": 2, "a": 3}]
