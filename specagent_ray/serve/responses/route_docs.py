"""What the Responses API's routes share besides their handlers: the documented error statuses, the
error answer in the OpenAI shape, the response-id path converter, the event-stream response, the OpenAPI
links between the routes, and the headers that name what a request asked and the server set aside."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import TypeAdapter
from starlette.convertors import StringConvertor, register_url_convertor

from ..agents import fields
from ..agents.fields import DROPPED, IGNORED, NOTICES  # noqa: F401 - the routes' notice headers
from ..core.errors import documented, error_body
from .models import InputItem
KEYED = (401, 429, 500, 503)
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
    """The headers naming what a Responses request carried that this server ignored or dropped."""
    return fields.noticed(ignored, dropped, "the Responses API")
