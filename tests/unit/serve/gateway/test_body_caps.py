"""Each route's body cap: the routes that carry a conversation take what the verifier's context window can
read (``gateway.max_body_bytes``, else derived), every other route ``gateway.small_body_bytes``. A body over
its route's cap is refused with 413 naming the cap and the setting: a declared length before any byte is
read, a chunked body as soon as it passes the cap (never buffered whole)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from specagent_ray.serve.core.config import AppConfig
from specagent_ray.serve.core.tenants import tenant_of
from specagent_ray.serve.gateway.limits import BodyCaps, body_caps, carries_conversation
from specagent_ray.serve.gateway.routes import make_api
from specagent_ray.serve.responses.translate import Terms
from specagent_ray.testing.gateway_server import gateway_app, in_process_gateway
from specagent_ray.testing.http import serve_in_thread

MIB = 1 << 20
PROFILES = Path(__file__).resolve().parents[4] / "deployments"
KEY = {"Authorization": "Bearer k"}
SCRIPTED = {"engines": {"kind": "scripted"}, "tool_sources": {"app": {"kind": "client"}}}
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


def openai_app(context_tokens: int | None, **gateway: Any) -> AppConfig:
    endpoint = {"url": "http://127.0.0.1:8000/engines/v1", "model": "verifier"}
    verifier = {**endpoint, **({"context_tokens": context_tokens} if context_tokens else {})}
    return AppConfig.model_validate({"engines": {"kind": "openai", "drafter": endpoint, "verifier": verifier},
                                     "gateway": gateway})


# -- the derivation ---------------------------------------------------------------------------------------

def test_the_conversation_cap_is_the_setting_else_the_verifiers_window_never_under_the_floor():
    assert body_caps(AppConfig()) == BodyCaps(4 * MIB, 65536, body_caps(AppConfig()).source)  # sim: the floor
    assert "no verifier context window" in body_caps(AppConfig()).source
    small_window = body_caps(openai_app(8192))  # 8192 x 16 = 128 KiB: under the floor
    assert small_window.conversation == 4 * MIB and "body_floor_bytes" in small_window.source
    big = body_caps(openai_app(1_000_000))
    assert big.conversation == 16_000_000 and "1000000 tokens" in big.source and "body_bytes_per_token" in big.source
    assert body_caps(openai_app(1_000_000, body_bytes_per_token=8)).conversation == 8_000_000
    assert body_caps(openai_app(65536, body_floor_bytes=1024)).conversation == MIB
    fixed = body_caps(openai_app(1_000_000, max_body_bytes=200_000, small_body_bytes=4096))
    assert (fixed.conversation, fixed.small) == (200_000, 4096) and fixed.source == "gateway.max_body_bytes"


@pytest.mark.parametrize("path, big", [
    ("/v1/responses", True), ("/v1/responses/input_tokens", True), ("/v1/responses/resp_x/cancel", True),
    ("/v1/conversations", True), ("/v1/conversations/conv_1/items", True), ("/v1/chat/completions", True),
    ("/v1/messages", True), ("/v1/messages/count_tokens", True),
    ("/v1/sessions", False), ("/v1/sessions/s/messages", False), ("/v1/sessions/s/tool_results", False),
    ("/v1/sessions/s/approvals", False), ("/v1/responsesX", False), ("/v1/messagesX", False), ("/", False),
])
def test_only_the_routes_that_carry_a_conversation_get_the_big_cap(path, big):
    caps = BodyCaps(5 * MIB, 1024, "gateway.max_body_bytes")
    assert carries_conversation(path) is big
    limit, setting = caps.of(path)
    assert (limit, setting.startswith("gateway.max_body_bytes")) == ((5 * MIB, True) if big else (1024, False))
    assert big or setting == "gateway.small_body_bytes"


def test_each_openai_profile_states_the_window_its_engines_deploy():
    """``context_tokens`` of every endpoint served by the profile's own engines app is that model's
    ``max_model_len``: the derived body cap follows what the verifier can actually read."""
    checked = 0
    for path in sorted(PROFILES.glob("*.yaml")):
        apps = {a["name"]: a for a in yaml.safe_load(path.read_text())["applications"]}
        engines = apps["specagent"]["args"].get("engines", {})
        if engines.get("kind") != "openai":
            continue
        deployed = {c["model_loading_config"]["model_id"]: c["engine_kwargs"]["max_model_len"]
                    for c in apps.get("engines", {}).get("args", {}).get("llm_configs", [])}
        for role in ("drafter", "verifier"):  # the two every openai profile has
            endpoint = engines.get(role)
            if endpoint and "/engines/v1" in endpoint["url"]:
                assert endpoint.get("context_tokens") == deployed[endpoint["model"]], (path.name, role)
                checked += 1
    assert checked == 7  # local-cpu, gpu-tp16, gpu-tp16-chain (2 each), edge-cloud's drafter


# -- the middleware, through the real gateway ------------------------------------------------------------

async def never_called(method: str, *args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"a refused body reached the coordinator ({method})")


def capped_api(caps: BodyCaps) -> Any:
    """The gateway with the Responses API's routes, ``caps`` its body caps, over no coordinator."""
    cfg = AppConfig.model_validate(SCRIPTED)
    return make_api(never_called, cfg.gateway, lambda: {"k": tenant_of("k")}, terms=Terms.of(cfg), caps=caps)


