#!/usr/bin/env python3
"""A multi-node Ray cluster on this one machine: a head with no GPUs and worker "nodes" that fake GPUs.

    python cluster/local_multinode.py start  [--dir /tmp/specagent-mn] [--base-port 26379] [--workers 2]
    python cluster/local_multinode.py status [--dir ...] [--nodes]
    python cluster/local_multinode.py stop   [--dir ...] [--keep-logs]

Each node is its own ``ray start --block`` process (a raylet with its own ports and ``--temp-dir``), all
joined to one GCS. This is what ``ray up`` does on VMs, only on one host: several raylets per host work as
long as every node gets its own node-manager, object-manager, agent, metrics and worker ports. Workers
advertise ``--num-gpus 8`` (fake: nothing here uses a GPU) plus the same custom resources as the
``verifier`` node type in ``cluster/aws-gpu.yaml`` (``verifier_node``) and the accelerator resource that
Ray would detect on a real GPU node (``accelerator_type:H20``, the type the gpu-tp16 profile asks for), so
placement groups are scheduled exactly as on the real cluster.

Isolation from other Ray instances on the machine: non-default ports from ``--base-port``, one temp dir
per node under ``--dir``, and a private auth token (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH`` under
``--dir``). ``stop`` never runs ``ray stop`` (that kills every Ray on the host): it sends SIGTERM to the
``ray start --block`` processes it started (each drains and stops its own raylet and workers), then
SIGKILLs whatever is left of their process trees and of any process whose command line or environment
points into ``--dir``.

Drivers connect with ``address`` from ``status`` and the environment printed by ``start`` (``env()``).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path("/tmp/specagent-mn")  # short: Ray's unix socket paths live under it (limit 107 bytes)
DEFAULT_BASE_PORT = 26379  # below the ephemeral range (32768+) and above Ray's default worker ports
STATE = "state.json"
PORTS_PER_NODE = 10
WORKER_PORTS_PER_NODE = 100
OBJECT_STORE_BYTES = 100 * 1024 * 1024


@dataclass
class Node:
    name: str
    head: bool
    num_cpus: int
    num_gpus: int
    resources: dict[str, float]
    ports: dict[str, int] = field(default_factory=dict)
    pid: int = 0


def node_plan(workers: int = 2, gpus_per_worker: int = 8, drafters: int = 0,
              accelerator_type: str = "H20", cpus_per_worker: int = 2) -> list[Node]:
    """The nodes to start: head (0 GPUs), ``workers`` verifier nodes, ``drafters`` one-GPU drafter nodes.
    The resources mirror ``cluster/aws-gpu.yaml``'s node types. CPUs are logical (what Ray schedules
    by), so a worker may advertise more than the host has."""
    accel = {f"accelerator_type:{accelerator_type}": 1} if accelerator_type else {}
    nodes = [Node("head", True, 1, 0, {"head_node": 1})]
    nodes += [Node(f"verifier-{i}", False, cpus_per_worker, gpus_per_worker, {"verifier_node": 1, **accel})
              for i in range(workers)]
    nodes += [Node(f"drafter-{i}", False, 1, 1, {"drafter_node": 1, **accel}) for i in range(drafters)]
    return nodes


def ports_for(base: int, index: int) -> dict[str, int]:
    """Non-overlapping ports for node ``index`` (0 = head, which also gets the GCS port ``base``)."""
    p = base + 1 + index * PORTS_PER_NODE
    w = base + 1 + 64 * PORTS_PER_NODE + index * WORKER_PORTS_PER_NODE
    ports = {"node_manager": p, "object_manager": p + 1, "dashboard_agent_listen": p + 2,
             "dashboard_agent_grpc": p + 3, "runtime_env_agent": p + 4, "metrics_export": p + 5,
             "min_worker": w, "max_worker": w + WORKER_PORTS_PER_NODE - 1}
    if index == 0:
        ports.update(gcs=base, ray_client_server=p + 6, dashboard=p + 7)
    return ports


def env(state_dir: Path) -> dict[str, str]:
    """What a driver (or ``ray`` CLI) needs in its environment to talk to this cluster."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(state_dir / "auth_token"),
            "RAY_USAGE_STATS_ENABLED": "0"}


def ray_cli() -> str:
    found = Path(sys.executable).with_name("ray")
    return str(found) if found.exists() else (shutil.which("ray") or "ray")


