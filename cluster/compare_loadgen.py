"""The old asyncio load generator against Locust, on one sim deployment, in one run (issue 28).

    python cluster/compare_loadgen.py --concurrency 100 --duration-s 60 --repeats 2

Alternates old, Locust, old, Locust, ... against the same local `sim` deployment (a fresh session log),
and prints each run's figures and Locust's over the old generator's as ratios. Measured on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile

from specagent_ray.loadtest.locust_load import LocustLoad
from specagent_ray.loadtest.report import load_summary
from specagent_ray.loadtest.runner import LoadConfig, LoadRun
from specagent_ray.loadtest.workload import Workload, parse_mix
from specagent_ray.ports import free_port
from specagent_ray.serve.workload import local_cluster

FIGURES = ("sessions_per_min", "steps_per_s", "client_cpu_ms_per_step")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--duration-s", type=float, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as log:
        overrides = {"session_log": log, "coordinator": {"max_sessions": 2000, "queue_limit": 4096}}
        with local_cluster("sim", free_port(), overrides) as url:
            for r in range(a.repeats):
                for gen in ("old", "locust"):
                    cfg = LoadConfig(url, "dev-key", Workload(parse_mix("airline:0-19,retail:0-19")),
                                     concurrency=a.concurrency, sessions=100_000, duration_s=a.duration_s,
                                     drain_s=60, ramp_s=min(10.0, a.duration_s / 10), baseline_sessions=0)
                    res = asyncio.run(LoadRun(cfg).run()) if gen == "old" else LocustLoad(cfg).run()
                    s = load_summary(res)
                    row = {"generator": gen, "repeat": r, "sessions": s["sessions"], **{f: s[f] for f in FIGURES},
                           "step_p50_s": s["step_latency_s"]["p50"], "step_p99_s": s["step_latency_s"]["p99"],
                           "session_p50_s": s["session_latency_s"]["p50"]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    keys = [*FIGURES, "step_p50_s", "step_p99_s", "session_p50_s"]
    mean = lambda gen, k: sum(x[k] for x in rows if x["generator"] == gen) / a.repeats  # noqa: E731
    for k in keys:
        print(f"{k:>24}: old {mean('old', k):.3f}  locust {mean('locust', k):.3f}  "
              f"locust/old {mean('locust', k) / mean('old', k):.3f}")


if __name__ == "__main__":
    main()