def test_a_declared_length_over_the_cap_is_refused_before_any_byte_is_read():
    """A client that declares 1 GB and sends nothing gets its 413 at once, on a big route and a small one."""
    caps = BodyCaps(2 * MIB, 65536, "gateway.max_body_bytes")
    with serve_in_thread(capped_api(caps)) as url:
        port = int(url.rsplit(":", 1)[1])
        for path, declared in (("/v1/responses", 1 << 30), ("/v1/sessions", 65537)):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: "
                          f"application/json\r\nContent-Length: {declared}\r\n\r\n".encode())
                head = s.recv(65536).decode()
            assert head.startswith("HTTP/1.1 413"), head
        within = httpx.post(url + "/v1/sessions", headers=KEY, content=b"{" + b" " * 60_000 + b"}",
                            timeout=10)
        assert within.status_code != 413  # under the small cap: parsed (and refused for its content)


async def chunked_post(app: Any, path: str, total: int, chunk: int = 65536) -> tuple[httpx.Response, int]:
    """POST a chunked body of ``total`` bytes (no Content-Length) straight into the ASGI app; the
    bytes the app pulled from the body's generator, counted as they are generated."""
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        yield b'{"input": "'
        while pulled < total:
            pulled += chunk
            yield b"x" * chunk

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        r = await client.post(path, content=body(), headers={**KEY, "content-type": "application/json"})
    return r, pulled


@pytest.mark.parametrize("path, cap, setting", [("/v1/responses", 1 * MIB, "gateway.max_body_bytes"),
                                                 ("/v1/sessions", 65536, "gateway.small_body_bytes")])
def test_a_chunked_gigabyte_is_cut_off_once_it_passes_the_cap(path, cap, setting):
    caps = BodyCaps(1 * MIB, 65536, "gateway.max_body_bytes")
    r, pulled = asyncio.run(chunked_post(capped_api(caps), path, 1 << 30))
    assert r.status_code == 413, r.text
    assert pulled <= cap + 2 * 65536, pulled  # about the cap, never the gigabyte
    text = r.text
    assert f"over {cap} bytes" in text and setting in text


def test_the_413_is_in_each_apis_own_shape_and_names_the_derived_cap():
    caps = body_caps(openai_app(65536, body_floor_bytes=1024))  # 65536 tokens x 16 = 1 MiB
    with serve_in_thread(capped_api(caps)) as url:
        big = httpx.post(url + "/v1/responses", headers=KEY, content=b"x" * (MIB + 1), timeout=30)
        small = httpx.post(url + "/v1/sessions/s1/tool_results", headers=KEY, content=b"x" * 65537, timeout=30)
    assert big.status_code == small.status_code == 413
    error = big.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "request_too_large"
    assert f"request body over {MIB} bytes, this route's limit (gateway.max_body_bytes" in error["message"]
    assert "65536 tokens" in error["message"] and "context window" in error["message"]
    assert small.json() == {"detail": "request body over 65536 bytes, this route's limit (gateway.small_body_bytes)"}


def test_the_published_schema_bounds_each_routes_strings_by_its_own_cap(tmp_path):
    caps = BodyCaps(3 * MIB, 4096, "gateway.max_body_bytes")
    spec = capped_api(caps).openapi()
    schemas = spec["components"]["schemas"]
    assert schemas["UserMessage"]["properties"]["text"]["maxLength"] == 4096
    assert schemas["ToolResult"]["properties"]["content"]["maxLength"] == 4096
    # a conversation cap under one text's bound (100,000 characters) lowers the Responses body's strings
    app = gateway_app(tmp_path / "log", app=SCRIPTED, gateway={"max_body_bytes": 50_000, "small_body_bytes": 2048})
    schemas = app.openapi()["components"]["schemas"]
    texts = [n["maxLength"] for n in _walk(schemas["ResponsesFunctionCallOutputItem"]) if isinstance(n.get("maxLength"), int)]
    assert max(texts) == 50_000
    assert schemas["UserMessage"]["properties"]["text"]["maxLength"] == 2048


def _walk(node: Any) -> list[dict]:
    out = [node] if isinstance(node, dict) else []
    for value in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else []):
        out += _walk(value)
    return out


# -- a coding agent's replayed history --------------------------------------------------------------------

def history(total_bytes: int) -> list[dict[str, Any]]:
    """A replayed history of function calls and their outputs, each text under the 100,000-character
    bound on one text, ``total_bytes`` or more in all, then the user's plan for this turn."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "look everything up"}]
    n = 0
    while len(json.dumps(items)) < total_bytes:
        items += [{"type": "function_call", "call_id": f"c{n}", "name": "lookup", "arguments": json.dumps({"q": n})},
                  {"type": "function_call_output", "call_id": f"c{n}", "output": f"row {n} " + "y" * 60_000}]
        n += 1
    return [*items, {"role": "user", "content": "say done"}]


def test_a_megabyte_history_reaches_the_route_and_one_over_the_cap_gets_413_naming_it(tmp_path):
    with in_process_gateway(tmp_path / "log", app=SCRIPTED, keys=("k",)) as url:  # the floor: 4 MiB
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=60)
        items = history(1_000_000)
        assert len(json.dumps(items)) >= 1_000_000
        r = client.responses.create(model="specagent", input=items, tools=[LOOKUP])
        assert r.status == "completed" and r.output_text == "done"
        with pytest.raises(openai.APIStatusError) as refused:
            client.responses.create(model="specagent", input=history(4 * MIB + 1), tools=[LOOKUP])
    assert refused.value.status_code == 413
    assert f"request body over {4 * MIB} bytes" in str(refused.value) and "body_floor_bytes" in str(refused.value)