def start_command(node: Node, address: str, temp_dir: Path) -> list[str]:
    p = node.ports
    cmd = [ray_cli(), "start", "--block", "--disable-usage-stats", "--node-ip-address", "127.0.0.1",
           "--num-cpus", str(node.num_cpus), "--num-gpus", str(node.num_gpus),
           "--resources", json.dumps(node.resources), "--temp-dir", str(temp_dir),
           "--object-store-memory", str(OBJECT_STORE_BYTES),
           "--node-manager-port", str(p["node_manager"]), "--object-manager-port", str(p["object_manager"]),
           "--dashboard-agent-listen-port", str(p["dashboard_agent_listen"]),
           "--dashboard-agent-grpc-port", str(p["dashboard_agent_grpc"]),
           "--runtime-env-agent-port", str(p["runtime_env_agent"]),
           "--metrics-export-port", str(p["metrics_export"]),
           "--min-worker-port", str(p["min_worker"]), "--max-worker-port", str(p["max_worker"])]
    if node.head:
        cmd += ["--head", "--port", str(p["gcs"]), "--ray-client-server-port", str(p["ray_client_server"]),
                "--include-dashboard", "false", "--dashboard-port", str(p["dashboard"])]
    else:
        cmd += ["--address", address]
    return cmd


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def _alive(pid: int) -> bool:
    import psutil

    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def read_state(state_dir: Path) -> dict[str, Any] | None:
    path = state_dir / STATE
    return json.loads(path.read_text()) if path.exists() else None


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    tmp = state_dir / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_dir / STATE)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}; see {log}:\n{_tail(log)}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"GCS port {port} not open after {timeout_s:.0f} s; see {log}:\n{_tail(log)}")


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _connect(address: str, state_dir: Path):
    os.environ.update(env(state_dir))
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    return ray


def alive_nodes(address: str, state_dir: Path) -> list[dict[str, Any]]:
    """The cluster's alive nodes as Ray reports them (connects a driver in this process)."""
    ray = _connect(address, state_dir)
    return [n for n in ray.nodes() if n["Alive"]]


def start(state_dir: Path = DEFAULT_DIR, base_port: int = DEFAULT_BASE_PORT, workers: int = 2,
          gpus_per_worker: int = 8, drafters: int = 0, accelerator_type: str = "H20",
          timeout_s: float = 90.0, cpus_per_worker: int = 2) -> dict[str, Any]:
    """Start the head and the worker nodes; returns the state (also written to ``state_dir/state.json``).
    On any failure the nodes started so far are stopped again."""
    state_dir = Path(state_dir)
    old = read_state(state_dir)
    if old and any(_alive(n["pid"]) for n in old["nodes"]):
        raise RuntimeError(f"a cluster from {state_dir} is still running (address {old['address']}); "
                           "stop it first")
    nodes = node_plan(workers, gpus_per_worker, drafters, accelerator_type, cpus_per_worker)
    for i, node in enumerate(nodes):
        node.ports = ports_for(base_port, i)
    busy = sorted(p for n in nodes for k, p in n.ports.items() if k not in ("min_worker", "max_worker")
                  and not _port_free(p))
    if busy:
        raise RuntimeError(f"ports in use: {busy}; choose another --base-port")
    if old:
        shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    token = state_dir / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    address = f"127.0.0.1:{base_port}"
    state: dict[str, Any] = {"address": address, "dir": str(state_dir), "env": env(state_dir), "nodes": []}
    child_env = {**os.environ, **env(state_dir)}
    child_env.pop("RAY_ADDRESS", None)  # a driver's RAY_ADDRESS (another cluster) must not leak into ray start
    try:
        for node in nodes:
            log = state_dir / f"{node.name}.log"
            with open(log, "wb") as out:
                # A new session per node: its process group is ours to signal and nothing else's.
                proc = subprocess.Popen(start_command(node, address, state_dir / node.name), stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env,
                                        start_new_session=True)
            node.pid = proc.pid
            state["nodes"].append(asdict(node))
            _write_state(state_dir, state)
            if node.head:
                _wait_port(base_port, proc, log, timeout_s)
        _wait_nodes(state_dir, state, len(nodes), timeout_s, child_env)
    except BaseException:
        stop(state_dir, keep_logs=True)
        raise
    return state


def _wait_nodes(state_dir: Path, state: dict[str, Any], want: int, timeout_s: float,
                child_env: dict[str, str]) -> None:
    """Poll the GCS from a short-lived child driver until ``want`` nodes are alive."""
    here = str(Path(__file__).resolve().parent)
    code = (f"import json,sys; sys.path.insert(0, {here!r}); import local_multinode as m; from pathlib import Path; "
            f"print(json.dumps(len(m.alive_nodes({state['address']!r}, Path({str(state_dir)!r})))))")
    deadline = time.monotonic() + timeout_s
    seen = -1
    while time.monotonic() < deadline:
        for n in state["nodes"]:
            if not _alive(n["pid"]):
                log = state_dir / f"{n['name']}.log"
                raise RuntimeError(f"node {n['name']} exited during start; see {log}:\n{_tail(log)}")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env,
                             timeout=max(10.0, deadline - time.monotonic()), check=False)
        if out.returncode == 0:
            seen = int(out.stdout.strip().splitlines()[-1])
            if seen >= want:
                return
        time.sleep(1.0)
    raise TimeoutError(f"only {seen} of {want} nodes alive after {timeout_s:.0f} s; logs in {state_dir}")


