"""The hypothesis profiles: the fast tier runs fewer examples, the whole suite every one."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from specagent_ray.testing.examples import FLOOR, PROFILES, examples, register_profiles


@pytest.fixture
def profile():
    register_profiles()
    before = settings.default
    yield lambda name: settings.load_profile(name)
    settings.register_profile("_restore", before)
    settings.load_profile("_restore")


def test_the_full_profile_runs_every_example(profile):
    profile("full")
    assert [examples(n) for n in (5, 200, 10_000)] == [5, 200, 10_000]


def test_the_fast_profile_runs_a_tenth_and_at_least_the_floor(profile):
    profile("fast")
    assert [examples(n) for n in (5, 50, 200, 10_000)] == [5, FLOOR, 20, 1000]


def test_this_run_loaded_the_profile_its_tier_asks_for(request, monkeypatch):
    fast = "not slow" in (request.config.option.markexpr or "")
    asked = os.environ.get("HYPOTHESIS_PROFILE") or ("fast" if fast else "full")
    assert settings.default.max_examples == PROFILES[asked]
