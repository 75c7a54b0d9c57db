"""Through the real HTTP gateway: a client cannot pick a method that writes
without the strong model's check, and the API's own description is not served unless the profile says so."""

from __future__ import annotations

import httpx
import pytest

import yaml

from specagent_ray.launch.deployment_profiles import OURS, profile_path
from specagent_ray.protocol.baselines import METHODS
from specagent_ray.serve.core.config import PRODUCTION_METHODS, AppConfig
from specagent_ray.testing.gateway_server import in_process_gateway

pytestmark = pytest.mark.security
KEY = {"X-API-Key": "dev-key"}
UNCHECKED = sorted(set(METHODS) - set(PRODUCTION_METHODS))  # weak, agentcollab, specactions, ...


def body(method: str) -> dict:
    return {"tool_source": "airline", "task_id": "0", "user": "simulated", "method": method}


def test_a_method_outside_the_profile_is_403_with_the_allowed_list(tmp_path):
    with in_process_gateway(tmp_path) as url, httpx.Client(base_url=url, headers=KEY) as http:
        for method in UNCHECKED:
            r = http.post("/v1/sessions", json=body(method))
            assert r.status_code == 403, (method, r.text)
            assert "specagent, strong" in r.json()["detail"]
        assert http.get("/v1/stats").json()["sessions"]["running"] == 0  # nothing was started
        assert http.post("/v1/sessions", json=body("specagent")).status_code == 201


def test_a_bench_profile_may_serve_the_baselines(tmp_path):
    with in_process_gateway(tmp_path, app={"methods": list(METHODS)}) as url, \
            httpx.Client(base_url=url, headers=KEY) as http:
        assert http.post("/v1/sessions", json=body("weak")).status_code == 201


@pytest.mark.parametrize("profile", ["gpu-tp16", "edge-cloud"])
def test_production_profiles_serve_only_checked_methods_and_no_docs(profile):
    """Our application's args as the profile's YAML gives them (the engines' ``LLMConfig``s are checked by
    tests/unit/launch/test_profiles.py; validating them here would import vLLM, about 20 s)."""
    apps = yaml.safe_load(profile_path(profile).read_text())["applications"]
    ours = [a for a in apps if a["import_path"] == OURS]
    assert len(ours) == 1
    cfg = AppConfig.model_validate(ours[0]["args"])
    assert set(cfg.methods) <= set(PRODUCTION_METHODS)
    assert cfg.gateway.docs is False and cfg.gateway.dev_api_key is None


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
def test_docs_are_off_unless_the_profile_turns_them_on(tmp_path, path):
    with in_process_gateway(tmp_path / "off") as url:
        assert httpx.get(url + path).status_code == 404
        assert httpx.get(url + path, headers=KEY).status_code == 404
    with in_process_gateway(tmp_path / "on", gateway={"docs": True}) as url:
        assert httpx.get(url + path).status_code == 200
