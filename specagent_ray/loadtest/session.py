"""One session of a Locust load run, on Locust's HTTP client (``requests`` under gevent): create, follow
the SSE events, answer the client's part, maybe cancel, read the trajectory. Each outcome is fired as
Locust statistics (``locustfile.py``'s docstring lists them) and returned as a ``SessionRecord``."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import gevent
import requests
from locust import events

from ..launch.client import gateway_error
from .records import SessionRecord, step_latencies


class LoadError(Exception):
    """A session that did not end ``done``; its message starts with the error kind."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail[:300]}")
        self.kind, self.detail = kind, detail


def _fire(kind: str, name: str, ms: float, exception: Exception | None = None) -> None:
    events.request.fire(request_type=kind, name=name, response_time=ms, response_length=0, exception=exception,
                        context={})


def _check(r: Any, what: str) -> Any:
    """A response's JSON, or the LoadError its status or transport failure is."""
    if r.status_code == 0:  # Locust's client answers a transport failure with status 0 and .error
        err = r.error
        kind = ("timeout" if isinstance(err, requests.Timeout) else
                "connect" if isinstance(err, requests.ConnectionError) else "transport")
        raise LoadError(kind, f"{what}: {type(err).__name__}: {err}")
    if r.status_code >= 400:  # a requests response reads as httpx's does here
        raise LoadError(f"http_{r.status_code}", f"{what}: {gateway_error(r).detail}")
    try:
        return r.json()
    except ValueError as exc:
        raise LoadError("bad_response", f"{what}: {exc}") from None


def _create(client: Any, plan: Any, body: dict[str, Any], rec: SessionRecord) -> dict[str, Any]:
    """429s and 503s waited out while the run still starts sessions; one Idempotency-Key for every try."""
    key = uuid.uuid4().hex
    while True:
        with client.post("/v1/sessions", json=body, headers={"Idempotency-Key": key}, name="POST /v1/sessions",
                         timeout=plan.o.sa_timeout_s, catch_response=True) as r:
            if r.status_code in (429, 503) and plan.env.runner.state in ("spawning", "running"):
                r.success()  # admission control doing its job, not an error
                rec.throttled += 1
                wait = gateway_error(r).retry_after or 1.0
            else:
                return _check(r, "create")
        gevent.sleep(wait)


def _events(client: Any, plan: Any, sid: str) -> Iterator[dict[str, Any]]:
    """Every event until ``final``; a dropped stream resumes after the last event seen (100 times at most)."""
    after = 0
    for _ in range(100):
        try:
            with client.get(f"/v1/sessions/{sid}/events", params={"after": after}, stream=True, name="GET events",
                            timeout=(10, plan.o.sa_timeout_s), catch_response=True) as r:
                if r.status_code != 200:
                    _check(r, "events")
                r.success()
                for line in r.iter_lines(decode_unicode=True):
                    if not line or not line.startswith("data:"):
                        continue  # a keep-alive comment, an event's id or a blank separator
                    event = json.loads(line[5:])
                    after = event["seq"] + 1
                    yield event
                    if event["t"] == "final":
                        return
        except requests.RequestException:
            continue  # resume from `after`
    raise LoadError("transport", f"the event stream of {sid} dropped 100 times")


def _owed(plan: Any, event: dict[str, Any]) -> bool:
    """Whether the session now waits on the client: a client tool call, or (a client user) a message."""
    return event["t"] == "tool_call_pending" or (event["t"] == "agent_message" and plan.workload.user == "client")


def _client_part(client: Any, plan: Any, sid: str, event: dict[str, Any], rec: SessionRecord) -> None:
    """What the client owes: a pending client tool call's result, or (a client user) the next message."""
    if event["t"] == "tool_call_pending":
        _check(client.post(f"/v1/sessions/{sid}/tool_results", name="POST tool_results", timeout=plan.o.sa_timeout_s,
                           json={"call_id": event["call_id"], "content": "{\"ok\": true}"}), "tool result")
        rec.tool_results += 1
    elif event["t"] == "agent_message" and plan.workload.user == "client":
        rec.user_messages += 1
        stop = rec.user_messages >= plan.workload.client_user_turns
        _check(client.post(f"/v1/sessions/{sid}/messages", name="POST messages", timeout=plan.o.sa_timeout_s,
                           json={"text": "Thanks, that is all." if stop else "Yes, please go on.", "stop": stop}),
               "user message")


def run_session(client: Any, plan: Any, i: int) -> SessionRecord:
    """Session ``i`` of the workload, to its end; never raises but for the run being stopped."""
    body = plan.workload.body(i)
    if plan.workload.user == "client":
        body = {**body, "message": "Hi, I need help with my booking."}
    rec = SessionRecord(i, plan.phase, body["method"], body["tool_source"], body["task_id"], body["trial"], time.time())
    every = plan.workload.cancel_every
    cancel = every > 0 and plan.phase == "load" and i % every == every - 1
    try:
        rec.session_id = _create(client, plan, body, rec)["session_id"]
        for event in _events(client, plan, rec.session_id):
            if event["t"] == "commit":
                rec.delivered(time.time(), max(1, len(event.get("steps") or ())))
            if cancel and not rec.cancelled_by_client and (event["t"] == "commit" or _owed(plan, event)):
                _check(client.delete(f"/v1/sessions/{rec.session_id}", name="DELETE session",
                                     timeout=plan.o.sa_timeout_s), "cancel")
                rec.cancelled_by_client = True
            if not rec.cancelled_by_client:
                _client_part(client, plan, rec.session_id, event, rec)
        traj = _check(client.get(f"/v1/sessions/{rec.session_id}", name="GET session", timeout=plan.o.sa_timeout_s),
                      "trajectory")
        strong, weak = traj["usage"]["strong"], traj["usage"]["weak"]
        rec.strong_calls, rec.strong_prompt = strong["calls"], strong["prompt_tokens"]
        rec.strong_decode, rec.weak_decode = strong["decode_tokens"], weak["decode_tokens"]
        rec.outcome = traj["status"]
        expected = "cancelled" if rec.cancelled_by_client else "done"
        if rec.outcome not in (expected, "done"):
            raise LoadError(f"session_{rec.outcome}", traj.get("error") or traj.get("termination") or "")
        rec.end_s = time.time()
        for latency in step_latencies(rec.start_s, rec.commits):
            _fire("STEP", "committed", 1000 * latency)
        _fire("SESSION", rec.method, 1000 * (rec.end_s - rec.start_s))
    except LoadError as exc:
        _failed(rec, exc)
    except (KeyError, TypeError, ValueError) as exc:  # a 2xx answer that is not what the API promises
        _failed(rec, LoadError("bad_response", f"{type(exc).__name__}: {exc}"))
    except BaseException:  # the run stopped (GreenletExit, StopUser): in flight, cancelled by the caller
        rec.outcome = "unfinished"
        raise
    finally:
        plan.write(rec)
    return rec


def _failed(rec: SessionRecord, exc: LoadError) -> None:
    if not exc.kind.startswith("session_"):
        rec.outcome = "error"
    rec.error_kind, rec.error, rec.end_s = exc.kind, exc.detail[:500], time.time()
    _fire("SESSION", rec.method, 1000 * (rec.end_s - rec.start_s), exc)
