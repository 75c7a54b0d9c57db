"""``bench engines``' pairs and goals, without engines (the engines' run is in tests/integration)."""

from __future__ import annotations

import argparse

from specagent_ray.bench.engines.features import add_parser, goals, pairs

CACHEABLE = "verify cached / cacheable (all but the block)"


def args() -> argparse.Namespace:
    """The command's defaults, from its own parser."""
    return add_parser(argparse.ArgumentParser().add_subparsers()).parse_args([])


def test_the_placement_pair_differs_only_in_its_router_and_runs_prefill_ahead_as_gpu_tp16_does():
    placement = next(p for p in pairs(args()) if p.feature == "placement")
    assert placement.off == placement.on and placement.on["prefill_ahead"] is True
    assert placement.engines == {"replicas": {"verifier": 2}}


def test_placement_is_judged_on_the_whole_prompt_and_on_what_a_cache_can_hold():
    off = {"verify cached share": 0.60, CACHEABLE: 0.86}
    met = [ok for _, ok in goals("placement", off, {"verify cached share": 0.68, CACHEABLE: 0.976})]
    assert met == [False, True]  # the block, a third of the prompt here, is new to any cache
    assert [ok for _, ok in goals("placement", off, {"verify cached share": 0.91, CACHEABLE: 0.89})] == [True, False]
    text = goals("placement", off, {"verify cached share": 0.68, CACHEABLE: 0.976})[1][0]
    assert "98%" in text and "power-of-two 86%" in text
    nothing = {"verify cached share": None, CACHEABLE: None}  # no verify answered: reported, never met
    assert [ok for _, ok in goals("placement", nothing, nothing)] == [False, False]
