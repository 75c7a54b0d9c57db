"""The served application on a real local Ray cluster, `sim` profile: HTTP, SSE, concurrency, faults,
bad input. Engines are simulated (seeded), everything else is the production path."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import pytest

ray = pytest.importorskip("ray")
from ray import serve

from specagent_ray.launch.client import GatewayClient, GatewayError
from specagent_ray.launch.deployment_profiles import deploy, load_profile, run_profile
from specagent_ray.launch.workload import apps_of, wait_for_http, wait_ready
from specagent_ray.ports import free_port
from specagent_ray.serve.sessions.shards import shard_of
from specagent_ray.testing.prometheus import samples, scrape

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
FAST = {"draft_base_s": 0.005, "draft_per_request_s": 0.0002, "verify_base_s": 0.01,
        "verify_per_request_s": 0.0005, "step_base_s": 0.01}
KEY = "dev-key"
# The GPU meter reads a scripted NVML (no GPU here): devices 0 and 1 stand for the verifier. The drafters
# stand for device 3, which this NVML does not have: their role is what a node without NVML looks like.
METER = {"nvml": "specagent_ray.testing.fake_nvml:ScriptedNvml",
         "nvml_args": {"devices": [[[0, 70, 35]], [[0, 70, 35]], [[0, 40, 20]]]},
         "sim_devices": {"weak": [3], "strong": [0, 1]}, "poll_s": 0.5, "seal_after_s": 3.0, "push_s": 0.2,
         "placement_ttl_s": 3.0}


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()  # chosen just before Ray binds it, not at collection, minutes earlier


@pytest.fixture(scope="module")
def url(tmp_path_factory, metrics_port):
    log = tmp_path_factory.mktemp("session-log")
    ray.init(address="local", num_cpus=16, include_dashboard=False, log_to_driver=False,  # logical: room for two apps
             _metrics_export_port=metrics_port, _system_config={"metrics_report_interval_ms": 500})
    try:
        profile = load_profile("sim", {"session_log": str(log), "engines": {"kind": "sim", "latency": FAST},
                                       "coordinator": {"max_sessions": 400}, "meter": METER})
        base = run_profile(profile, port=free_port())
        wait_ready(base, apps_of(profile), 300)
        yield base
    finally:
        serve.shutdown()
        ray.shutdown()


async def run_sessions(url, n, *, task_offset=0, during=None):
    """Create n simulated airline sessions at once and follow each one's events to ``final``."""
    async with GatewayClient(url, KEY) as client:
        created = await asyncio.gather(*(client.create(tool_source="airline", task_id=str((i + task_offset) % 50),
                                                       user="simulated", trial=i) for i in range(n)))
        sids = [c["session_id"] for c in created]

        async def follow(sid):
            return [e async for e in client.events(sid)]

        followers = asyncio.gather(*(follow(s) for s in sids))
        if during is not None:
            await asyncio.sleep(1.0)
            await asyncio.to_thread(during)
        streams = await asyncio.wait_for(followers, 600)
        trajectories = await asyncio.gather(*(client.trajectory(s) for s in sids))
        return sids, streams, trajectories


def kill_replica(deployment: str) -> None:
    """Kill one replica actor of the deployment, as a crash would (Serve starts a new one)."""
    names = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if a["namespace"] == "serve" and f"#{deployment}#" in a["name"]]
    assert names, f"no live replica of {deployment}"
    ray.kill(ray.get_actor(names[0]["name"], namespace="serve"), no_restart=True)


async def tool_host_writes() -> dict[str, int]:
    """Write executions per idempotency key, summed over the sim profile's two tool host shards (a key
    that reached both shards would count 2)."""
    merged: Counter[str] = Counter()
    for name in ("ToolHost", "ToolHost-1"):
        handle = serve.get_deployment_handle(name, app_name="specagent")
        merged.update((await handle.stats.remote())["write_executions"])
    assert merged, "no staged write ran at all"
    return merged


