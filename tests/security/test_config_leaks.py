"""An MCP source's command line and URL are server configuration. Clients see the
source's name only: in the tool host's errors (which become error observations in the event stream),
in the 409 of a create, and in a failed session's error. The full text goes to the server's log.

The create path is tested on the coordinator's own parts, not over HTTP: the in-process gateway serves
simulated engines, which take tau2 sources only (see sources.py)."""

from __future__ import annotations

import sys

import pytest

from specagent_ray.ports import free_port
from specagent_ray.protocol.types import ToolCall
from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.config import AppConfig, McpSource
from specagent_ray.serve.core.errors import Conflict
from specagent_ray.serve.core.handles import Local
from specagent_ray.serve.toolhost.sources import ToolSources
from specagent_ray.serve.toolhost.tool_host import ToolHost
from specagent_ray.tools.mcp import McpUnavailable

pytestmark = pytest.mark.security
SECRET = "hunter2-token"
SOURCES = {
    "crm": McpSource(command=[sys.executable, "/srv/private/crm_server.py", f"--token={SECRET}"]),
    "web": McpSource(url=f"http://127.0.0.1:{free_port()}/mcp?key={SECRET}"),
}


def leaks(text: str) -> list[str]:
    return [s for s in (SECRET, "/srv/private", "crm_server", "127.0.0.1", sys.executable) if s in text]


@pytest.mark.parametrize("source", sorted(SOURCES))
async def test_the_tool_hosts_errors_name_the_source_not_its_command_or_url(source, caplog):
    host = ToolHost(dict(SOURCES))
    with pytest.raises(McpUnavailable) as described:
        await host.describe(source)
    with pytest.raises(McpUnavailable) as executed:
        await host.execute(source, "s1", ToolCall("lookup", {}))
    for caught in (described, executed):
        assert repr(source) in str(caught.value) and leaks(str(caught.value)) == []
    assert any(SECRET in r.getMessage() for r in caplog.records)  # the operator still sees it


async def test_a_create_on_a_source_that_is_down_answers_409_with_its_name_only():
    cfg = AppConfig(tool_sources=dict(SOURCES))
    sources = ToolSources(cfg, Local(ToolHost(dict(SOURCES))))
    req = CreateSession(tool_source="crm", user="client", message="hi")
    with pytest.raises(Conflict) as caught:
        await sources.catalog(req, cfg.tool_sources["crm"])
    assert "'crm' is unavailable" in caught.value.message and leaks(caught.value.message) == []
