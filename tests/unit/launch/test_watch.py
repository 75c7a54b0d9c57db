"""The main job's waits end: a deployment that cannot start, or a session that stops moving, is reported
in one line instead of waited on forever. Serve's status is injected (the shape ``serve.status()``
returns); the sessions run through the real gateway and coordinator in process."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from specagent_ray.launch.watch import LOGS, AppFailed, AppWatch, reason
from specagent_ray.launch.workload import run_sessions
from specagent_ray.serve.core.config import LatencyModel
from specagent_ray.testing.gateway_server import in_process_gateway

TRACEBACK = """The deployment failed to start 3 times in a row. See controller logs for details. Error:
Traceback (most recent call last):
  File "replica.py", line 1867, in initialize
    self.host.warm()
ModuleNotFoundError: No module named 'bfcl_eval'
"""


def status(app: str = "RUNNING", **deployments: str) -> SimpleNamespace:
    ds = {name: SimpleNamespace(status=s, message=TRACEBACK if s != "HEALTHY" else "") for name, s in deployments.items()}
    return SimpleNamespace(applications={"sim": SimpleNamespace(status=app, message="", deployments=ds)})


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_deployment_that_cannot_start_is_one_line_with_its_exception_and_the_log_path():
    watch = AppWatch(["sim"], lambda: status("DEPLOYING", ToolHost="DEPLOY_FAILED", Gateway="HEALTHY"))
    with pytest.raises(AppFailed) as failed:
        watch.check()
    line = str(failed.value)
    assert "\n" not in line
    assert "ToolHost" in line and "DEPLOY_FAILED" in line and "No module named 'bfcl_eval'" in line and LOGS in line


def test_a_failed_application_without_a_failed_deployment_is_reported_too():
    failed_app = SimpleNamespace(applications={"sim": SimpleNamespace(
        status="DEPLOY_FAILED", message="ImportError: cannot import name 'build_app'", deployments={})})
    with pytest.raises(AppFailed, match="application 'sim' failed to deploy: ImportError"):
        AppWatch(["sim"], lambda: failed_app).check()


def test_one_replica_restart_is_not_a_failure_but_one_that_stays_unhealthy_is():
    clock, now = Clock(), {"s": status(Coordinator="UNHEALTHY")}
    watch = AppWatch(["sim"], lambda: now["s"], clock, unhealthy_s=30, every_s=0)
    watch.check()
    clock.now = 20
    now["s"] = status(Coordinator="HEALTHY")  # it came back: the count starts again
    watch.check()
    now["s"] = status(Coordinator="UNHEALTHY")
    clock.now = 45
    watch.check()  # 0 s unhealthy
    clock.now = 74
    watch.check()  # 29 s
    clock.now = 75
    with pytest.raises(AppFailed, match="Coordinator.*UNHEALTHY"):
        watch.check()


def test_apps_not_deployed_are_skipped_and_serve_is_asked_at_most_every_few_seconds():
    clock, asked = Clock(), []

    def ask():
        asked.append(clock.now)
        return SimpleNamespace(applications={})
    watch = AppWatch(["sim", "engines"], ask, clock, every_s=2.0)
    for t in (0.0, 0.5, 1.9, 2.0, 3.0, 4.5):
        clock.now = t
        watch.check()
    assert asked == [0.0, 2.0, 4.5]


def test_reason_keeps_the_last_exception_line_and_bounds_it():
    assert reason(TRACEBACK) == "ModuleNotFoundError: No module named 'bfcl_eval'"
    assert reason("just a line\nand another") == "and another"
    assert len(reason("ValueError: " + "x" * 1000)) == 300


BODY = {"tool_source": "airline", "task_id": "0", "user": "simulated", "method": "strong"}


def test_a_session_without_progress_is_reported_stalled_not_waited_on(tmp_path):
    stuck = LatencyModel(draft_base_s=30, draft_per_request_s=0, verify_base_s=30, verify_per_request_s=0,
                         step_base_s=30)  # its first step takes 30 s: no event after ``created``
    with in_process_gateway(tmp_path / "log", latency=stuck) as url:
        begun = time.monotonic()
        [result] = asyncio.run(run_sessions(url, "dev-key", [BODY], concurrency=1, stall_s=0.5))
        assert time.monotonic() - begun < 10
    assert result.status == "stalled"
    assert "no progress for 0.5 s" in result.error and "'created'" in result.error, result.error


def test_a_failed_deployment_stops_the_sessions_and_reaches_the_caller(tmp_path):
    slow = LatencyModel(draft_base_s=5, draft_per_request_s=0, verify_base_s=5, verify_per_request_s=0,
                        step_base_s=5)

    async def guard():
        await asyncio.sleep(0.3)
        raise AppFailed("deployment ToolHost of application 'sim' is DEPLOY_FAILED: boom")
    with in_process_gateway(tmp_path / "log", latency=slow) as url:
        begun = time.monotonic()
        with pytest.raises(AppFailed, match="boom"):
            asyncio.run(run_sessions(url, "dev-key", [BODY, {**BODY, "task_id": "1"}], concurrency=2, guard=guard))
        assert time.monotonic() - begun < 5


def test_waiting_for_running_ends_when_serve_says_so_or_when_it_fails():
    seen = iter([status("DEPLOYING", Coordinator="UPDATING"), status("DEPLOYING", Coordinator="UPDATING"),
                 status("RUNNING", Coordinator="HEALTHY")])
    now = {"s": next(seen)}

    def ask():
        current, now["s"] = now["s"], next(seen, now["s"])
        return current
    AppWatch(["sim"], ask, every_s=0).wait_running(10, poll_s=0)
    with pytest.raises(AppFailed, match="DEPLOY_FAILED"):
        AppWatch(["sim"], lambda: status("DEPLOYING", Coordinator="DEPLOY_FAILED"), every_s=0).wait_running(10, 0)
    with pytest.raises(TimeoutError, match="not RUNNING"):
        AppWatch(["sim"], lambda: status("DEPLOYING", Coordinator="UPDATING"), every_s=0).wait_running(0.2, 0.05)
