"""Structured outputs through the official OpenAI SDK: ``responses.parse(text_format=Model)`` against the real
gateway and coordinator in process, on the scripted engines (``models/scripted_plan.py``). The SDK sends the model's
strict JSON schema as ``text.format``; the agent's final message must be JSON the SDK parses into that model.
A plan's ``say`` whose words the schema refuses is drafted, refused and repaired with a message it accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from specagent_ray.testing.gateway_server import in_process_gateway


class Weather(BaseModel):
    city: str
    celsius: int = Field(ge=-40)
    sky: Literal["clear", "cloudy"]
    alerts: list[str]


@pytest.fixture
def client(tmp_path: Path):
    app = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client"}}}
    with in_process_gateway(tmp_path / "log", app=app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0, timeout=60)


def test_parse_with_a_pydantic_model_returns_the_parsed_object(client):
    r = client.responses.parse(model="specagent", input="hello", text_format=Weather)
    assert r.status == "completed" and isinstance(r.output_parsed, Weather)
    assert Weather.model_validate_json(r.output_text) == r.output_parsed


def test_a_plans_valid_json_is_said_as_is_and_invalid_words_are_repaired_into_the_schema(client):
    said = {"city": "Oslo", "celsius": 3, "sky": "cloudy", "alerts": ["wind"]}
    r = client.responses.parse(model="specagent", input=f"say {json.dumps(said)}", text_format=Weather)
    assert r.output_parsed == Weather(**said)
    r = client.responses.parse(model="specagent", input="say It is cloudy in Oslo.", text_format=Weather)
    assert isinstance(r.output_parsed, Weather)


def test_json_object_returns_an_object(client):
    r = client.responses.create(model="specagent", input="hello", text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(r.output_text), dict)
