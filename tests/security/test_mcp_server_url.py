"""An MCP tool's ``server_url`` may only name a server the operator configured: its ``url``, or one of its
``url_aliases``, exactly (scheme and host compared without case, one trailing slash ignored). Every other
URL is refused with 400 ``client_chosen_server`` before anything runs, the spellings that reach the same
machine by another road included (userinfo, a query, another port, an IP form of the host).

Nothing on this path ever fetches the client's URL: it is only compared with the configured ones, and
the server then reaches the configured server by the operator's own transport. So a redirect cannot be
followed, and a URL that a configured one redirects to is one more URL the operator did not configure."""

from __future__ import annotations

import sys

import httpx
import openai
import pytest

from specagent_ray.serve.core.config import AppConfig
from specagent_ray.serve.core.errors import BadRequest
from specagent_ray.serve.responses.translate import (
    ResponseCreate,
    Terms,
    create_request,
    echoed_tools,
)
from specagent_ray.testing.gateway_server import in_process_gateway

pytestmark = pytest.mark.security
BANK_URL = "http://127.0.0.1:8931/mcp"
ALIAS = "https://Bank.Internal.Example/mcp/"
BANK = [sys.executable, "-m", "specagent_ray.testing.mcp_server"]


def terms(**gateway: object) -> Terms:
    """The terms of a profile whose MCP servers are ``bank`` (over HTTP, with an alias) and ``git`` (stdio)."""
    found = Terms.of(AppConfig.model_validate({
        "engines": {"kind": "scripted"}, "gateway": gateway, "tool_sources": {
            "bank": {"kind": "mcp", "url": BANK_URL, "url_aliases": [ALIAS]},
            "git": {"kind": "mcp", "command": ["mcp-server-git"]}, "app": {"kind": "client"}}}))
    assert found is not None
    return found


def ask(url: str, label: str | None = "anything") -> ResponseCreate:
    tool = {"type": "mcp", "server_url": url, **({"server_label": label} if label is not None else {})}
    return ResponseCreate(model="specagent", input="hi", tools=[tool])


@pytest.mark.parametrize("url", [
    BANK_URL, BANK_URL + "/", "HTTP://127.0.0.1:8931/mcp",  # the configured url; scheme and host without case
    "https://bank.internal.example/mcp", "https://BANK.internal.example/mcp/",  # an alias, one slash either way
])
def test_a_configured_url_or_alias_names_its_server_whatever_label_the_client_gives(url):
    req = create_request(ask(url), terms())
    assert req.tool_source == "bank"
    unlabelled = create_request(ask(url, label=None), terms())
    assert unlabelled.tool_source == "bank"


@pytest.mark.parametrize("url", [
    "http://127.1:8931/mcp", "http://2130706433:8931/mcp", "http://0x7f000001:8931/mcp",  # IP forms of 127.0.0.1
    "http://017700000001:8931/mcp", "http://[::ffff:127.0.0.1]:8931/mcp", "http://127.0.0.01:8931/mcp",
    "http://localhost:8931/mcp", "http://127.0.0.1:8932/mcp", "http://127.0.0.1/mcp",  # another host, port
    "http://127.0.0.1:08931/mcp", "http://127.0.0.1:8931/MCP", "http://127.0.0.1:8931/mcp//",  # path exact
    "http://127.0.0.1:8931/%6dcp", "http://127.0.0.1:8931/mcp/../mcp", "http://127.0.0.1:8931/./mcp",
    "http://user@127.0.0.1:8931/mcp", "http://u:p@127.0.0.1:8931/mcp", "http://evil.example@127.0.0.1:8931/mcp",
    "http://127.0.0.1:8931@evil.example/mcp", "http://127.0.0.1:8931\\@evil.example/mcp",  # userinfo
    "http://127.0.0.1:8931/mcp?x=1", "http://127.0.0.1:8931/mcp?", "http://127.0.0.1:8931/mcp#a",  # query, fragment
    "ftp://127.0.0.1:8931/mcp", "file:///etc/passwd", "gopher://127.0.0.1:8931/mcp", "ws://127.0.0.1:8931/mcp",
    "//127.0.0.1:8931/mcp", "127.0.0.1:8931/mcp", " http://127.0.0.1:8931/mcp", "http://127.0.0.1:8931/mcp\n",
    "http://169.254.169.254/latest/meta-data/", "http://bank.internal.example/mcp",  # the alias over http
    "https://bank.internal.example.evil.example/mcp", "https://ban\u212a.internal.example/mcp",  # Kelvin sign
    "", "mcp-server-git",
])
def test_every_other_url_is_refused_before_anything_runs(url):
    with pytest.raises(BadRequest) as refused:
        create_request(ask(url), terms())
    assert (refused.value.param, refused.value.code) == ("tools.server_url", "client_chosen_server")
    assert BANK_URL not in refused.value.message and "Internal" not in refused.value.message  # names no url


