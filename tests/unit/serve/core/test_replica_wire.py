"""Every replica of the application carries the gRPC settings its replica-to-replica calls need
(``app.REPLICA``): the message limit (the served test sends 6 MiB across; without it any call over
4 MiB, Ray's default, fails, and only under load with long sessions), and gRPC's fork handlers off (the
served Agents SDK test's MCP server start failed about every second run with them on)."""

from __future__ import annotations

from typing import Any

from specagent_ray.launch.deployment_profiles import OURS, load_profile
from specagent_ray.serve.app import GRPC_MAX_MESSAGE_BYTES, build_app


def _deployments(app: Any, found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    bound = app._bound_deployment
    found[bound.name] = bound.ray_actor_options
    for arg in (*bound.init_args, *bound.init_kwargs.values()):
        for inner in arg if isinstance(arg, list) else [arg]:
            if hasattr(inner, "_bound_deployment"):
                _deployments(inner, found)
    return found


def test_every_deployment_of_the_app_carries_the_replica_grpc_settings(tmp_path):
    profile = load_profile("sim", {"session_log": str(tmp_path), "coordinators": 2,
                                   "meter": {"nvml": "specagent_ray.testing.fake_nvml:ScriptedNvml"}})
    app = next(a for a in profile.applications if a.import_path == OURS)
    found = _deployments(build_app(app.args), {})
    every = {"Gateway", "Coordinator", "Coordinator-1", "ToolHost", "SimDrafter", "SimVerifier", "GpuMeter"}
    assert every <= set(found)
    for name, options in found.items():
        limit = options.get("runtime_env", {}).get("env_vars", {}).get("RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH")
        assert limit is not None and int(limit) == GRPC_MAX_MESSAGE_BYTES > 4 << 20, name
        assert options["runtime_env"]["env_vars"].get("GRPC_ENABLE_FORK_SUPPORT") == "0", name
        assert options.get("num_cpus") == 1, name  # Serve's default, kept
