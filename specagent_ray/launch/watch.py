"""Watching deployed applications, so that a deployment that cannot start ends a wait with its reason.

Serve restarts a replica whose constructor raises, a few times, then marks its deployment and application
DEPLOY_FAILED; a replica that dies later makes its deployment UNHEALTHY until a new one runs. Without a
watch, a client of such an application waits forever on requests that no replica takes. ``AppWatch``
reads Serve's own status (``serve.status()``) and turns either state into ``AppFailed``: one line naming
the deployment, the replica's exception as Serve reported it, and where the logs are.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

LOGS = "/tmp/ray/session_latest/logs/serve/"
EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure)\b.*")


class AppFailed(RuntimeError):
    """An application the caller deployed cannot serve. ``str()`` is one line."""


def serve_status() -> Any:
    from ray import serve

    return serve.status()


def state(overview: Any) -> str:
    """An application's or deployment's status name (Serve gives an enum; tests give its name)."""
    return str(getattr(overview.status, "value", overview.status))


def reason(message: str) -> str:
    """The replica's exception in a Serve status message (the last ``SomeError: ...`` line of its
    traceback), or the message's last line; at most 300 characters."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    errors = [line for line in lines if EXCEPTION.match(line)]
    picked = (errors or lines or ["(Serve gave no message)"])[-1]
    return picked if len(picked) <= 300 else picked[:297] + "..."


class AppWatch:
    """Guarantees: ``check()`` raises ``AppFailed`` once an application among ``apps`` is DEPLOY_FAILED,
    or once one of its deployments has been DEPLOY_FAILED, or UNHEALTHY for ``unhealthy_s`` (a replica
    that keeps dying; one restart is not a failure). Serve's status is read at most every ``every_s``.
    Applications that are not deployed (not yet, or deleted) are skipped."""

    def __init__(self, apps: Sequence[str], status: Callable[[], Any] = serve_status,
                 clock: Callable[[], float] = time.monotonic, unhealthy_s: float = 30.0, every_s: float = 2.0):
        self.apps, self.status, self.clock = list(apps), status, clock
        self.unhealthy_s, self.every_s = unhealthy_s, every_s
        self._unhealthy_since: dict[tuple[str, str], float] = {}
        self._last = -float("inf")

    def check(self) -> None:
        now = self.clock()
        if now - self._last < self.every_s:
            return
        self._last = now
        applications = self.status().applications
        for name in self.apps:
            app = applications.get(name)
            if app is not None:
                self._check_app(name, app, now)

    def _check_app(self, name: str, app: Any, now: float) -> None:
        for deployment, d in app.deployments.items():
            status, key = state(d), (name, deployment)
            if status == "UNHEALTHY":
                failed = now - self._unhealthy_since.setdefault(key, now) >= self.unhealthy_s
            else:
                self._unhealthy_since.pop(key, None)
                failed = status == "DEPLOY_FAILED"
            if failed:
                raise AppFailed(f"deployment {deployment} of application {name!r} is {status}: "
                                f"{reason(d.message)} (replica logs: {LOGS})")
        if state(app) == "DEPLOY_FAILED":
            raise AppFailed(f"application {name!r} failed to deploy: {reason(app.message)} (logs: {LOGS})")

    def wait_running(self, timeout_s: float, poll_s: float = 0.5) -> None:
        """Return once every application among ``apps`` is RUNNING (each deployment's replicas started:
        the coordinators have replayed their logs); ``AppFailed`` as ``check()`` says, TimeoutError after
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            applications = self.status().applications
            if all(state(applications[n]) == "RUNNING" for n in self.apps if n in applications):
                return
            time.sleep(poll_s)
        raise TimeoutError(f"applications {', '.join(self.apps)} not RUNNING after {timeout_s:.0f}s")

    async def guard(self) -> None:
        """Return never; raise ``AppFailed`` once ``check()`` does (it runs in a thread: it calls Ray)."""
        while True:
            await asyncio.to_thread(self.check)
            await asyncio.sleep(self.every_s)
