"""Schemathesis, a property-based API fuzzer, against the real gateway and coordinator in one process
(simulated engines, tau2 airline and retail): every check (``--checks all``) in every phase, the stateful
one included, which starts sessions and follows the create response's links to the session's routes.
It passes only if every answer is one the OpenAPI schema documents (status, body, headers, content
type), every body the schema allows is taken and every body it does not allow is refused, and a 405
names exactly the path's methods in ``Allow``.

The gateway answers a body over its route's cap (``gateway/limits.py``) with 413 before parsing it; no schema can bound a
body's bytes (``maxLength`` counts characters; JSON can escape one into six bytes), so 413 counts as a
refusal of any body, valid or not (``CONFIG``: Schemathesis's default statuses, and 413).

One check is left out: ``use_after_free``. ``DELETE /v1/sessions/{sid}`` cancels a session and keeps its
record readable (``GET`` answers it as cancelled, its event stream still replays), where the check
expects a DELETE to remove the resource. One phase is left out for the stateless wires (Chat Completions,
Messages): the stateful one, which has no links to follow there (their test says why).

The second test shows the run can fail: with one documented status taken out of the schema and a 405
whose ``Allow`` misses a method, Schemathesis reports both.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from specagent_ray.testing.gateway_server import gateway_app
from specagent_ray.testing.http import serve_in_thread

pytestmark = pytest.mark.slow  # schemathesis runs a separate process per test: 5-45 s each on 2 cores

KEY = "fuzz-key"
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "413", "429", "5xx"]
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]
"""


def schemathesis(url: str, cwd: Path, *options: str) -> subprocess.CompletedProcess:
    """``st run`` with every check but use_after_free, ``CONFIG``, a fixed seed and no example database
    (its files go to ``cwd``)."""
    (cwd / "schemathesis.toml").write_text(CONFIG)
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(cwd / "schemathesis.toml"),
               "run", f"{url}/openapi.json",
               "--header", f"Authorization: Bearer {KEY}", "--checks", "all", "--exclude-checks", "use_after_free",
               "--seed", "1", "--generation-database", "none", "--request-timeout", "30", "--workers", "1",
               "--no-color", *options]
    return subprocess.run(command, check=False, cwd=cwd, capture_output=True, text=True, timeout=400)


@contextmanager
def gateway(tmp_path: Path, wrap: Any = lambda app: app) -> Iterator[str]:
    """The gateway's URL: its schema served, one API key, and client-user sessions that time out 1 s
    into waiting for a message nobody sends (so their event streams end)."""
    app = gateway_app(tmp_path / "log", keys=(KEY,), gateway={"docs": True}, idle_timeout_s=1.0)
    with serve_in_thread(wrap(app)) as url:
        yield url


def test_the_gateway_passes_every_check_in_every_phase(tmp_path):
    with gateway(tmp_path) as url:
        run = schemathesis(url, tmp_path, "--max-examples", "15")
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-20000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅\s+{phase} \(in", report), (phase, report[-5000:])
    links = re.search(r"API Links:\s+(\d+) covered", report)
    assert links and int(links.group(1)) >= 3, report[-5000:]  # sessions created, then used through links


def test_the_responses_routes_pass_every_check_in_every_phase(tmp_path):
    """The Responses and Conversations APIs on an app with plan-following engines and the bank MCP
    server: the create body is published as tight as it is taken (``responses.create_schema``), and
    responses and conversations link to their routes."""
    bank = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]
    app = gateway_app(tmp_path / "log", keys=(KEY,), gateway={"docs": True}, idle_timeout_s=1.0, app={
        "engines": {"kind": "scripted"}, "tool_sources": {"bank": {"kind": "mcp", "command": bank, "trusted": True}}})
    with serve_in_thread(app) as url:
        run = schemathesis(url, tmp_path, "--max-examples", "10", "--include-path-regex",
                           "^/v1/(responses|conversations)")
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-20000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅\s+{phase} \(in", report), (phase, report[-5000:])
    assert re.search(r"Selected:\s+14/", report), report[-5000:]


class AllowOnlyGet:
    """ASGI middleware: every 405 says ``Allow: GET``, as one route's own 405 does on a path with more."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        async def sent(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                message = {**message, "headers": [(k, b"GET" if k.lower() == b"allow" else v)
                                                  for k, v in message["headers"]]}
            await send(message)

        await self.app(scope, receive, sent)


def broken(app: Any) -> Any:
    """``app`` with 404 taken out of ``GET /v1/sessions/{sid}``'s documented statuses and a wrong Allow."""
    del app.openapi()["paths"]["/v1/sessions/{sid}"]["get"]["responses"]["404"]
    return AllowOnlyGet(app)


def test_an_undocumented_status_or_a_wrong_allow_header_fails_the_run(tmp_path):
    with gateway(tmp_path, broken) as url:
        run = schemathesis(url, tmp_path, "--include-path", "/v1/sessions/{sid}", "--phases", "coverage",
                           "--continue-on-failure")
    report = run.stdout + run.stderr
    assert run.returncode == 1, report[-5000:]
    assert "Undocumented status code" in report and "Received: 404" in report, report[-5000:]
    assert "Allow header mismatch" in report and "Missing documented methods: DELETE" in report, report[-5000:]


def test_the_chat_and_messages_routes_pass_every_check_in_every_phase(tmp_path):
    """Chat Completions and Anthropic's Messages (with count_tokens) on plan-following engines and a client
    tool source that trusts one read: every body the published schema allows is taken (a replayed history,
    forged or unknown call ids included: context, never a 404), every other one refused, and every stream
    event is one the schema documents. No stateful phase: these wires are stateless (the session is found
    from the history a request carries; no answer names a resource a later request addresses), so their
    operations have no links to follow."""
    app = gateway_app(tmp_path / "log", keys=(KEY,), gateway={"docs": True}, idle_timeout_s=1.0, app={
        "engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client", "read_tools": ["read_file"]}}})
    with serve_in_thread(app) as url:
        run = schemathesis(url, tmp_path, "--max-examples", "10", "--include-path-regex",
                           "^/v1/(chat/completions|messages)", "--phases", "examples,coverage,fuzzing")
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-20000:]
    for phase in ("Coverage", "Fuzzing"):
        assert re.search(rf"✅\s+{phase} \(in", report), (phase, report[-5000:])
    assert re.search(r"Selected:\s+3/", report), report[-5000:]
