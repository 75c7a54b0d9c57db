"""The cpu-dev overlay's serveConfigV2, as KubeRay would submit it, on a real local Ray head.

Renders k8s/overlays/cpu-dev, takes the RayService's serveConfigV2, starts `ray start --head` (own temp
dir, free ports, dashboard on, because `serve deploy` talks to the dashboard like KubeRay does), runs
`serve deploy`, waits for every application to be RUNNING and drives one simulated tau2 session through
the gateway to its final event. Only the bits that belong to the pod, not to this machine, are changed:
the HTTP host and port (loopback and a free port instead of 0.0.0.0:8000 on a shared machine) and the
session log folder (a temp dir instead of the worker's working directory).

Teardown stops only this test's Ray processes (``specagent_ray.testing.ray_cluster.stop_head``: the
`ray start --block` process tree, and anything carrying this test's temp dir): `ray stop` would stop every
Ray instance on the machine.
Run it under `flock /tmp/specagent-ray.lock` on shared machines.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import yaml

pytest.importorskip("ray")
from specagent_ray.launch.client import GatewayClient
from specagent_ray.ports import free_port
from specagent_ray.testing import ray_cluster
from specagent_ray.testing.ray_cluster import Head, ray_env, stop_head

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KEY = "dev-key"


def rendered_serve_config(out: Path) -> dict:
    assert shutil.which("kubectl"), "kubectl not found on PATH: needed to render k8s/overlays/cpu-dev"
    env = {**os.environ, "RENDER_DIR": str(out), "PYTHON": sys.executable}
    done = subprocess.run([str(REPO / "k8s" / "render.sh"), "cpu-dev"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all((out / "cpu-dev.yaml").read_text()) if d]
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    return yaml.safe_load(service["spec"]["serveConfigV2"])


def start_head(temp_dir: str) -> Head:
    """Dashboard on (``serve deploy`` talks to it), and the resource the pod's cpu group offers: the serve
    config pins the app's deployments to it."""
    return ray_cluster.start_head(temp_dir, num_cpus=8, dashboard=True, resources={"specagent_app": 1000},
                                  extra_args=("--object-store-memory", "100000000"))


def wait_for(what: str, check, timeout_s: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ray start exited with {proc.returncode} while waiting for {what}"
        try:
            if check():
                return
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last error: {last!r})")


async def one_session(url: str) -> list[dict]:
    async with GatewayClient(url, KEY) as client:
        created = await client.create(tool_source="airline", task_id="0", user="simulated")
        return [e async for e in client.events(created["session_id"])]


def test_cpu_dev_serve_config_deploys_and_serves_a_session():
    temp_dir = tempfile.mkdtemp(prefix="sa-k8s-", dir="/tmp")  # short: Ray's socket paths have a length limit
    try:
        config = rendered_serve_config(Path(temp_dir) / "rendered")
        assert config["http_options"]["host"] == "0.0.0.0"  # what the pod binds
        port = free_port()
        config["http_options"].update(host="127.0.0.1", port=port)
        for app in config["applications"]:
            if app["import_path"] == "specagent_ray.serve.app:build_app":
                app["args"]["session_log"] = str(Path(temp_dir) / "sessions")
        deploy_file = Path(temp_dir) / "serveConfigV2.yaml"
        deploy_file.write_text(yaml.safe_dump(config, sort_keys=False))

        head = start_head(temp_dir)
        proc = head.proc
        try:
            dash = f"http://127.0.0.1:{head.dashboard_port}"
            wait_for("the dashboard", lambda: "success" in httpx.get(f"{dash}/api/gcs_healthz", timeout=5).text,
                     90, proc)
            done = subprocess.run([str(BIN / "serve"), "deploy", str(deploy_file), "--address", dash],
                                  capture_output=True, text=True, timeout=120, env=ray_env())
            assert done.returncode == 0, done.stdout + done.stderr

            def running() -> bool:
                apps = httpx.get(f"{dash}/api/serve/applications/", timeout=10).json()["applications"]
                statuses = {name: a["status"] for name, a in apps.items()}
                assert "DEPLOY_FAILED" not in statuses.values(), apps
                return set(statuses) == {a["name"] for a in config["applications"]} and \
                    set(statuses.values()) == {"RUNNING"}

            wait_for("every application RUNNING", running, 150, proc)
            url = f"http://127.0.0.1:{port}"
            assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
            events = asyncio.run(asyncio.wait_for(one_session(url), 120))
            assert events[-1]["t"] == "final" and events[-1]["status"] == "done", events[-1]
            assert any(e["t"] == "commit" for e in events)
        finally:
            stop_head(head)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