def check_nothing_lost(streams, trajectories):
    for events, traj in zip(streams, trajectories, strict=True):
        assert events[-1]["t"] == "final" and events[-1]["status"] == "done", events[-1]
        streamed = [step for e in events if e["t"] == "commit" for step in e["steps"]]
        assert traj["steps"] == streamed  # every commit a client saw is in the trajectory, in order
        assert [e["seq"] for e in events] == sorted({e["seq"] for e in events})


async def test_bad_input_gets_a_clear_4xx_and_the_server_keeps_serving(url):
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        ok = {"tool_source": "airline", "task_id": "0", "user": "simulated"}
        cases = [
            (await http.post("/v1/sessions", json=ok, headers={"Authorization": "Bearer wrong"}), 401, "API key"),
            (await http.post("/v1/sessions", content=b"{" + b" " * 70_000 + b"}",
                             headers={"content-type": "application/json"}), 413, "over 65536 bytes"),
            (await http.post("/v1/sessions", json={**ok, "tool_source": "bash -c rm"}), 400, "unknown tool source"),
            (await http.post("/v1/sessions", json={**ok, "k": 0}), 422, "greater than or equal to 1"),
            (await http.post("/v1/sessions", json={**ok, "max_steps": -5}), 422, "max_steps"),
            (await http.post("/v1/sessions", json={**ok, "trial": -1}), 422, "trial"),
            (await http.post("/v1/sessions", json={**ok, "command": ["sh"]}), 422, "command"),
            (await http.post("/v1/sessions", content=b"not json", headers={"content-type": "application/json"}),
             422, "JSON"),
            (await http.get("/v1/sessions/nope/events"), 404, "no session"),
        ]
        client_session = await http.post("/v1/sessions", json={"tool_source": "airline", "task_id": "1",
                                                               "message": "Hi, I need to change a flight"})
        assert client_session.status_code == 201, client_session.text
        sid = client_session.json()["session_id"]
        cases.append((await http.post(f"/v1/sessions/{sid}/tool_results", json={"call_id": "ghost", "content": "x"}),
                      404, "no pending tool call 'ghost'"))
        for response, status, text in cases:
            assert response.status_code == status, (response.status_code, response.text)
            assert text in response.text
            assert "Traceback" not in response.text
        assert (await http.delete(f"/v1/sessions/{sid}")).status_code == 200
        schema = (await http.get("/openapi.json")).json()
        assert "/v1/sessions" in schema["paths"] and "CreateSession" in schema["components"]["schemas"]
    _, streams, trajectories = await run_sessions(url, 2)
    check_nothing_lost(streams, trajectories)


async def test_200_concurrent_sessions_complete_with_zero_errors(url, metrics_port):
    async with GatewayClient(url, KEY) as client:
        before = await client.stats()
    sids, streams, trajectories = await run_sessions(url, 200)
    check_nothing_lost(streams, trajectories)
    async with GatewayClient(url, KEY) as client:
        stats = await client.stats()
    shares = Counter(shard_of(s) for s in sids)
    assert stats["coordinators"] == 2 and shares[0] == shares[1] == 100  # split over both shards
    assert max(int(k) for k in stats["batch_sizes"]["verify"]) > 1  # verifies from many sessions shared batches
    assert stats["overhead_s"]["n"] > 0
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:  # each shard reads its own log: summed
        usage = (await http.get("/v1/usage", headers={"X-API-Key": KEY})).json()["tenants"]
    assert sum(day["sessions_created"] for days in usage.values() for day in days.values()) >= 200
    # the streams followed their sessions through one poll per shard, not one long-poll per session
    calls_in = Counter()
    for was, now in zip(before["shards"], stats["shards"]):
        calls_in.update({m: n - was["process"]["calls_in"].get(m, 0) for m, n in now["process"]["calls_in"].items()})
    assert calls_in["events_many"] > 0 and calls_in["events"] <= 2 * 200  # a stream's first answer, a resume
    # The coordinator replica exports each verifier batch (and nothing else) on Ray's metrics port.
    batches = sum(stats["batch_sizes"]["verify"].values())
    deadline = time.monotonic() + 60
    while True:
        body = scrape(metrics_port, "ray_specagent_verifier_batch_size_count")
        exported = sum(samples(body, "ray_specagent_verifier_batch_size_count"))
        if exported == batches or time.monotonic() > deadline:
            break
        await asyncio.sleep(1)
    assert exported == batches
    assert max((await tool_host_writes()).values()) == 1


