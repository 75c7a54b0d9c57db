"""`specagent-ray serve PROFILE` against a deployment that cannot start: it ends within 60 s with exit 1
and one line naming the deployment and the replica's exception, where it used to wait forever.

The tool source that cannot start is tau2 with a broken install: a ``tau2`` package first on PYTHONPATH
that raises on import (the driver never imports it: the tasks are given), so every tool host and
coordinator replica dies in its constructor, as they did on a fresh clone without BFCL's package."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from specagent_ray.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
BROKEN = "tau2 is broken in this install (a test)"


def profile(tmp_path: Path) -> Path:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({"applications": [{
        "name": "specagent", "route_prefix": "/", "import_path": "specagent_ray.serve.app:build_app",
        "args": {"engines": {"kind": "sim", "drafter_replicas": 1, "verifier_replicas": 1},
                 "tool_sources": {"airline": {"kind": "tau2", "domain": "airline"}},
                 "gateway": {"dev_api_key": "dev-key", "coordinator_retry_s": 3.0},
                 "session_log": str(tmp_path / "log")}}]}))
    return path


def test_a_deployment_that_cannot_start_ends_serve_with_exit_1_and_its_exception(tmp_path):
    shadow = tmp_path / "site" / "tau2"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(f"raise RuntimeError({BROKEN!r})\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    command = [str(Path(sys.executable).parent / "specagent-ray"), "serve", str(profile(tmp_path)),
               "--tasks", "0", "--methods", "strong", "--port", str(free_port())]
    begun = time.monotonic()
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - begun
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = [x for x in done.stdout.splitlines() if x.startswith("failed:")]
    assert BROKEN in line and "/tmp/ray/" in line and ("ToolHost" in line or "Coordinator" in line), line
    assert took < 60 + 30, took  # 60 s once deployed, plus Ray's start and stop on 2 cores
