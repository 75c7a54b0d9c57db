"""One Ray head per test session (per xdist worker process) for the served tests that can share one.

Starting a local Ray instance and Serve's proxy costs tens of seconds on 2 busy cores; each module used to
pay it. A module that can share (its apps do not kill or restart the cluster, and it needs no fresh Ray
of its own) asks for ``ray_head``: the first such module starts the head, ``ray start --head --block`` in
a subprocess (``specagent_ray.testing.ray_cluster``), and the session's end stops its process tree. In
its module fixture it connects (``ray_head.connected()``), deploys NAMED applications under its own route
prefixes, deletes only those at its end (``serve.delete``) and disconnects; the head and Serve stay up.

Modules that must have their own cluster keep it: those that ``ray.init`` a fresh in-process instance,
kill or stop the cluster, run several nodes, Kubernetes' ``serve deploy`` or the wheel. A driver that
disconnected leaves nothing behind in this process, so their ``ray.init(address="local")`` starts a new
instance as before.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from specagent_ray.ports import free_port
from specagent_ray.testing.ray_cluster import Head, start_head, stop_head, wait_until_up

LOGICAL_CPUS = 32  # logical: the sharing modules' apps, each deployed alone, fit with room (fencing's two)
HOST = "127.0.0.1"


@dataclass(frozen=True)
class SharedHead:
    """The session's head: ``address`` for ``ray.init``, ``metrics_port`` (Ray's Prometheus endpoint,
    which exports every 500 ms), and Serve's HTTP proxy at ``url`` (``http_port``), one for the session."""

    head: Head
    http_port: int

    @property
    def address(self) -> str:
        return self.head.address

    @property
    def metrics_port(self) -> int:
        return self.head.metrics_port

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @contextmanager
    def connected(self) -> Iterator[str]:
        """This process as a driver of the head, with Serve running on ``http_port`` (started here if
        no module started it yet, or one shut it down); yields the proxy's base URL. On exit the driver
        disconnects and the cluster, Serve and every application still deployed stay as they are."""
        import ray

        from specagent_ray.launch.startup import ray_init, start_serve
        from specagent_ray.testing.ray_cluster import tail

        if self.head.proc.poll() is not None:  # connecting to a dead GCS would wait, not fail
            pytest.fail(f"the shared Ray head exited ({self.head.proc.returncode}):\n{tail(self.head)}",
                        pytrace=False)
        ray_init(address=self.address, log_to_driver=False, logging_level="WARNING")
        try:
            start_serve({"host": HOST, "port": self.http_port})
            yield self.url
        finally:
            ray.shutdown()


@pytest.fixture(scope="session")
def ray_head() -> Iterator[SharedHead]:
    """Started on the first module that asks, stopped (its whole process tree) at the session's end.
    Serve's proxy checks are patient on a busy machine (``startup.patient_serve_env``: the controller
    reads them from the head's environment); Ray exports metrics every 500 ms, not every 10 s."""
    from specagent_ray.launch.startup import patient_serve_env

    with patient_serve_env():
        head = start_head(num_cpus=LOGICAL_CPUS, system_config={"metrics_report_interval_ms": 500})
    try:
        wait_until_up(head)
        yield SharedHead(head, free_port())
    finally:
        stop_head(head)
        shutil.rmtree(head.temp_dir, ignore_errors=True)
