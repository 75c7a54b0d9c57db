"""Pass@1, the paired bootstrap and the gap recovered; the summaries' costs counted over every role."""

import dataclasses
import math
from types import SimpleNamespace

import pytest

from specagent_ray.results.trial import BlockStats, RoleUsage, TrialResult
from specagent_ray.results.stats import gap_recovered, paired_bootstrap, pass_at_1
from specagent_ray.results.summaries import MethodSummary, method_summaries

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


def usage(hbm_tb: float, flops: float = 0.0, latency: float = 0.0, spread: float = 0.0) -> RoleUsage:
    """A role's usage with an HBM read of ``hbm_tb`` TB, its estimated range ``± spread`` TB."""
    return RoleUsage(calls=1, prompt_tokens=0, cached_prompt_tokens=0, decode_tokens=0, flops=flops,
                     hbm_low=(hbm_tb - spread) * 1e12, hbm_high=(hbm_tb + spread) * 1e12, gpu_latency_s=latency)


def costed(method, task, strong, weak, mid=None):
    return TrialResult(method=method, task_id=str(task), trial=0, reward=1.0, termination="agent_stop",
                       committed_steps=1, wall_s=0.0, strong=strong, weak=weak, mid=mid, blocks=BlockStats())


def cost_rows(summary, table: int = 1) -> dict[str, list[str]]:
    """The cells of ``summary_tables``' table ``table`` (1: HBM, 2: compute), by method."""
    from rich.console import Console

    from specagent_ray.results.tables import summary_tables

    cfg = SimpleNamespace(domain="airline", trials=1, spec=SimpleNamespace(k=6),
                          hardware=SimpleNamespace(gpu="h20", strong_gpus=16))
    console = Console(width=400, record=True)
    console.print(summary_tables(summary, cfg)[table])
    lines = [x for x in console.export_text().splitlines() if x.startswith("│")]
    return {cells[0]: cells for cells in ([c.strip() for c in x.strip("│").split("│")] for x in lines)}


def test_every_cost_counts_every_role_with_the_split_beside_it():
    rs = [costed("strong", t, usage(100.0, flops=10.0, latency=1.0, spread=10.0), usage(0.0)) for t in (0, 1)]
    rs += [costed("specagent+chain", 0, usage(20.0, flops=2.0, latency=0.2, spread=2.0), usage(15.0, 3.0, 0.3),
                  usage(5.0, flops=1.0, latency=0.1)),
           costed("specagent+chain", 1, usage(30.0, flops=2.0, latency=0.2, spread=2.0), usage(25.0, 3.0, 0.3),
                  usage(5.0, flops=1.0, latency=0.1))]
    by = {s.method: s for s in method_summaries(rs)}
    chain = by["specagent+chain"]
    assert (chain.weak_hbm_tb, chain.mid_hbm_tb, chain.strong_hbm_tb) == pytest.approx((20.0, 5.0, 25.0))
    assert chain.total_hbm_tb == pytest.approx(50.0)
    assert (chain.total_hbm_low_tb, chain.total_hbm_high_tb) == pytest.approx((48.0, 52.0))
    assert (chain.flops, chain.gpu_latency_s) == pytest.approx((6.0, 0.6))  # the mid's own included
    assert by["strong"].mid_hbm_tb == 0.0 and by["strong"].total_hbm_tb == pytest.approx(100.0)
    rows = cost_rows(list(by.values()))
    # method | HBM all roles | range | x Strong-only, all roles | weak | mid | strong | x Strong-only, strong model only
    assert rows["specagent+chain"][1:] == ["50.00", "48.00-52.00", "0.50", "20.00", "5.00", "25.00", "0.25"]
    assert rows["strong"][1:] == ["100.00", "90.00-110.00", "1.00", "0.00", "0.00", "100.00", "1.00"]
    # method | FLOPs, all roles | FLOPs, paper's layout | GPU latency, all roles (x Strong-only each)
    assert cost_rows(list(by.values()), 2)["specagent+chain"][1:4] == ["0.60", "0.60", "0.60"]


def test_a_summary_from_before_the_totals_reads_n_a_not_a_crash():
    old = {f.name: getattr(s, f.name) for s in method_summaries([costed("strong", 0, usage(100.0, 1.0), usage(1.0))])
           for f in dataclasses.fields(s) if "hbm" not in f.name or f.name.startswith("strong_")}
    summary = MethodSummary(**old)
    assert math.isnan(summary.total_hbm_tb) and math.isnan(summary.weak_hbm_tb)
    assert cost_rows([summary])["strong"][1:] == ["n/a", "n/a", "n/a", "n/a", "n/a", "100.00", "1.00"]
