"""Two coordinators on one session log, on a real local Ray cluster: a blue/green upgrade.

Blue (the `sim` profile as application "blue") serves sessions. Green, a second application on the same
session log, starts while blue is still running them, as in a NewCluster upgrade overlap or a replica
Serve wrongly thought dead. What must hold: green takes the lease; blue is fenced within one lease period
(it appends nothing more, executes no write, and answers 503); every session finishes on green, and
every commit a client saw from blue is in green's trajectory; summed over both applications' tool hosts,
no write key ran twice, and every committed write ran exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

ray = pytest.importorskip("ray")
from ray import serve

from specagent_ray.launch.client import GatewayClient, GatewayError
from specagent_ray.launch.deployment_profiles import load_profile
from specagent_ray.launch.workload import wait_for_http
from specagent_ray.ports import free_port
from specagent_ray.serve.app import build_app

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
KEY = "dev-key"
LEASE_S = 2.0
# Blue's engines: slow enough that sessions outlive green's deployment (tens of seconds on 2 cores).
# Green's finish what they resume quickly: the engines' speed is not what is tested.
SLOW = {"draft_base_s": 1.0, "draft_per_request_s": 0.0, "verify_base_s": 6.0, "verify_per_request_s": 0.0,
        "step_base_s": 6.0}
FAST = {"draft_base_s": 0.01, "draft_per_request_s": 0.0, "verify_base_s": 0.05, "verify_per_request_s": 0.0,
        "step_base_s": 0.05}
SESSIONS = 12


def app_args(log: str, latency: dict) -> dict:
    profile = load_profile("sim", {"session_log": log, "engines": {"kind": "sim", "latency": latency},
                                   "coordinator": {"lease_s": LEASE_S, "lease_skew_s": 0.2}, "coordinators": 1})
    return profile.applications[0].args


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("session-log"))
    ray.init(address="local", num_cpus=32, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}", log
    finally:
        serve.shutdown()
        ray.shutdown()


def deploy(name: str, base: str, log: str, latency: dict) -> str:
    serve.run(build_app(app_args(log, latency)), name=name, route_prefix=f"/{name}", blocking=False)
    url = f"{base}/{name}"
    wait_for_http(f"{url}/healthz", 300)
    return url


async def write_executions(app: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for name in ("ToolHost", "ToolHost-1"):
        out.update((await serve.get_deployment_handle(name, app_name=app).stats.remote())["write_executions"])
    return out


async def follow(client: GatewayClient, sid: str) -> list[dict]:
    """Events a client saw from one gateway, until the session ends or that gateway stops serving it."""
    seen: list[dict] = []
    try:
        async for event in client.events(sid):
            seen.append(event)
    except GatewayError as exc:
        assert exc.status == 503, exc
    return seen


async def test_blue_green_on_one_log_fences_blue_and_runs_no_write_twice(cluster):
    base, log = cluster
    blue_url = await asyncio.to_thread(deploy, "blue", base, log, SLOW)
    async with GatewayClient(blue_url, KEY) as blue:
        created = await asyncio.gather(*(blue.create(tool_source="airline", task_id=str(t), user="simulated",
                                                     trial=i)
                                         for i, t in enumerate([7, 9, 14, 0, 1, 2] * (SESSIONS // 6))))
        sids = [c["session_id"] for c in created]
        followers = asyncio.gather(*(follow(blue, s) for s in sids))
        await asyncio.sleep(1)  # blue is mid-run when green starts
        green_url = await asyncio.to_thread(deploy, "green", base, log, FAST)
        green_ready = time.monotonic()
        seen_on_blue = await asyncio.wait_for(followers, 120)
        blue_stats = await blue.stats()
        assert blue_stats["log"]["fenced"] and "taken over" in blue_stats["log"]["fenced"]
        with pytest.raises(GatewayError) as refused:
            await blue.trajectory(sids[0])
        assert refused.value.status == 503
    # blue was fenced before green read the log: green waits out blue's lease before it serves
    assert time.monotonic() - green_ready < 120

    async with GatewayClient(green_url, KEY) as green:
        finals = await asyncio.wait_for(asyncio.gather(*(follow(green, s) for s in sids)), 600)
        trajectories = await asyncio.gather(*(green.trajectory(s) for s in sids))
        green_stats = await green.stats()

    assert green_stats["log"]["epoch"] == blue_stats["log"]["epoch"] + 1 and not green_stats["log"]["fenced"]
    assert green_stats["resumed"] >= 1, "every session finished before green took over: nothing was tested"
    for sid, blue_events, green_events, traj in zip(sids, seen_on_blue, finals, trajectories, strict=True):
        assert green_events[-1]["t"] == "final" and green_events[-1]["status"] == "done", (sid, green_events[-1])
        on_blue = [step for e in blue_events if e["t"] == "commit" for step in e["steps"]]
        assert traj["steps"][: len(on_blue)] == on_blue  # nothing a client saw from blue was lost
    runs = await write_executions("blue") + await write_executions("green")
    assert runs and max(runs.values()) == 1, [k for k, n in runs.items() if n > 1]
    committed_writes = sum(1 for t in trajectories for s in t["steps"]
                           if s["effect"] == "write" and s["action"]["kind"] == "tool")
    assert sum(runs.values()) == committed_writes  # every committed write ran, none ran outside a commit
