"""``GET /v1/models`` and ``GET /v1/models/{id}``: the model names a key may send, in OpenAI's shape.

A model here is a name a request's ``model`` (Responses API) or ``method`` (sessions API) takes: the
profile's methods and ``gateway.model_aliases`` whose method is one of them, less what the caller's
tenant may not ask for (``tenants.<name>.methods``). A name the caller may not use is one that does not
exist (404), as another tenant's session is."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ..core.config import AppConfig
from ..core.errors import OPENAI_TYPES, RESPONSES, documented

MODELS = "/v1/models"
OWNER = "specagent-ray"


class ServedModel(BaseModel):
    """One model name this server serves (OpenAI's ``Model``)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ServedModels(BaseModel):
    """The model names the caller may use (OpenAI's list of models)."""

    object: Literal["list"] = "list"
    data: list[ServedModel]


@dataclass(frozen=True)
class ModelTerms:
    """What ``/v1/models`` lists: ``methods`` (the profile's), ``aliases`` (name -> method) and the methods
    each named tenant may use (``tenants``; a tenant not in it may use every method). ``created``: when
    this server's list was made (Unix seconds), every model's ``created``."""

    methods: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    tenants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    created: int = field(default_factory=lambda: int(time.time()))

    @classmethod
    def of(cls, cfg: AppConfig) -> ModelTerms:
        return cls(tuple(cfg.methods), dict(cfg.gateway.model_aliases),
                   {name: t.methods for name, t in cfg.tenants.items() if t.methods is not None})

    def names(self, tenant: str) -> list[str]:
        """The names ``tenant`` may use: each method it may ask for, then each alias of one."""
        allowed = [m for m in self.methods if m in self.tenants.get(tenant, self.methods)]
        return [*allowed, *(a for a, m in self.aliases.items() if m in allowed and a not in allowed)]

    def card(self, name: str) -> dict[str, Any]:
        return ServedModel(id=name, created=self.created, owned_by=OWNER).model_dump()


def mount_models(app: FastAPI, tenant: Any, terms: ModelTerms) -> None:
    """Add the two routes to ``app``; ``tenant``: the gateway's dependency for the caller's tenant."""
    # Their errors are in OpenAI's shape where the gateway's handlers answer /v1/models so (errors.RESPONSES)
    body = "OpenAIError" if MODELS.startswith(RESPONSES) else "ErrorDetail"
    keyed = documented(401, 429, 500, 503, body_schema=body)

    @app.get(MODELS, operation_id="list_models", response_model=ServedModels, responses=keyed)
    async def list_models(who: str = tenant) -> dict[str, Any]:
        """The model names this key may send: the profile's methods and their aliases."""
        return {"object": "list", "data": [terms.card(n) for n in terms.names(who)]}

    @app.get(MODELS + "/{model}", operation_id="get_model", response_model=ServedModel,
             responses={**keyed, **documented(404, body_schema="OpenAIError")})
    async def get_model(model: str, who: str = tenant) -> Any:
        """One model name this key may send; 404 for any other."""
        if model not in terms.names(who):
            return not_found(f"The model '{model}' does not exist or you do not have access to it.")
        return terms.card(model)


def not_found(message: str) -> JSONResponse:
    """A 404 in OpenAI's error shape, as its models route answers an unknown model."""
    error = {"message": message, "type": OPENAI_TYPES[404], "param": "model", "code": "model_not_found"}
    return JSONResponse({"error": error}, status_code=404)
