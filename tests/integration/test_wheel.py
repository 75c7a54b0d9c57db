"""The package as a user installs it: a wheel built from this checkout, installed on its own (not the
editable checkout), finds its profiles and serves the sim profile's main job."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel, and a folder holding only it installed (its dependencies come from this venv)."""
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(out), str(REPO)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next(out.glob("specagent_ray-*.whl"))
    target = out / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return wheel, target


def test_the_wheel_carries_every_profile(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for profile in (REPO / "deployments").glob("*.yaml"):
        assert f"specagent_ray/profiles/{profile.name}" in names


def test_the_installed_wheel_serves_the_sim_profile_away_from_the_checkout(installed, tmp_path):
    _, target = installed
    env = {**os.environ, "PYTHONPATH": str(target), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    code = ("import specagent_ray, sys; assert specagent_ray.__file__.startswith(sys.argv[1]), specagent_ray.__file__; "
            "from specagent_ray.cli import main; raise SystemExit(main(['serve', 'sim', '--tasks', '0']))")
    run = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert "SpecAgent vs Strong-only through the gateway, profile sim" in run.stdout
