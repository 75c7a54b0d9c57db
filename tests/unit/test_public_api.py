"""The package's public surface: what ``import specagent_ray`` offers, and that it stays light."""

from __future__ import annotations

import subprocess
import sys

import specagent_ray


def test_the_public_names_are_the_real_objects():
    from specagent_ray.launch.client import GatewayClient
    from specagent_ray.protocol import METHODS, Parts, SpecConfig, run_specagent
    from specagent_ray.serve.app import build_app
    from specagent_ray.serve.core.config import AppConfig

    expected = {"METHODS": METHODS, "Parts": Parts, "SpecConfig": SpecConfig, "run_specagent": run_specagent,
                "build_app": build_app, "GatewayClient": GatewayClient, "AppConfig": AppConfig}
    assert set(specagent_ray.__all__) == set(expected)
    for name, obj in expected.items():
        assert getattr(specagent_ray, name) is obj
    assert METHODS["specagent"] and callable(run_specagent)


def test_importing_the_package_loads_neither_ray_nor_the_http_stack():
    code = "import sys, specagent_ray; print(sorted(m for m in ('ray', 'fastapi', 'openai') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error():
    try:
        specagent_ray.Coordinator  # noqa: B018
    except AttributeError as exc:
        assert "Coordinator" in str(exc)
    else:
        raise AssertionError("specagent_ray.Coordinator should not exist")