def test_a_url_a_configured_server_redirects_to_is_refused():
    """Nothing here fetches a URL, so a redirect is never followed: the URL that a configured server
    redirects to (say ``http://127.0.0.1:8931/mcp`` answers 307 to ``/v2/mcp``) is just another URL,
    refused as every URL the operator did not configure is."""
    for target in ("http://127.0.0.1:8931/v2/mcp", "http://127.0.0.1:9000/mcp", "https://127.0.0.1:8931/mcp"):
        with pytest.raises(BadRequest, match="server_url"):
            create_request(ask(target), terms())


def test_a_url_and_a_label_that_name_two_configured_servers_are_refused():
    with pytest.raises(BadRequest) as two:
        create_request(ask(BANK_URL, label="git"), terms())
    assert two.value.param == "tools.server_label"
    assert create_request(ask(BANK_URL, label="bank"), terms()).tool_source == "bank"


@pytest.mark.parametrize("field, value", [("headers", {"Authorization": "Bearer x"}), ("authorization", "t"),
                                          ("connector_id", "connector_gmail")])
def test_client_credentials_and_connectors_stay_refused_even_with_unknown_fields_accepted(field, value):
    body = ResponseCreate(model="specagent", input="hi",
                          tools=[{"type": "mcp", "server_url": BANK_URL, "server_label": "bank", field: value}])
    with pytest.raises(BadRequest) as refused:
        create_request(body, terms())
    assert (refused.value.param, refused.value.code) == (f"tools.{field}", "client_chosen_server")


def test_the_echoed_tool_names_the_configured_server_not_the_clients_label():
    assert echoed_tools(ask(ALIAS, "deepwiki"), terms()) == [
        {"type": "mcp", "server_label": "bank", "server_url": ALIAS}]


def test_through_the_route_an_alias_reaches_the_configured_server_and_a_look_alike_is_400(tmp_path):
    """The bank runs over stdio; a client names it by an alias URL that resolves nowhere (nothing
    fetches it). An IP spelling of a configured URL is refused by the route, as OpenAI's error."""
    alias = "https://bank.internal.example/mcp"
    sources = {"bank": {"kind": "mcp", "command": BANK, "trusted": True, "url_aliases": [alias, BANK_URL]},
               "app": {"kind": "client"}}
    app = {"engines": {"kind": "scripted"}, "tool_sources": sources}
    with in_process_gateway(tmp_path, app=app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0, timeout=60)
        r = client.responses.create(model="specagent", input='call get_balance {"account": "alice"}; say ok',
                                    tools=[{"type": "mcp", "server_label": "my-bank", "server_url": alias}])
        assert r.status == "completed" and r.output_text == "ok"
        assert [(i.type, getattr(i, "server_label", None)) for i in r.output][:2] == [
            ("mcp_list_tools", "bank"), ("mcp_call", "bank")]
        assert r.output[1].output == "100"
        raw = httpx.post(f"{url}/v1/responses", headers={"Authorization": "Bearer dev-key"}, json={
            "model": "specagent", "input": "hi", "tools": [
                {"type": "mcp", "server_label": "my-bank", "server_url": "http://2130706433:8931/mcp"}]})
        assert raw.status_code == 400, raw.text
        assert (raw.json()["error"]["param"], raw.json()["error"]["code"]) == ("tools.server_url",
                                                                               "client_chosen_server")