async def test_every_dashboard_panel_returns_a_series_on_a_real_prometheus(url, metrics_port):
    """Debian's Prometheus scrapes Ray's metrics port while sessions run; each panel of the Grafana
    dashboard (k8s/base/dashboards), as Grafana would send it, then answers at least one series."""
    from specagent_ray.telemetry.dashboard import PANELS, concrete
    from specagent_ray.testing.prometheus_server import PrometheusServer

    with PrometheusServer([f"127.0.0.1:{metrics_port}"]) as prom:
        prom.wait_up()
        await run_sessions(url, 10, task_offset=20)
        async with GatewayClient(url, "wrong") as client:  # an HTTP error for the errors panel
            with pytest.raises(GatewayError):
                await client.stats()
        answered: dict[str, int] = {}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            answered = {p.title: sum(len(prom.query(concrete(expr))) for expr, _ in p.targets) for p in PANELS}
            if all(answered.values()):
                break
            await asyncio.sleep(2)
        assert all(answered.values()), {title: n for title, n in answered.items() if not n}
        # a query that names a metric nobody exports answers nothing: the check above can fail
        assert prom.query(concrete(PANELS[0].targets[0][0].replace("reviewed_steps", "reviewd_steps"))) == []


async def test_a_drafter_replica_killed_mid_run_costs_a_redraft_not_a_session(url):
    sids, streams, trajectories = await run_sessions(url, 30, task_offset=7, during=lambda: kill_replica("SimDrafter"))
    check_nothing_lost(streams, trajectories)
    assert max((await tool_host_writes()).values()) == 1


async def test_a_coordinator_shard_killed_mid_run_resumes_its_sessions_and_the_other_shard_never_notices(url):
    sids, streams, trajectories = await run_sessions(url, 30, task_offset=13,
                                                     during=lambda: kill_replica("Coordinator"))  # shard 0
    check_nothing_lost(streams, trajectories)
    resumed = {shard_of(sid) for sid, events in zip(sids, streams) if any(e["t"] == "resumed" for e in events)}
    assert resumed == {0}, "shard 0's mid-run sessions resume from its log; shard 1's never stopped"
    assert {shard_of(s) for s in sids} == {0, 1}
    assert max((await tool_host_writes()).values()) == 1  # counted on the tool side: no staged write ran twice


async def test_telecom_sessions_where_the_user_acts_on_their_phone_finish_and_grade(url):
    from specagent_ray.tools.tau2 import Tau2Domain

    telecom = Tau2Domain.load("telecom")
    tasks = [t for t in telecom.base if any(a.requestor == "user" for a in telecom.tasks[t].evaluation_criteria.actions)][:6]
    async with GatewayClient(url, KEY) as client:
        created = [await client.create(tool_source="telecom", task_id=t, user="simulated", trial=i) for i, t in enumerate(tasks)]
        for c in created:
            assert (await asyncio.wait_for(_last_event(client, c["session_id"]), 120))["t"] == "final"
        graded = [await client.trajectory(c["session_id"], grade=True) for c in created]
    assert all(g["status"] == "done" for g in graded), [(g["status"], g["error"]) for g in graded]
    user_calls = [u for g in graded for s in g["steps"] if s["observation"] for u in s["observation"].get("user_calls", [])]
    assert user_calls and {u["name"] for u in user_calls} <= set(telecom.user_tool_schemas)
    assert 1.0 in [g["reward"] for g in graded]  # the user's calls reached tau2's grader through Serve


