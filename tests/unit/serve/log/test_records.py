"""The session log's typed records (serve/log/records.py): one discriminated union, the JSON the log and the
event stream carry, and the API schema that documents it."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from specagent_ray.protocol.types import Action, Event
from specagent_ray.serve.core.config import GatewayConfig
from specagent_ray.serve.gateway.routes import make_api
from specagent_ray.serve.log.records import Commit, ProtocolEvent, parse
from specagent_ray.serve.log.wire import action_dict, event_dict


@pytest.mark.parametrize("action", [Action.tool("book", seat="1A"), Action.message("hello"), Action.stop()])
def test_an_actions_json_is_the_wires_for_every_action_kind(action):
    data = event_dict(Event("staged", "why", action))
    rec = ProtocolEvent(t=data.pop("kind"), **data)
    assert rec.data()["action"] == action_dict(action)


@pytest.mark.parametrize("bad", [
    {"t": "no_such_kind"},
    {"t": "commit", "steps": [], "keys": []},  # no calls
    {"t": "intent", "key": "s:w0", "call": {"name": "book"}, "author": "weak"},  # no arguments
    {"t": "final", "status": "exploded"},
    {"detail": "no kind"},
])
def test_a_record_that_is_not_one_of_the_kinds_is_refused(bad):
    with pytest.raises(ValidationError):
        parse(bad)


def test_every_protocol_event_kind_is_a_record_and_unknown_fields_are_ignored():
    for kind in typing.get_args(typing.get_type_hints(Event)["kind"]):
        assert parse({"t": kind, "detail": "", "action": None, "seq": 3, "sid": "s"}).t == kind
    assert isinstance(parse({"t": "commit", "steps": [], "keys": [], "calls": [], "later": 1}), Commit)


def test_the_event_streams_schema_documents_every_record_kind():
    spec = make_api(None, GatewayConfig(), lambda: {"k": "key-k"}).openapi()  # type: ignore[arg-type]
    response = spec["paths"]["/v1/sessions/{sid}/events"]["get"]["responses"]["200"]
    event = response["content"]["text/event-stream"]["itemSchema"]
    assert event["properties"]["data"]["contentSchema"]["$ref"].endswith("/SessionEvent")
    union = spec["components"]["schemas"]["SessionEvent"]
    kinds = set(union["discriminator"]["mapping"])
    assert {"created", "commit", "intent", "final", "tool_call_pending", "staged", "verifier_fallback"} <= kinds
