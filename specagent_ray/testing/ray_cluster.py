"""A Ray head in a subprocess for tests: ``ray start --head --block`` on loopback, every port free, its own
temp dir; stopped by stopping its process tree, never by ``ray stop`` (that stops every Ray instance on
the machine, other test workers' included).

A driver connects with ``ray.init(address=head.address)``; its ``ray.shutdown()`` disconnects and leaves
the head running. ``tests/integration/test_k8s_deploy.py`` starts one (KubeRay's ``serve deploy`` path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ports import free_port

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Head:
    """A running head: ``address`` for ``ray.init``, ``metrics_port`` (Ray's Prometheus endpoint),
    ``dashboard_port`` (None when the dashboard is off), its process and its private ``temp_dir``."""

    proc: subprocess.Popen
    temp_dir: str
    address: str
    metrics_port: int
    dashboard_port: int | None


def ray_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with no ``RAY_ADDRESS`` from the caller's shell and token auth off
    explicitly (Ray 2.60 turns it on when a token file exists in ~/.ray, and the CLI and the head must
    agree): a loopback-only test cluster. A SIGTERM stops it at once: Ray 2.60 first drains the node for
    up to 30 s while Serve's actors run, which a test cluster has no use for. ``extra`` is added."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "RAY_AUTH_MODE": "disabled", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", **(extra or {})}


def start_head(temp_dir: str | None = None, num_cpus: int = 8, dashboard: bool = False,
               resources: Mapping[str, float] | None = None, system_config: Mapping[str, Any] | None = None,
               env: Mapping[str, str] | None = None, extra_args: tuple[str, ...] = ()) -> Head:
    """Start the head and return at once (:func:`wait_until_up` waits for it). Every port Ray binds is a
    free loopback port chosen now; ``temp_dir`` defaults to a new short folder under /tmp (Ray's socket
    paths have a length limit). ``system_config`` goes to Ray's hidden ``--system-config``."""
    temp_dir = temp_dir or tempfile.mkdtemp(prefix="sa-ray-", dir="/tmp")
    gcs, metrics = free_port(), free_port()
    dashboard_port = free_port() if dashboard else None
    ports = {"--port": gcs, "--ray-client-server-port": free_port(), "--dashboard-agent-listen-port": free_port(),
             "--dashboard-agent-grpc-port": free_port(), "--runtime-env-agent-port": free_port(),
             "--metrics-export-port": metrics, "--node-manager-port": free_port(),
             "--object-manager-port": free_port(), **({"--dashboard-port": dashboard_port} if dashboard else {})}
    cmd = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--num-cpus", str(num_cpus), "--include-dashboard", str(dashboard).lower(),
           "--dashboard-host", "127.0.0.1", "--temp-dir", temp_dir, "--disable-usage-stats",
           *(["--resources", json.dumps(dict(resources))] if resources else []),
           *(["--system-config", json.dumps(dict(system_config))] if system_config else []),
           *extra_args, *[str(x) for kv in ports.items() for x in kv]]
    log = open(Path(temp_dir) / "ray-start.log", "w")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(cmd, cwd=temp_dir, env=ray_env(env), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return Head(proc, temp_dir, f"127.0.0.1:{gcs}", metrics, dashboard_port)


def wait_until_up(head: Head, timeout_s: float = 120.0) -> None:
    """Return once the head's GCS accepts a driver (``ray start`` wrote its session and the port
    answers); AssertionError with the tail of its output if it exits or the time runs out."""
    import socket

    host, port = head.address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if head.proc.poll() is not None:
            raise AssertionError(f"ray start exited with {head.proc.returncode}: {tail(head)}")
        # the GCS binds first; the raylet registers after: a driver needs both, and the session link
        if (Path(head.temp_dir) / "session_latest").exists():
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                if _raylet_ready(head):
                    return
            except OSError:
                pass
        time.sleep(0.5)
    raise AssertionError(f"the Ray head did not come up within {timeout_s:.0f} s: {tail(head)}")


def _raylet_ready(head: Head) -> bool:
    """The raylet's socket exists: drivers attach to the node through it."""
    return any((Path(head.temp_dir) / "session_latest" / "sockets").glob("raylet*"))


def tail(head: Head, lines: int = 15) -> str:
    path = Path(head.temp_dir) / "ray-start.log"
    return " | ".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no output)"


def stop_head(head: Head) -> None:
    """SIGTERM the ``ray start --block`` tree (it stops what it started), then kill what is left of it
    and any process that carries the head's temp dir on its command line."""
    import psutil

    try:
        tree = psutil.Process(head.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    head.proc.send_signal(signal.SIGTERM)
    try:
        head.proc.wait(30)
    except subprocess.TimeoutExpired:
        head.proc.kill()
        head.proc.wait(10)
    strays = [p for p in psutil.process_iter(["cmdline"]) if head.temp_dir in " ".join(p.info["cmdline"] or [])]
    for p in {*tree, *strays}:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs([*tree, *strays], timeout=10)