async def test_bfcl_sessions_run_on_their_own_backends_and_grade_through_serve(url):
    async with GatewayClient(url, KEY) as client:
        created = [await client.create(tool_source="files", task_id=f"multi_turn_base_{i}", user="simulated", trial=i)
                   for i in range(6)]
        for c in created:
            assert (await asyncio.wait_for(_last_event(client, c["session_id"]), 120))["t"] == "final"
        graded = [await client.trajectory(c["session_id"], grade=True) for c in created]
    # A simulated agent may stop early: BFCL's draws are keyed by each replica's call count, so which
    # replica served a draft moves them (history keying, docs/simulation.md). Every session must finish.
    assert all(g["status"] == "done" and g["termination"] in ("user_stop", "agent_stop") for g in graded), \
        [(g["status"], g["termination"], g["error"]) for g in graded]
    assert 1.0 in [g["reward"] for g in graded]  # BFCL's checker, through Serve


async def _last_event(client, sid):
    return [e async for e in client.events(sid)][-1]


async def test_a_wrong_key_never_reaches_the_coordinator(url):
    async with GatewayClient(url, "wrong") as client:
        with pytest.raises(GatewayError) as err:
            await client.stats()
    assert err.value.status == 401


def test_a_coordinator_that_cannot_start_gets_503_within_the_patience_and_the_watch_names_it(url, tmp_path):
    """Its session log sits under a file, so every Coordinator replica dies in its constructor. Serve
    queues calls for such a deployment until a replica runs (forever) or, once it gives up, refuses
    them; either way the gateway answers 503 within ``coordinator_retry_s``, and the main job's watch
    turns Serve's status into one line with the replica's exception."""
    from specagent_ray.launch.watch import AppFailed, AppWatch

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    doomed = load_profile("sim", {"session_log": str(blocker / "log"), "coordinators": 1, "tool_hosts": 1,
                                  "engines": {"kind": "sim", "latency": FAST, "drafter_replicas": 1},
                                  "gateway": {"coordinator_retry_s": 3.0}}).applications[0]
    deploy([("doomed", "/doomed", doomed)])  # Serve's own wait would end only once it gave up
    try:
        wait_for_http(f"{url}/doomed/healthz", 120)  # the gateway itself runs
        for _ in range(2):  # while Serve still restarts the replica, and again later
            begun = time.monotonic()
            r = httpx.get(f"{url}/doomed/v1/stats", headers={"X-API-Key": KEY}, timeout=60)
            assert r.status_code == 503 and r.headers["Retry-After"], r.text
            assert time.monotonic() - begun < 3.0 + 2.0
        watch, begun = AppWatch(["doomed"], every_s=0.5), time.monotonic()
        with pytest.raises(AppFailed) as failed:
            while time.monotonic() - begun < 60:
                watch.check()
                time.sleep(0.5)
        line = str(failed.value)
        assert "\n" not in line and "doomed" in line and "Error" in line and "/tmp/ray/" in line, line
        assert httpx.get(f"{url}/v1/stats", headers={"X-API-Key": KEY}).status_code == 200  # the other app serves
    finally:
        serve.delete("doomed")


def test_the_openai_sdk_runs_a_verified_agent_through_serve_and_continues_after_a_coordinator_crash(url, tmp_path):
    """The Responses API on Serve: an app with plan-following engines, the bank MCP server and a client
    source, driven by the official SDK. The MCP write runs once; a function call's conversation goes on
    after its coordinator replica is killed (the continuation carries an Idempotency-Key, so the gateway
    waits the restart out)."""
    import json
    import sys

    import openai

    journal = tmp_path / "journal.jsonl"
    bank = [sys.executable, "-m", "specagent_ray.testing.mcp_server", "--journal", str(journal)]
    sim = load_profile("sim", {"session_log": str(tmp_path / "log"), "coordinators": 1, "tool_hosts": 1,
                               "tool_sources": {"bank": {"kind": "mcp", "command": bank, "trusted": True},
                                                "app": {"kind": "client"}}}).applications[0]
    agents = sim.model_copy(update={"args": {**sim.args, "engines": {"kind": "scripted"}}})  # merging would keep sim's
    deploy([("agents", "/agents", agents)])
    try:
        wait_for_http(f"{url}/agents/healthz", 120)
        client = openai.OpenAI(base_url=f"{url}/agents/v1", api_key=KEY, max_retries=0, timeout=180)
        move = json.dumps({"source": "alice", "target": "bob", "amount": 30})
        r = client.responses.create(model="specagent", tools=[{"type": "mcp", "server_label": "bank"}],
                                    input=f'call get_balance {{"account": "alice"}}; call transfer {move}; say ok')
        assert [i.type for i in r.output] == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
        assert journal.read_text().count('"transfer"') == 1
        lookup = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
        asked = client.responses.create(model="specagent", tools=[lookup], input="call lookup; say found it")
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["namespace"] == "serve" and "#agents#Coordinator#" in a["name"].replace("::", "#")]
        assert names, "no coordinator replica of the agents app"
        ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
        done = client.responses.create(model="specagent", previous_response_id=asked.id,
                                       extra_headers={"Idempotency-Key": "continue-1"}, input=[
                                           {"type": "function_call_output", "call_id": asked.output[-1].call_id,
                                            "output": "42"}])
        assert done.output_text == "found it" and done.previous_response_id == asked.id
    finally:
        serve.delete("agents")


