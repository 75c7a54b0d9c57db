"""The session workload as a Locust user class (``specagent-ray loadtest`` runs Locust on this file).

Each task iteration of ``SessionUser`` is one session through the gateway: create it (429s and 503s
waited out as Retry-After says, under one Idempotency-Key), follow its SSE events to ``final``, answer
what the client owes on the way (a client tool call's result, a client user's message), cancel it
where the workload says so, then read its trajectory for its usage.

What Locust records (its statistics, from which the report is computed):
- the HTTP calls, by route name (``POST /v1/sessions``, ``GET events``, ...);
- ``STEP committed``: one entry per committed step, its latency (``records.step_latencies``);
- ``SESSION <method>``: one entry per session, its whole time; a failed session is a failure whose
  message starts with its error kind (``http_500: ...``, ``session_failed: ...``);
- ``ARRIVAL shed``: open-loop arrivals that found every slot busy.

Bounds: no session starts after ``--sa-duration-s`` (the shape ends the run, in-flight sessions get
Locust's ``--stop-timeout``), none past ``--sa-sessions`` (each of ``--sa-workers`` processes takes every
n-th index), and ``--sa-max-errors`` failed sessions stop the run. Each process appends its sessions to
``--sa-records``/records-<pid>.jsonl; the master writes when the run's clock started and why the run
stopped to ``run.json`` there, and the run's final failures to ``failures.json``.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import gevent
from gevent.queue import Queue
from locust import HttpUser, LoadTestShape, events, task
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner
from locust.stats import StatsError

from specagent_ray.loadtest.records import SessionRecord
from specagent_ray.loadtest.workload import Workload, parse_mix


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    add = parser.add_argument
    add("--sa-tasks", default="airline:0-19", help="task mix, SOURCE:ID or SOURCE:FIRST-LAST, comma-separated")
    add("--sa-workload", default="{}", help="JSON: user, method, k, max_steps, client_user_turns, cancel_every")
    add("--sa-mode", default="closed", choices=("closed", "open"))
    add("--sa-stages", default="50", help="closed loop: ascending concurrency levels, equal shares of the run")
    add("--sa-rate", type=float, default=5.0, help="open loop: arrivals per second (Poisson), all processes")
    add("--sa-ramp-s", type=float, default=0.0, help="closed loop: each stage's new users start over this")
    add("--sa-duration-s", type=float, default=60.0, help="no session starts after this")
    add("--sa-sessions", type=int, default=1000, help="most sessions started, all processes")
    add("--sa-indices", default="", help="run exactly these workload indices (the baseline), comma-separated")
    add("--sa-max-errors", type=int, default=20, help="stop at this many failed sessions")
    add("--sa-workers", type=int, default=1, help="client processes (Locust workers) taking indices in turn")
    add("--sa-records", default="", help="folder for each process's session records")
    add("--sa-seed", type=int, default=0, help="open-loop arrival times")
    add("--sa-timeout-s", type=float, default=60.0, help="per HTTP request (the event stream: between events)")


class Plan:
    """One process's share of the run: its session indices, and in open loop its arrivals."""

    def __init__(self, env: Any):
        o = env.parsed_options
        self.env, self.o = env, o
        extra = json.loads(o.sa_workload)
        self.phase = extra.pop("phase", "load")  # load | baseline (its method is the workload's)
        self.workload = Workload(parse_mix(o.sa_tasks), **extra)
        w = max(0, getattr(env.runner, "worker_index", 0))
        n = o.sa_workers
        if o.sa_indices:
            self.indices = [int(x) for x in o.sa_indices.split(",")][w::n]
        else:
            self.indices = list(range(w, o.sa_sessions, n))
        self.next = 0
        self.key = os.environ.get("SPECAGENT_LOADTEST_KEY", "")  # never on a command line
        folder = Path(o.sa_records) if o.sa_records else None
        self.records = (folder / f"records-{os.getpid()}.jsonl").open("a", buffering=1) if folder else None
        self.arrivals: Queue | None = None
        self.idle = 0
        if o.sa_mode == "open":
            self.arrivals = Queue()
            gevent.spawn(self._arrive, random.Random(o.sa_seed * 1000 + w), o.sa_rate / n)

    def claim(self) -> int | None:
        if self.next >= len(self.indices):
            return None
        self.next += 1
        return self.indices[self.next - 1]

    def _arrive(self, rng: random.Random, rate: float) -> None:
        """Poisson arrivals; one that finds no idle user is shed (counted in Locust's statistics)."""
        while True:
            gevent.sleep(rng.expovariate(rate))
            if self.idle - self.arrivals.qsize() > 0 or self.next >= len(self.indices):
                self.arrivals.put(self.claim())  # None once every index is taken: a user stops
            else:
                events.request.fire(request_type="ARRIVAL", name="shed", response_time=0, response_length=0,
                                    exception=None, context={})

    def arrival(self) -> int | None:
        self.idle += 1
        try:
            return self.arrivals.get()
        finally:
            self.idle -= 1

    def stop_waiting(self) -> None:
        if self.arrivals is not None:
            for _ in range(self.idle + 1000):
                self.arrivals.put(None)

    def write(self, rec: SessionRecord) -> None:
        if self.records is not None:
            self.records.write(json.dumps(rec.to_json()) + "\n")