def _is_ray_process(cmdline: list[str]) -> bool:
    """A Ray system or worker process (raylet, gcs_server, agents, ``ray start``, ``ray::...`` workers),
    not a shell or a driver that merely has this cluster's environment."""
    head = cmdline[:3]
    return any(a.startswith(("ray::", "ray.")) or "ray" in Path(a).parts for a in head)


def _ours(state_dir: Path) -> list[int]:
    """PIDs of Ray processes that belong to this cluster: their command line or their environment
    (``RAY_AUTH_TOKEN_PATH``, inherited by every raylet and worker) points into ``state_dir``."""
    import psutil

    needle = str(state_dir)
    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmdline = p.info["cmdline"] or []
        if p.pid in me or not _is_ray_process(cmdline):
            continue
        try:
            if any(needle in a for a in cmdline) or p.environ().get("RAY_AUTH_TOKEN_PATH", "").startswith(needle):
                found.append(p.pid)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def stop(state_dir: Path = DEFAULT_DIR, keep_logs: bool = False, grace_s: float = 30.0) -> list[int]:
    """Stop this cluster's nodes (workers first, then the head). Returns the PIDs that had to be killed
    with SIGKILL because they outlived the graceful stop. Never touches other Ray instances."""
    import psutil

    state_dir = Path(state_dir)
    state = read_state(state_dir) or {"nodes": []}
    procs: dict[int, psutil.Process] = {}
    roots = []
    for n in reversed(state["nodes"]):
        try:
            root = psutil.Process(n["pid"])
        except psutil.NoSuchProcess:
            continue
        roots.append(root)
        for p in [root, *root.children(recursive=True)]:
            procs[p.pid] = p
    for pid in _ours(state_dir):
        try:
            procs.setdefault(pid, psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    # Workers first: a head that goes away first leaves worker raylets retrying the GCS.
    for root in roots:
        try:
            root.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(list(procs.values()), timeout=grace_s)
    killed = []
    for p in left:
        try:
            p.kill()
            killed.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=5)
    stragglers = _ours(state_dir)
    for pid in stragglers:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    if state_dir.exists():
        if keep_logs:
            (state_dir / STATE).unlink(missing_ok=True)
        else:
            shutil.rmtree(state_dir, ignore_errors=True)
    return killed


def status(state_dir: Path = DEFAULT_DIR, nodes: bool = False) -> dict[str, Any]:
    """The recorded nodes with whether their ``ray start`` process is alive; with ``nodes``, also what
    the GCS reports (connects a driver)."""
    state_dir = Path(state_dir)
    state = read_state(state_dir)
    if not state:
        return {"running": False, "dir": str(state_dir)}
    for n in state["nodes"]:
        n["alive"] = _alive(n["pid"])
    state["running"] = any(n["alive"] for n in state["nodes"])
    if nodes and state["running"]:
        state["ray_nodes"] = [{"node_id": n["NodeID"], "manager_port": n["NodeManagerPort"],
                               "resources": n["Resources"]} for n in alive_nodes(state["address"], state_dir)]
    return state


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="state, logs and Ray temp dirs (default %(default)s)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a head and worker nodes")
    s.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT, help="GCS port; the rest follow it")
    s.add_argument("--workers", type=int, default=2, help="verifier nodes (default 2)")
    s.add_argument("--gpus-per-worker", type=int, default=8)
    s.add_argument("--cpus-per-worker", type=int, default=2,
                   help="logical CPUs each verifier node advertises (the sim profile's replicas need ~6 + shards)")
    s.add_argument("--drafters", type=int, default=0, help="one-GPU drafter nodes (default 0)")
    s.add_argument("--accelerator-type", default="H20", help="fake accelerator_type resource ('' for none)")
    s.add_argument("--timeout", type=float, default=90.0)
    t = sub.add_parser("status", help="show the recorded nodes")
    t.add_argument("--nodes", action="store_true", help="also ask the GCS for the alive nodes")
    p = sub.add_parser("stop", help="stop the nodes this script started")
    p.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "start":
        state = start(a.dir, a.base_port, a.workers, a.gpus_per_worker, a.drafters, a.accelerator_type, a.timeout,
                      a.cpus_per_worker)
        print(f"started {len(state['nodes'])} nodes at {state['address']}; drivers need:")
        print(" ".join(f"{k}={v}" for k, v in {**state["env"], "RAY_ADDRESS": state["address"]}.items()))
        return 0
    if a.cmd == "status":
        st = status(a.dir, a.nodes)
        print(json.dumps(st, indent=2))
        return 0 if st["running"] else 1
    killed = stop(a.dir, a.keep_logs)
    print(f"stopped; {len(killed)} process(es) needed SIGKILL" + (f": {killed}" if killed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
