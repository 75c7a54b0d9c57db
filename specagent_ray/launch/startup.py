"""Starting the local Ray cluster and Serve on a busy machine: wait while it is still coming up, say what
is awaited, and give up with one line that says why, never a Ray traceback.

On a machine whose cores are all busy, Serve's HTTP proxy actor can take longer to import and start than
Serve's readiness check allows (``RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S``, 5 s in Ray 2.60): the controller
then marks it unhealthy and kills it, and ``serve.start`` ends with ``ActorDiedError ... ProxyActor ...
cancelled before it started running``. For the local cluster this command starts itself (never a cluster
it attaches to), ``local_serve_env`` gives the proxy's checks longer, the way Kubernetes probes get an
initial delay; ``start_serve`` tries ``serve.start`` again while Ray still runs, up to ``patience_s``.

With direct ingress (on under ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``) Ray 2.60 keeps an ingress replica up
for 30 s after it is told to stop (``RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S``), so that an external
load balancer can deregister it: every ``serve.shutdown`` of such a local instance waited that long.
Nothing sits in front of a local instance, so ``local_serve_env`` sets the period to 0 there; requests in
flight still drain.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .watch import AppFailed

# Ray Serve's own knobs (ray/serve/_private/constants.py), read by its controller and replicas as they start.
LOCAL_SERVE = {
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",  # Ray's 5 s: a starved proxy is killed before it imports
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30",  # Ray's 10 s
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "0",  # Ray's 30 s, for a load balancer that is not there
}
PATIENCE_S = 300.0  # the longest wait for Serve to start, while Ray itself still answers


class StartupFailed(AppFailed):
    """The local cluster or Serve could not start. ``str()`` is one line saying why."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type, and the last non-empty line of its message (Ray's messages
    carry a whole traceback)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[-1] if lines else '(no message)'}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextmanager
def local_serve_env(env: dict[str, str] | None = None) -> Iterator[None]:
    """``LOCAL_SERVE`` in ``env`` (os.environ) while the block runs, where the operator set no value of
    their own; a Ray instance started in the block inherits them."""
    env = os.environ if env is None else env
    added = {k: v for k, v in LOCAL_SERVE.items() if k not in env}
    env.update(added)
    try:
        yield
    finally:
        for key in added:
            env.pop(key, None)


def ray_init(**kwargs: Any) -> None:
    """``ray.init(**kwargs)``; ``StartupFailed`` in one line if Ray cannot start or be reached."""
    import ray

    try:
        ray.init(**kwargs)
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds here, each with a page of traceback
        raise StartupFailed(f"the local Ray cluster did not start: {one_line(exc)} (Ray's logs: "
                            "/tmp/ray/session_latest/logs)") from None


def start_serve(http_options: Mapping[str, Any], say: Callable[[str], None] = lambda line: None,
                patience_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> None:
    """``serve.start``, tried again while the proxy is not up yet (it died starting, or did not answer
    in time) and Ray still runs, for up to ``patience_s`` (``PATIENCE_S``); each wait is one line through ``say``.
    ``StartupFailed``, one line, when Ray is gone or the patience is spent."""
    import ray
    from ray import serve

    say("waiting for Serve's controller and HTTP proxy...")
    patience_s = PATIENCE_S if patience_s is None else patience_s
    deadline, tries = clock() + patience_s, 0
    while True:
        tries += 1
        try:
            serve.start(http_options=dict(http_options), **kwargs)
            return
        except Exception as exc:  # noqa: BLE001 - ActorDiedError, GetTimeoutError, TimeoutError, RayTaskError...
            reason = one_line(exc)
        if not ray.is_initialized():
            raise StartupFailed(f"Serve did not start: Ray stopped ({reason})")
        if clock() >= deadline:
            raise StartupFailed(f"Serve's HTTP proxy did not start within {patience_s:.0f} s ({tries} tries; the "
                                f"last: {reason}); is every core busy? Serve's logs: "
                                "/tmp/ray/session_latest/logs/serve/")
        say(f"Serve's HTTP proxy is not up yet ({reason}); still waiting")
        sleep(2.0)
