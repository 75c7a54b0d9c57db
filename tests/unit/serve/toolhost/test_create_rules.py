"""One statement of which creates a server takes (``api.refusal``): the coordinator's check and the
published create schema (``api.Offer``) agree on every source kind, user kind and engine kind."""

from __future__ import annotations

from typing import get_args

import pytest

from specagent_ray.serve.core.api import CreateSession, Offer, UserKind
from specagent_ray.serve.core.config import AppConfig, Endpoint, OpenAIEngines, SimEngines
from specagent_ray.serve.core.errors import BadRequest
from specagent_ray.serve.toolhost.sources import ToolSources

SOURCES = {"airline": {"kind": "tau2", "domain": "airline"}, "files": {"kind": "bfcl", "category": "base"},
           "app": {"kind": "client"}, "docs": {"kind": "mcp", "command": ["python3", "-m", "docs_server"]}}
ENGINES = {"sim": SimEngines(),
           "models": OpenAIEngines(drafter=Endpoint(url="http://127.0.0.1:9/v1", model="drafter"),
                                   verifier=Endpoint(url="http://127.0.0.1:9/v1", model="verifier"))}
# (source, user) pairs each engine kind takes: the scripted customer only with simulated engines, tau2's
# LLM user only with model engines and a tau2 source, non-benchmark sources only with model engines.
EXPECTED = {"sim": {("airline", "client"), ("airline", "simulated"), ("files", "client"), ("files", "simulated")},
            "models": {("airline", "client"), ("airline", "tau2"), ("files", "client"), ("app", "client"),
                       ("docs", "client")}}


def taken(cfg: AppConfig) -> set[tuple[str, str]]:
    sources, out = ToolSources(cfg, None), set()  # type: ignore[arg-type]
    for name in cfg.tool_sources:
        for user in get_args(UserKind):
            try:
                sources.check(CreateSession(tool_source=name, user=user, message="hi", task_id="0"))
            except BadRequest:
                continue
            out.add((name, user))
    return out


@pytest.mark.parametrize("engines", ENGINES)
def test_the_schema_offers_exactly_the_creates_the_coordinator_takes(engines):
    cfg = AppConfig(engines=ENGINES[engines], tool_sources=SOURCES)
    offered = {(name, user) for name, terms in Offer.of(cfg).sources.items() for user in terms.users}
    assert taken(cfg) == offered == EXPECTED[engines]


def test_a_refused_create_says_why_and_a_client_user_needs_an_opening_message():
    cfg = AppConfig(engines=ENGINES["models"], tool_sources=SOURCES)
    check = ToolSources(cfg, None).check  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="BFCL cases have no LLM user"):
        check(CreateSession(tool_source="files", user="tau2", task_id="0"))
    with pytest.raises(BadRequest, match="a mcp session needs user 'client' and an opening message"):
        check(CreateSession(tool_source="docs", user="client"))
    with pytest.raises(BadRequest, match="a client-user session needs an opening message"):
        check(CreateSession(tool_source="airline", user="client", task_id="0"))
