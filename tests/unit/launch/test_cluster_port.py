"""``local_cluster`` takes its HTTP port once Ray's own processes hold theirs: a port chosen before
``ray.init`` was taken by one of them, and Serve's proxy then failed to bind it (seen in the suite:
"Failed to bind to address '127.0.0.1:40029'", and ten minutes of waiting for engines behind no proxy)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from specagent_ray.launch import workload


@pytest.fixture
def steps(monkeypatch):
    """The order of Ray's start, the port's choice and the profile's deploy, with stand-ins for all three."""
    seen: list[str] = []

    @contextmanager
    def local_ray(num_cpus, address):
        seen.append("ray up")
        yield

    def free_port():
        seen.append("port chosen")
        return 41234

    def load_profile(name, args=None, port=None):
        seen.append(f"profile loaded, port {port}")
        return name

    monkeypatch.setattr(workload, "local_ray", local_ray)
    monkeypatch.setattr(workload, "free_port", free_port)
    monkeypatch.setattr(workload, "load_profile", load_profile)
    monkeypatch.setattr(workload, "run_profile", lambda schema, port, proxy_location, say: f"http://127.0.0.1:{port}")
    monkeypatch.setattr(workload, "apps_of", lambda schema: [])
    monkeypatch.setattr(workload, "wait_ready", lambda url, apps, timeout_s, say: None)
    return seen


def test_without_a_port_one_is_chosen_after_ray_holds_its_own(steps):
    with workload.local_cluster("sim") as url:
        assert url == "http://127.0.0.1:41234"
    assert steps == ["profile loaded, port None", "ray up", "port chosen", "profile loaded, port 41234"]


def test_a_given_port_is_kept(steps):
    with workload.local_cluster("sim", 8123) as url:
        assert url == "http://127.0.0.1:8123"
    assert "port chosen" not in steps and steps[-1] == "profile loaded, port 8123"
