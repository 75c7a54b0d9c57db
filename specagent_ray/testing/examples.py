"""How many examples a hypothesis property test runs, by tier.

``tests/conftest.py`` loads one of two hypothesis profiles before any test module is imported: ``fast``
when the run deselects the slow tier (``-m "not slow"``, the developer's loop) and ``full`` otherwise
(the README's whole suite, and CI). A property test states the examples it runs in the whole suite;
``examples`` scales that by the loaded profile, so the fast tier runs a tenth of them (at least
``FLOOR``) and the whole suite runs every one. ``HYPOTHESIS_PROFILE=full`` forces the whole count."""

from __future__ import annotations

from hypothesis import settings

FULL_EXAMPLES = 100  # the ``full`` profile's max_examples: hypothesis's own default
FAST_EXAMPLES = 10
FLOOR = 10
PROFILES = {"full": FULL_EXAMPLES, "fast": FAST_EXAMPLES}


def register_profiles() -> None:
    for name, count in PROFILES.items():
        settings.register_profile(name, max_examples=count)


def examples(full: int) -> int:
    """``full`` under the ``full`` profile; ``full`` scaled by the loaded profile, at least ``FLOOR``."""
    scaled = full * settings.default.max_examples // FULL_EXAMPLES
    return full if scaled >= full else max(min(FLOOR, full), scaled)
