"""Starting under load: Serve's proxy that dies starting is waited for, and a start that cannot succeed
ends the main job with one line that says why, never Ray's traceback. Ray's own exception is injected
where ``serve.start`` raises it; no cluster starts."""

from __future__ import annotations

import io
import os
from contextlib import contextmanager
from pathlib import Path

import pytest
import ray
from ray import serve
from ray.exceptions import ActorDiedError
from rich.console import Console

from specagent_ray.launch import main_job
from specagent_ray.launch.startup import (
    LOCAL_SERVE,
    StartupFailed,
    local_serve_env,
    one_line,
    start_serve,
)

RAY_TRACE = ("The actor died because of an error raised in its creation task, ray::ProxyActor.__init__()\n"
             "Traceback (most recent call last):\n  File \"proxy.py\", line 1, in <module>\n"
             "ActorDiedError: ProxyActor was cancelled before it started running")


def proxy_died() -> ActorDiedError:
    """Ray's own exception, with the message a ProxyActor that died starting carries."""
    exc = ActorDiedError()
    exc.error_msg = RAY_TRACE
    return exc


class ProxyThatDies:
    """``serve.start`` as on a machine whose cores are all busy: the proxy dies starting ``times`` times."""

    def __init__(self, times: int):
        self.times, self.calls = times, 0

    def __call__(self, **kwargs):
        self.calls += 1
        if self.calls <= self.times:
            raise proxy_died()


@pytest.fixture
def ray_up(monkeypatch):
    monkeypatch.setattr(ray, "is_initialized", lambda: True)


def test_a_proxy_that_dies_starting_is_waited_for_and_each_wait_is_one_line(monkeypatch, ray_up):
    monkeypatch.setattr(serve, "start", start := ProxyThatDies(2))
    said: list[str] = []
    start_serve({"host": "127.0.0.1", "port": 1}, said.append, sleep=lambda s: None)
    assert start.calls == 3
    assert said[0] == "waiting for Serve's controller and HTTP proxy..."
    assert len(said) == 3 and all("\n" not in line and "not up yet (ActorDiedError" in line for line in said[1:])


def test_a_proxy_that_never_starts_gives_up_in_one_line_naming_the_reason(monkeypatch, ray_up):
    monkeypatch.setattr(serve, "start", ProxyThatDies(10**6))
    now = [0.0]

    def sleep(s):
        now[0] += s
    with pytest.raises(StartupFailed) as failed:
        start_serve({"host": "127.0.0.1", "port": 1}, patience_s=10, clock=lambda: now[0], sleep=sleep)
    line = str(failed.value)
    assert "\n" not in line and "did not start within 10 s" in line and "ActorDiedError" in line
    assert "cancelled before it started running" in line and "Traceback" not in line


def test_the_main_job_that_cannot_start_serve_prints_one_line_and_exits_1(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)

    @contextmanager
    def no_cluster(num_cpus=8, address=None):
        yield

    monkeypatch.setattr(main_job, "ensure_local_models", lambda: None)
    monkeypatch.setattr(main_job, "load_profile", lambda *a, **k: None)
    monkeypatch.setattr(main_job, "apps_of", lambda *a, **k: [])
    monkeypatch.setattr(main_job, "local_ray", no_cluster)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # Ray went away while Serve started
    monkeypatch.setattr(serve, "start", ProxyThatDies(10**6))
    console = Console(file=io.StringIO(), width=100)
    assert main_job.serve_main(console, port=1, verbose=True) == 1
    out = console.file.getvalue()
    [line] = [x for x in out.splitlines() if x.startswith("failed:")]
    assert "Serve did not start" in line and "ActorDiedError" in line
    assert "Traceback" not in out and "File \"" not in out


def test_the_patient_proxy_settings_apply_to_our_cluster_only_and_never_override_the_operator():
    env = {"RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "7"}
    with local_serve_env(env):
        assert env["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] == LOCAL_SERVE["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"]
        assert env["RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S"] == "7"
    assert env == {"RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "7"}


def test_a_local_instance_stops_its_ingress_without_the_load_balancer_drain():
    """Ray Serve reads the period from the environment our local instance's processes inherit: 0, not
    Ray's 30 s (with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 each ``serve.shutdown`` waited that long)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    read = "from ray.serve._private import constants as c; print(c.RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S)"
    with local_serve_env(env):
        out = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, check=True,
                             timeout=120)
    assert float(out.stdout) == 0.0
    assert "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S" not in env  # only while our instance starts


def test_the_serve_settings_exist_in_this_rays_serve():
    """The knobs are Ray Serve's own: a Ray upgrade that renames them fails here, not silently."""
    from ray.serve._private import constants

    source = Path(constants.__file__).read_text()
    assert all(f'"{name}"' in source for name in LOCAL_SERVE)


def test_one_line_keeps_the_last_line_of_rays_message():
    assert one_line(proxy_died()) == (
        "ActorDiedError: ActorDiedError: ProxyActor was cancelled before it started running")
