"""Named tenants: who a key belongs to, and what that tenant may do.

A profile's ``tenants`` section names its tenants: ``{name: {keys_env, max_sessions, rate_per_s, burst,
methods, tool_sources}}``. Each tenant's keys are the comma-separated keys in its ``keys_env`` variable;
keys are never stored. A session's owner is its tenant's name, so a rotated key (a new key in the variable,
the old one removed) keeps its tenant's sessions. With tenants, a key that belongs to none gets 401
(operator keys stay valid, each its own anonymous tenant). Without a ``tenants`` section every key is its
own tenant, ``key-<sha256 prefix>`` (``tenant_of``), as before.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import Forbidden

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
RESERVED = ("local", "other")  # in-process sessions; the metrics label of every unnamed tenant


def tenant_of(key: str) -> str:
    """A key's tenant id: a hash, so neither logs nor session records hold the key."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:16]


class TenantConfig(BaseModel):
    """One named tenant; a limit left out is the gateway's or coordinator's for every tenant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys_env: str = Field(description="environment variable with the tenant's keys, comma-separated")
    max_sessions: int | None = Field(None, ge=1, description="running sessions; more get 429")
    rate_per_s: float | None = Field(None, gt=0, description="requests per second (token bucket per gateway replica)")
    burst: int | None = Field(None, ge=1, description="requests at once")
    methods: tuple[str, ...] | None = Field(None, description="methods it may ask for; None: all the profile's")
    tool_sources: tuple[str, ...] | None = Field(None, description="tool sources it may use; None: all")


def check_tenants(tenants: Mapping[str, TenantConfig], methods: tuple[str, ...], sources: Mapping[str, Any]) -> None:
    """ValueError naming the field where a tenant's name, methods or tool sources do not fit the profile."""
    for name, t in tenants.items():
        if not NAME.match(name) or name in RESERVED or name.startswith("key-"):
            raise ValueError(f"tenant name {name!r}: lowercase letters, digits, '-' and '_', at most 32, not "
                             f"{' or '.join(RESERVED)} and not starting with 'key-' (the unnamed tenants' ids)")
        unknown = [m for m in t.methods or () if m not in methods]
        if unknown:
            raise ValueError(f"tenants.{name}.methods: {unknown} are not among the profile's methods {list(methods)}")
        missing = [s for s in t.tool_sources or () if s not in sources]
        if missing:
            raise ValueError(f"tenants.{name}.tool_sources: {missing} are not configured tool sources")


def key_owners(tenants: Mapping[str, TenantConfig], env: Mapping[str, str], api_keys: frozenset[str],
               operators: frozenset[str]) -> dict[str, str]:
    """Every valid key and the tenant it acts for. With named tenants: their keys, and the operator keys
    (each its own tenant); without: the API keys and the operator keys, each its own tenant. ValueError
    where one key is listed for two tenants."""
    owners: dict[str, str] = {k: tenant_of(k) for k in operators}
    if not tenants:
        return {**owners, **{k: tenant_of(k) for k in api_keys}}
    for name, t in tenants.items():
        for key in (k.strip() for k in env.get(t.keys_env, "").split(",")):
            if not key:
                continue
            if owners.get(key, name) not in (name, tenant_of(key)):
                raise ValueError(f"a key in {t.keys_env} is also another tenant's ({owners[key]})")
            owners[key] = name
    return owners


class TenantRules:
    """The per-tenant limits the coordinator and the gateway apply. An unnamed tenant has none of its own."""

    def __init__(self, tenants: Mapping[str, TenantConfig]):
        self.tenants = dict(tenants)

    def max_sessions(self, owner: str) -> int | None:
        t = self.tenants.get(owner)
        return t.max_sessions if t else None

    def rate(self, owner: str) -> tuple[float | None, int | None]:
        t = self.tenants.get(owner)
        return (t.rate_per_s, t.burst) if t else (None, None)

    def allow(self, owner: str, method: str, tool_source: str) -> None:
        """Forbidden (403) where the tenant may not ask for this method or tool source."""
        t = self.tenants.get(owner)
        if t is None:
            return
        if t.methods is not None and method not in t.methods:
            raise Forbidden(f"method {method!r} is not among this tenant's: {', '.join(t.methods)}")
        if t.tool_sources is not None and tool_source not in t.tool_sources:
            raise Forbidden(f"tool source {tool_source!r} is not among this tenant's: {', '.join(t.tool_sources)}")
