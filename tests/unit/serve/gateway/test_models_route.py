"""``GET /v1/models`` through the official OpenAI SDK against the real gateway: the model names a key may
send (the profile's methods and their aliases, less what its tenant may not use), 404 in OpenAI's error
shape for any other, and no list without a key."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from specagent_ray.serve.core.config import AppConfig
from specagent_ray.serve.core.tenants import key_owners
from specagent_ray.serve.gateway.models_route import ModelTerms
from specagent_ray.serve.gateway.routes import make_api
from specagent_ray.testing.gateway_server import in_process_gateway
from specagent_ray.testing.http import serve_in_thread

PROFILE = {"methods": ["specagent", "strong", "weak"],
           "gateway": {"model_aliases": {"my-agent": "specagent", "cheap": "weak", "unserved": "agentcollab"}},
           "tenants": {"acme": {"keys_env": "ACME_KEYS", "methods": ["strong"]},
                       "open": {"keys_env": "OPEN_KEYS"}}}


async def never_called(method: str, *args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"/v1/models reached the coordinator ({method})")


@pytest.fixture(scope="module")
def url():
    cfg = AppConfig.model_validate(PROFILE)
    owners = key_owners(cfg.tenants, {"ACME_KEYS": "acme-key", "OPEN_KEYS": "open-key"}, frozenset(), frozenset())
    api = make_api(never_called, cfg.gateway, lambda: owners, models=ModelTerms.of(cfg))
    with serve_in_thread(api) as base:
        yield base


def sdk(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)


def test_a_key_lists_the_profiles_methods_and_aliases_its_tenant_may_use(url):
    everything = sdk(url, "open-key").models.list()
    assert [m.id for m in everything.data] == ["specagent", "strong", "weak", "my-agent", "cheap"]  # not "unserved"
    assert {(m.object, m.owned_by) for m in everything.data} == {("model", "specagent-ray")}
    assert all(isinstance(m.created, int) and m.created > 0 for m in everything.data)
    assert [m.id for m in sdk(url, "acme-key").models.list().data] == ["strong"]


def test_one_model_is_found_only_where_the_key_may_use_it(url):
    assert sdk(url, "open-key").models.retrieve("my-agent").id == "my-agent"
    assert sdk(url, "acme-key").models.retrieve("strong").model_dump(exclude_none=True) == {
        "id": "strong", "object": "model", "created": sdk(url, "open-key").models.retrieve("strong").created,
        "owned_by": "specagent-ray"}
    for key, model in (("acme-key", "specagent"), ("acme-key", "my-agent"), ("open-key", "gpt-4o"),
                       ("open-key", "unserved")):
        with pytest.raises(openai.NotFoundError) as missing:
            sdk(url, key).models.retrieve(model)
        error = missing.value.body
        assert error["type"] == "not_found_error" and error["code"] == "model_not_found", error
        assert error["param"] == "model" and model in error["message"]


def test_no_key_no_list(url):
    with pytest.raises(openai.AuthenticationError):
        sdk(url, "wrong").models.list()


def test_the_served_gateway_lists_its_models_and_publishes_both_routes(tmp_path):
    """Without the profile's model terms the gateway lists the offer's methods and the gateway's aliases."""
    aliases = {"model_aliases": {"agent": "specagent"}, "docs": True}
    with in_process_gateway(tmp_path / "log", keys=("k",), gateway=aliases) as base:
        assert [m.id for m in sdk(base, "k").models.list().data] == ["specagent", "strong", "agent"]
        spec = httpx.get(base + "/openapi.json", timeout=30).json()
    assert {"list_models", "get_model"} <= {op["operationId"] for p in spec["paths"].values() for op in p.values()}
    assert spec["paths"]["/v1/models/{model}"]["get"]["responses"]["404"]["content"]["application/json"][
        "schema"]["$ref"] == "#/components/schemas/OpenAIError"
