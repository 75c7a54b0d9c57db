"""The one profile override: a deep merge, applications keyed by name."""

from __future__ import annotations

import pytest

from specagent_ray.overrides import apply_overrides, merge


def test_mappings_merge_and_everything_else_replaces_without_touching_the_inputs():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    extra = {"a": {"c": [3]}, "e": {"f": 1}}
    assert merge(base, extra) == {"a": {"b": 1, "c": [3]}, "d": 1, "e": {"f": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1} and extra == {"a": {"c": [3]}, "e": {"f": 1}}
    out = merge(base, {})
    out["a"]["b"] = 99
    assert base["a"]["b"] == 1  # a copy, not a view


def test_applications_are_keyed_by_name_and_an_unknown_one_is_refused():
    profile = {"http_options": {"port": 8000},
               "applications": [{"name": "engines", "args": {"x": 1}}, {"name": "specagent", "args": {"y": 1}}]}
    out = apply_overrides(profile, {"http_options": {"port": 9000},
                                    "applications": {"specagent": {"args": {"z": 2}}}})
    assert out["http_options"] == {"port": 9000}
    assert out["applications"] == [{"name": "engines", "args": {"x": 1}},
                                   {"name": "specagent", "args": {"y": 1, "z": 2}}]
    with pytest.raises(ValueError, match="typo"):
        apply_overrides(profile, {"applications": {"typo": {}}})
