"""What the Responses API's routes share besides their handlers: the documented error statuses, the
error answer in the OpenAI shape, the response-id path converter, the event-stream response, the OpenAPI
links between the routes, and the headers that name what a request asked and the server set aside."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import TypeAdapter
from starlette.convertors import StringConvertor, register_url_convertor

from ..core.errors import documented, error_body
from .models import InputItem

log = logging.getLogger(__name__)
KEYED = (401, 429, 500, 503)
IGNORED, DROPPED = "x-specagent-ignored-fields", "x-specagent-dropped-tools"
SHOWN, LONGEST = 32, 64  # names a header lists (the rest are counted), and the characters it shows of one
LOGGED = 1000  # distinct ignored field names logged per process; then one line says no more are
_logged: set[str] = set()
NOTICES = {IGNORED: {"description": "the request's fields this server does not know, ignored (dotted paths, "
                     "percent-encoded, comma-separated); absent where there are none", "schema": {"type": "string"}},
           DROPPED: {"description": "the types of the request's tools this server does not host, dropped "
                     "(comma-separated); absent where there are none", "schema": {"type": "string"}}}
RESPONSE = "$response.body#/id"
EVENT = {"type": "object", "required": ["data", "event"], "properties": {  # one server-sent event of a stream
    "data": {"type": "string", "contentMediaType": "application/json", "description": "the event, with its "
             "type and sequence_number"}, "event": {"type": "string", "description": "the event's type"}}}
ITEM: TypeAdapter[Any] = TypeAdapter(InputItem)
LINKS = {name: {"operationId": op, "parameters": {"rid": RESPONSE}} for name, op in (
    ("GetResponse", "get_response"), ("CancelResponse", "cancel_response"), ("DeleteResponse", "delete_response"),
    ("InputItems", "list_input_items"))}


class ResponseId(StringConvertor):
    """A response id in a path: ``resp_...``, so that ``/v1/responses/input_tokens`` is no response's path
    (and its 405 names only its own method)."""

    regex = "resp_[^/]+"


register_url_convertor("rid", ResponseId())


class ResponseEvents(StreamingResponse):
    media_type = "text/event-stream"


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return documented(*KEYED, *statuses, body_schema="OpenAIError")


def error_response(request: Request, status: int, message: str, headers: dict[str, str] | None = None,
                   param: str | None = None, code: str | None = None) -> JSONResponse:
    """An error's answer, its body in the shape of the route's API (``errors.error_body``)."""
    return JSONResponse(error_body(request.url.path, status, message, param, code), status_code=status,
                        headers=headers)


def noticed(ignored: Sequence[str], dropped: Sequence[str] = ()) -> dict[str, str]:
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
            log.warning("ignored a Responses API request field this server does not know: %a (strict "
                        "profiles refuse it: gateway.strict_fields)", name)
    return {header: _listed(names) for header, names in ((IGNORED, ignored), (DROPPED, dropped)) if names}


def _listed(names: Sequence[str]) -> str:
    """``names`` as one header value: each percent-encoded (a client's name is any text), the first
    ``SHOWN``, then how many more."""
    shown = [quote(n, safe="._-$") for n in names[:SHOWN]]
    return ",".join(shown + ([f"(+{len(names) - SHOWN} more)"] if len(names) > SHOWN else []))
