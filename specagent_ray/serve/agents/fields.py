"""Forward-compatible request bodies, for every wire: a field that a published specification's newer
version or a client adds, and this server does not know, is taken and ignored, noted by name, logged
once per process, and named in a response header (vLLM's rule), or refused where the profile is
strict (``gateway.strict_fields``). The Responses, Chat Completions and Messages wires' models derive
from ``Spec``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from ..core.errors import BadRequest

log = logging.getLogger(__name__)
IGNORED, DROPPED = "x-specagent-ignored-fields", "x-specagent-dropped-tools"
SHOWN, LONGEST = 32, 64  # names a header lists (the rest are counted), and the characters it shows of one
LOGGED = 1000  # distinct ignored field names logged per process; then one line says no more are
_logged: set[str] = set()
NOTICES = {IGNORED: {"description": "the request's fields this server does not know, ignored (dotted paths, "
                     "percent-encoded, comma-separated); absent where there are none", "schema": {"type": "string"}},
           DROPPED: {"description": "the types of the request's tools this server does not host, dropped "
                     "(comma-separated); absent where there are none", "schema": {"type": "string"}}}


class Spec(BaseModel):
    """A shape a specification owns: its fields, JSON types only. A field it lacks is dropped, and its
    name kept (``unknown_fields``): nothing this server does reads it."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)
    _unknown: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _note_unknown(cls, data: Any, handler: Any) -> Any:
        model = handler(data)
        if isinstance(data, dict):
            known = {f.alias or name for name, f in cls.model_fields.items()}
            model._unknown = tuple(sorted(str(k) for k in data if k not in known))
        return model


def unknown_fields(model: BaseModel, prefix: str = "") -> set[str]:
    """The fields ``model`` was given that it does not know, with those of the models in it, as dotted
    paths by JSON name without list positions (``messages.cache_control``)."""
    out = {prefix + name for name in getattr(model, "_unknown", ())}
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        for v in value if isinstance(value, list | tuple) else (value,):
            if isinstance(v, Spec):
                out |= unknown_fields(v, f"{prefix}{info.alias or name}.")
    return out


def ignored(body: BaseModel, strict: bool, more: Sequence[str] = ()) -> list[str]:
    """The fields of ``body`` this server does not know (``unknown_fields``, and ``more`` found elsewhere),
    sorted. Nothing reads them; ``strict``: the first is refused instead (400 unknown_parameter)."""
    found = sorted(unknown_fields(body) | set(more))
    if found and strict:
        raise BadRequest(f"unknown parameter: {found[0]}", found[0], "unknown_parameter")
    return found


def noticed(ignored: Sequence[str], dropped: Sequence[str] = (), api: str = "an agent API") -> dict[str, str]:
    """The headers that name a request's ignored fields (``IGNORED``: dotted paths) and the types of the
    tools it dropped (``DROPPED``), none where there are none. Each ignored name is logged once per
    process (a warning: a client sends something this server does not apply); a name is cut at ``LONGEST``
    characters (a client's name is any text, of any length)."""
    ignored = [n if len(n) <= LONGEST else n[:LONGEST] + "..." for n in ignored]
    for name in ignored:
        if name in _logged or len(_logged) > LOGGED:
            continue
        _logged.add(name)
        if len(_logged) > LOGGED:
            log.warning("over %s distinct ignored request fields: no more are logged", LOGGED)
        else:
            log.warning("ignored a request field of %s that this server does not know: %a (strict profiles "
                        "refuse it: gateway.strict_fields)", api, name)
    return {header: _listed(names) for header, names in ((IGNORED, ignored), (DROPPED, dropped)) if names}


def _listed(names: Sequence[str]) -> str:
    """``names`` as one header value: each percent-encoded (a client's name is any text), the first
    ``SHOWN``, then how many more."""
    shown = [quote(n, safe="._-$") for n in names[:SHOWN]]
    return ",".join(shown + ([f"(+{len(names) - SHOWN} more)"] if len(names) > SHOWN else []))


def publish_models(app: Any, components: Sequence[str], names: Sequence[str]) -> None:
    """Make ``app.openapi()`` publish the ``model`` of each of ``components`` as one of ``names`` (the
    methods and aliases this server serves): a body the published schema allows is one the server takes."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        spec = default()
        schemas = spec.get("components", {}).get("schemas", {})
        for name in components:
            field = schemas.get(name, {}).get("properties", {}).get("model")
            if field is not None:
                field["enum"] = list(names)
        return spec

    app.openapi = openapi


def validated(model: type[BaseModel], **given: Any) -> Any:
    """``model(**given)``, a session-side body built from a wire's request; a validation error is a 400
    that names the field and the problem (``code: invalid_value``)."""
    try:
        return model(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or model.__name__
        raise BadRequest(f"{model.__name__.lower()}: {where}: {first['msg']}", where, "invalid_value") from None
