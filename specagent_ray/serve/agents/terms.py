"""What this server offers its agent wires (Responses, Chat Completions, Messages): the models it serves
and their aliases, its tool sources, its rules for what a client may not ask. Wire-neutral: every wire
reads the same ``Terms``, built once from the application's config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...protocol.baselines import METHODS
from ..core.config import AppConfig, ClientSource, McpSource, OpenAIEngines, SimEngines
from ..core.errors import BadRequest
from .tokens import TokenCounter

# an MCP server's URL as a client may give it: http(s), an ASCII host name or address, a port, a path; no
# userinfo, query or fragment (``normal_url``)
URL = re.compile(r"(https?)://([a-z0-9.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?(/[^?#\x00-\x20\x7f-\uffff]*)?",
                 re.IGNORECASE | re.ASCII)


def normal_url(url: Any) -> str | None:
    """``url`` as MCP server URLs are compared here: scheme and host lower-cased, one trailing slash left
    off, nothing else changed (no decoding, no resolving). None for a URL that never names a server: one
    with userinfo, a query or a fragment, a scheme other than http and https, a host that is not ASCII."""
    m = URL.fullmatch(url) if isinstance(url, str) else None
    if m is None:
        return None
    scheme, host, port, path = m.group(1), m.group(2), m.group(3) or "", m.group(4) or ""
    return f"{scheme.lower()}://{host.lower()}{port}{path.removesuffix('/')}"


@dataclass(frozen=True)
class Terms:
    """What the agent wires of this server offer: its models, its tool sources (MCP ones by label and
    by each configured URL), what it does with a tool type it does not host and with a field it does not
    know, whether its engines read only text (then an image is refused) and sample as asked."""

    methods: tuple[str, ...]
    aliases: Mapping[str, str]
    mcp: tuple[str, ...]
    function_source: str | None
    unhosted: Literal["refuse", "drop"] = "drop"
    text_only_model: str | None = None  # the model an image or a file is refused for, if the engines read text only
    counter: TokenCounter = field(default_factory=TokenCounter)  # the input-token counting routes
    parallel: bool = False  # the profile's defaults.parallel_calls: the most parallel_tool_calls can turn on
    strict: bool = False  # gateway.strict_fields: a field this server does not know is refused, not ignored
    sampled: bool = False  # the engines sample as asked (OpenAI-compatible ones); scripted ones decode nothing
    mcp_urls: Mapping[str, str] = field(default_factory=dict)  # each configured url and alias (normal_url) -> source

    @classmethod
    def of(cls, cfg: AppConfig) -> Terms | None:
        """The terms of a server with config ``cfg``; None where no agent request could run (no MCP or
        client tool source, or simulated engines, which only replay benchmarks): it serves no agent wires."""
        clients = [n for n, s in cfg.tool_sources.items() if isinstance(s, ClientSource)]
        servers = {n: s for n, s in cfg.tool_sources.items() if isinstance(s, McpSource)}
        if isinstance(cfg.engines, SimEngines) or not (servers or clients):
            return None
        verifier = cfg.engines.verifier if isinstance(cfg.engines, OpenAIEngines) else None
        urls = {u: n for n, s in servers.items() for given in (s.url, *s.url_aliases) if (u := normal_url(given))}
        return cls(tuple(cfg.methods), dict(cfg.gateway.model_aliases), tuple(servers),
                   clients[0] if clients else None, cfg.gateway.unhosted_tools, verifier.model if verifier else None,
                   TokenCounter(verifier), cfg.defaults.parallel_calls, cfg.gateway.strict_fields,
                   isinstance(cfg.engines, OpenAIEngines), urls)

    def method(self, model: str) -> str:
        """The method ``model`` names (400 for a name that is neither a method nor an alias)."""
        method = self.aliases.get(model, model)
        if method not in METHODS:
            known = ", ".join([*self.methods, *self.aliases])
            raise BadRequest(f"unknown model {model!r}; this server serves: {known}", "model", "model_not_found")
        return method