PLAN: Plan | None = None
ENV: Any = None  # Locust's environment, for the quit event (which is not given it)


@events.test_start.add_listener
def _start(environment: Any, **_: Any) -> None:
    global PLAN
    if not isinstance(environment.runner, MasterRunner):
        PLAN = Plan(environment)
    if not isinstance(environment.runner, WorkerRunner):
        gevent.spawn(_watch, environment)


@events.test_stopping.add_listener
def _stopping(environment: Any, **_: Any) -> None:
    if PLAN is not None:
        PLAN.stop_waiting()


@events.init.add_listener
def _init(environment: Any, **_: Any) -> None:
    global ENV
    ENV = environment


@events.quit.add_listener
def _failures(**_: Any) -> None:
    """The run's failures, final, as ``failures.json``: Locust's own ``--csv`` failures file is a snapshot
    taken once a second, which misses what failed in the run's last second."""
    folder = ENV.parsed_options.sa_records if ENV is not None else None
    if folder and not isinstance(ENV.runner, WorkerRunner):
        rows = [{"method": e.method, "name": e.name, "error": StatsError.parse_error(e.error),
                 "occurrences": e.occurrences} for e in ENV.runner.stats.errors.values()]
        (Path(folder) / "failures.json").write_text(json.dumps(rows))


def _stop_reason(environment: Any, reason: str, started_at: float | None = None) -> None:
    """``run.json``: why the run stopped, and when it started (the shape's clock, wall time)."""
    folder = environment.parsed_options.sa_records
    if folder:
        path = Path(folder) / "run.json"
        run = json.loads(path.read_text()) if path.exists() else {}
        run["stopped_because"] = reason
        if started_at is not None:
            run["started_at"] = started_at
        path.write_text(json.dumps(run))


def _watch(env: Any) -> None:
    """On the master (or the only process): stop at the error budget, or once every user has run out of
    sessions; the shape stops the run at its duration."""
    o, begun = env.parsed_options, time.monotonic()
    _stop_reason(env, f"duration {o.sa_duration_s:g} s reached", started_at=time.time())
    while env.runner.state not in ("stopped", "stopping", "cleanup"):
        gevent.sleep(0.5)
        failed = sum(e.num_failures for (_, kind), e in env.stats.entries.items() if kind == "SESSION")
        if failed >= o.sa_max_errors:
            _stop_reason(env, f"stopped early: {failed} errors (max_errors {o.sa_max_errors})")
            return env.runner.quit()
        if env.runner.state == "running" and time.monotonic() - begun > 3 and env.runner.user_count == 0:
            _stop_reason(env, "all sessions started and finished")
            return env.runner.quit()


class Stages(LoadTestShape):
    """Closed loop: each stage's concurrency for an equal share of the duration; open loop: one slot per
    concurrent session. None after the duration ends the run (in-flight sessions drain)."""

    def tick(self) -> tuple[int, float] | None:
        o = self.runner.environment.parsed_options
        levels = [int(x) for x in o.sa_stages.split(",")]
        t, share = self.get_run_time(), o.sa_duration_s / len(levels)
        if t >= o.sa_duration_s:
            return None
        k = min(int(t // share), len(levels) - 1)
        added = levels[k] - (levels[k - 1] if k else 0)
        return levels[k], (added / o.sa_ramp_s if o.sa_ramp_s > 0 else max(added, 1) * 10.0)


class SessionUser(HttpUser):
    """One session after another (closed loop), or one per arrival it takes (open loop)."""

    def on_start(self) -> None:
        self.client.headers["Authorization"] = f"Bearer {PLAN.key}"

    @task
    def session(self) -> None:
        i = PLAN.arrival() if PLAN.arrivals is not None else PLAN.claim()
        if i is None:
            raise StopUser()
        from specagent_ray.loadtest.session import run_session

        rec = run_session(self.client, PLAN, i)
        if rec.outcome == "error":
            gevent.sleep(0.25)  # a failing server is not hammered in a tight loop
