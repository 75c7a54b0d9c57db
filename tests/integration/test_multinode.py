"""Three real Ray nodes on this machine (cluster/local_multinode.py): a GPU-less head and two worker nodes
that advertise 8 (fake) GPUs each, like the verifier node type of cluster/aws-gpu.yaml. The verifier
engine's placement group, as Ray Serve LLM derives it from deployments/gpu-tp16.yaml, must be placed on
exactly the two worker nodes, 8 bundles on each, none on the head; a group needing 3 x 8 GPUs must stay
pending. ``bench scale`` deploys the sim profile's coordinator shards on the same cluster.

Every Ray driver runs in a child process (cluster/pg_probe.py, the script's own status): this pytest
process keeps no Ray state of its own, and other tests in it use ``ray.init`` on a different cluster."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "cluster" / "local_multinode.py"
PROBE = REPO / "cluster" / "pg_probe.py"
PROFILE = REPO / "deployments" / "gpu-tp16.yaml"
TOO_BIG = [{"GPU": 8}, {"GPU": 8}, {"GPU": 8}]


def _run(*argv: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, **(env or {})}, check=False)


def _script(state_dir: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return _run(str(SCRIPT), "--dir", str(state_dir), *argv, timeout=timeout)


def _leftovers(state_dir: Path) -> list[int]:
    out = _run("-c", f"import sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); import local_multinode as m; "
                     f"from pathlib import Path; print(m._ours(Path({str(state_dir)!r})))")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cluster():
    state_dir = Path(tempfile.mkdtemp(prefix="sa-mn-", dir="/tmp"))  # short: Ray's socket paths live here
    try:
        for _ in range(3):  # another process may hold a port in the range: try another base
            started = _script(state_dir, "start", "--base-port", str(random.randrange(21000, 31000, 1000)),
                              "--cpus-per-worker", "6")  # room for the sim profile's replicas too
            if started.returncode == 0 or "ports in use" not in started.stderr:
                break
        assert started.returncode == 0, f"start failed:\n{started.stdout}\n{started.stderr[-3000:]}"
        status = _script(state_dir, "status", "--nodes")
        assert status.returncode == 0, status.stderr[-3000:]
        yield state_dir, json.loads(status.stdout)
    finally:
        _script(state_dir, "stop")


@pytest.fixture(scope="module")
def probe(cluster):
    _, state = cluster
    out = _run(str(PROBE), "--address", state["address"], "--profile", str(PROFILE), "--model", "verifier",
               "--also", json.dumps(TOO_BIG), "--timeout", "60", "--pending-timeout", "5", env=state["env"])
    assert out.returncode == 0, f"probe failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_three_alive_nodes_head_without_gpus(cluster):
    _, state = cluster
    nodes = state["ray_nodes"]
    assert len(nodes) == 3
    heads = [n for n in nodes if "node:__internal_head__" in n["resources"]]
    workers = [n for n in nodes if n not in heads]
    assert len(heads) == 1 and heads[0]["resources"].get("GPU", 0) == 0
    assert len(workers) == 2
    for w in workers:
        assert w["resources"]["GPU"] == 8 and w["resources"]["verifier_node"] == 1
    assert len({n["manager_port"] for n in nodes}) == 3  # three raylets, one per node


def test_probe_uses_the_profiles_placement_group(probe):
    raw = yaml.safe_load(PROFILE.read_text())
    verifier = next(c for c in raw["applications"][0]["args"]["llm_configs"]
                    if c["model_loading_config"]["model_id"] == "verifier")
    pgc = verifier["placement_group_config"]
    engine = probe["engine"]
    assert engine["strategy"] == pgc["strategy"]
    # Serve LLM's bundles are the profile's, plus its accelerator hint, plus the replica actor's CPU.
    assert [b["GPU"] for b in engine["bundles"]] == [b["GPU"] for b in pgc["bundles"]]
    assert all(b.get(f"accelerator_type:{verifier['accelerator_type']}", 0) > 0 for b in engine["bundles"])


def test_verifier_placement_group_spans_exactly_the_two_worker_nodes(probe):
    engine = probe["engine"]
    assert engine["ready"] and engine["state"] == "CREATED"
    head = {n["node_id"] for n in probe["nodes"] if n["head"]}
    workers = {n["node_id"] for n in probe["nodes"] if not n["head"]}
    per_node = Counter(engine["bundle_nodes"])
    assert len(engine["bundle_nodes"]) == 16
    assert set(per_node) == workers and len(workers) == 2
    assert sorted(per_node.values()) == [8, 8]
    assert not set(per_node) & head


def test_three_times_eight_gpus_stays_pending(probe):
    too_big = probe["also"]
    assert too_big["bundles"] == TOO_BIG
    assert too_big["ready"] is False and too_big["state"] == "PENDING"
    assert not any(too_big["bundle_nodes"])


def test_bench_scale_runs_its_shards_on_the_multinode_cluster(cluster):
    _, state = cluster
    code = ("import json; from specagent_ray.bench.served.scale import scale_run; "
            f"print(json.dumps(scale_run(2, 12, address={state['address']!r})))")
    out = _run("-c", code, env={**state["env"], "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, timeout=600)
    assert out.returncode == 0, f"bench failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["errors"] == 0 and r["steps"] > 0 and len(r["shares"]) == 2 and min(r["shares"]) > 0
    assert set(r["node_ids"]) <= {n["node_id"] for n in state["ray_nodes"]}  # the shards ran on this cluster


def test_stop_leaves_no_processes(cluster):
    state_dir, _ = cluster
    assert _leftovers(state_dir)  # the running cluster is found by the same rule stop uses
    stopped = _script(state_dir, "stop")
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert _leftovers(state_dir) == []
    status = _script(state_dir, "status")
    assert status.returncode == 1 and json.loads(status.stdout)["running"] is False
    assert not state_dir.exists()