async def test_the_gpu_meter_charges_measured_gpu_seconds_per_tenant_and_they_add_up(url):
    """Sim engines report where they run; the meter samples the scripted NVML on that node. The verifier's
    role is MEASURED in /v1/usage and in each session's report, and over the run what the tenants got plus
    the unattributed busy time is what its devices measured. The drafters' devices are not in this NVML:
    their role is ESTIMATED, labelled, and the sums say mixed."""
    sids, _, _ = await run_sessions(url, 8, task_offset=30)
    meter = serve.get_deployment_handle("GpuMeter", "specagent")
    await asyncio.sleep(METER["seal_after_s"] + 2 * METER["poll_s"])  # every window of the run sealed
    stats = await meter.stats.remote()
    async with GatewayClient(url, KEY) as client:
        usage = (await client.usage())["tenants"]
        report = (await client.trajectory(sids[0]))["resources"]
    strong = stats["roles"]["strong"]
    assert strong["state"] == "measured", strong
    got = strong["charged"]["gpu_seconds"] + strong["unattributed"]["gpu_seconds"]
    assert got == pytest.approx(strong["measured"]["gpu_seconds"], rel=1e-6)
    days = [f for d in usage.values() for f in d.values()]
    tenants = sum(f["by_role"]["strong"]["gpu_seconds"] for f in days
                  if f["by_role"].get("strong", {}).get("gpu_seconds_source") == "measured")
    assert tenants > 0 and tenants == pytest.approx(strong["charged"]["gpu_seconds"], rel=0.01)
    busy = {role: s["busy_gpu_seconds"] for node in stats["devices"].values() for role, s in node.items()}
    assert strong["measured"]["gpu_seconds"] == pytest.approx(busy["strong"], rel=0.01)  # the meters' own totals
    assert "NVML sees 3" in stats["roles"]["weak"]["state"]
    today = [d[max(d)] for d in usage.values()]  # the dev key's tenant: every session ran today
    assert [(f["by_role"]["strong"]["gpu_seconds_source"], f["by_role"]["weak"]["gpu_seconds_source"],
             f["gpu_seconds_source"], f["strong_hbm_source"]) for f in today] == \
        [("measured", "estimated", "mixed", "measured")]
    assert (report["gpu_seconds_source"], report["hbm_source"]) == ("mixed", "mixed")


def test_a_message_over_grpcs_default_4_mib_crosses_between_replicas_both_ways(url):
    """The application's replica-to-replica calls go over gRPC (``handles.by_grpc``), 4 MiB at most per
    message unless ``app.REPLICA`` raises it: 6 MiB go out and come back."""
    from specagent_ray.testing.wire_probe import probe_app

    handle = serve.run(probe_app(), name="wire-probe", route_prefix=None)
    try:
        assert handle.round_trip.remote(6 << 20).result(timeout_s=120) == 6 << 20
    finally:
        serve.delete("wire-probe")
