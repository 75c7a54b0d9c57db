"""Fixtures of the security tests: the k8s/ overlays rendered once per session."""

from __future__ import annotations

from typing import Any

import pytest

from specagent_ray.testing.k8s import render


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """Every overlay, rendered fresh by k8s/render.sh (see specagent_ray/testing/k8s.py)."""
    return render(tmp_path_factory.mktemp("rendered"))
