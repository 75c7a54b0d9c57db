"""``bench calls``: the summary's arithmetic and the command line (the Serve run itself is the bench's)."""

from __future__ import annotations

import pytest

from specagent_ray.bench.served.replica_calls import summary
from specagent_ray.cli import build_parser


def run(calls: int, cpu_s: float, callee_cpu_s: float, wall_s: float) -> dict[str, float]:
    return {"calls": calls, "cpu_s": cpu_s, "callee_cpu_s": callee_cpu_s, "wall_s": wall_s}


def test_the_summary_takes_medians_per_call_and_prices_a_step_from_both_sides():
    runs = {"serve": [run(1000, 1.0, 0.5, 2.0), run(1000, 0.8, 0.7, 1.0), run(1000, 5.0, 0.6, 9.0)],
            "socket": [run(1000, 0.02, 0.01, 0.05), run(1000, 0.04, 0.03, 0.03), run(1000, 0.03, 0.02, 0.04)]}
    f = summary(runs, out_per_step=0.4, in_per_step=0.2)
    assert f["serve_out_us"] == pytest.approx(1000) and f["serve_in_us"] == pytest.approx(600)
    assert f["serve_wall_us"] == pytest.approx(2000) and f["socket_out_us"] == pytest.approx(30)
    assert f["out_ratio"] == pytest.approx(1000 / 30) and f["in_ratio"] == pytest.approx(600 / 20)
    assert f["serve_ms_per_step"] == pytest.approx((0.4 * 1000 + 0.2 * 600) / 1000)
    assert f["socket_ms_per_step"] == pytest.approx((0.4 * 30 + 0.2 * 20) / 1000)


def test_the_command_line_has_defaults_and_refuses_nonsense():
    args = build_parser().parse_args(["bench", "calls"])
    assert args.concurrency == (1, 8, 64) and args.rounds == 3
    from rich.console import Console

    from specagent_ray.bench.served.replica_calls import run_from_args

    with pytest.raises(ValueError, match="at least 1"):
        run_from_args(build_parser().parse_args(["bench", "calls", "--concurrency", "0,8"]), Console())
