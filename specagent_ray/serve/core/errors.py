"""Errors the HTTP API turns into 4xx answers. Each carries its status and a one-line message.

``WHEN`` is the API's whole list of error statuses; ``documented`` gives a route's OpenAPI entries for its
own, each with its body's shape and the headers it always carries (Retry-After, WWW-Authenticate)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """``param`` and ``code``: the request field at fault and a stable code (OpenAI's error shape shows
    both on the Responses API's routes)."""

    status = 400

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    """No API key, or a wrong one; answered with ``WWW-Authenticate: Bearer``."""

    status = 401

    def __init__(self) -> None:
        super().__init__("missing or wrong API key: send 'Authorization: Bearer <key>' or 'X-API-Key'")


class Forbidden(ApiError):
    """The key is valid, but this server does not let anyone do that (a method outside the profile's list)."""

    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class Overloaded(ApiError):
    """Admission control said no; the client should retry after ``retry_after_s``."""

    status = 429

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ServiceUnavailable(ApiError):
    """This coordinator cannot serve the call now (its session log is unavailable, or it was fenced)."""

    status = 503
    retry_after_s = 5


def unwrap(exc: BaseException) -> BaseException:
    """The remote side's own error inside a Ray task error (whose text carries a remote traceback)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


# Every error status the API answers, with when. Each body is ``{"detail": "<one line>"}`` except 422,
# whose ``detail`` is pydantic's list of failed fields (FastAPI's ``HTTPValidationError``).
WHEN = {
    400: "a body that is not text (it cannot be parsed), or a create that fits the schema's shape but not "
         "this server: a task_id its tool source lacks, or a source, user or tool combination it does not take",
    401: "no API key, or a wrong one",
    403: "the key may not do this: a method outside the profile's list, or /v1/stats without an operator key",
    404: "no such session for this key (another tenant's session is answered the same), or no such "
         "pending tool call",
    409: "the session takes no more input (finished, or not a client-user session), an Idempotency-Key "
         "reused for a different request, or a tool source that is unavailable now",
    413: "the request body is over this route's cap (gateway.max_body_bytes, derived from the verifier's "
         "context window, for the conversation routes; gateway.small_body_bytes for the others)",
    429: "over this key's request rate, or over an admission limit (sessions, queued engine requests, a "
         "session's unanswered messages); retry after Retry-After seconds",
    500: "the server failed unexpectedly (logged on the server; the body never carries a trace)",
    503: "the coordinator is unavailable past the gateway's patience, fenced, or its session log did not "
         "store the request in time; retry after Retry-After seconds",
}
RETRY_AFTER = {"description": "seconds to wait before retrying", "required": True,
               "schema": {"type": "integer", "minimum": 1}}
HEADERS = {401: {"WWW-Authenticate": {"description": "the scheme to authenticate with (Bearer)", "required": True,
                                      "schema": {"type": "string"}}},
           429: {"Retry-After": RETRY_AFTER}, 503: {"Retry-After": RETRY_AFTER}}


def documented(*statuses: int, body_schema: str = "ErrorDetail") -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses`` for these error statuses: each says when it happens, that its body is a JSON
    ``body_schema`` (a component the gateway's schema defines), and the headers it always carries."""
    body = {"application/json": {"schema": {"$ref": f"#/components/schemas/{body_schema}"}}}
    return {status: {"description": WHEN[status], "content": body,
                     **({"headers": HEADERS[status]} if status in HEADERS else {})} for status in sorted(statuses)}


RESPONSES = ("/v1/responses", "/v1/conversations", "/v1/models", "/v1/chat/completions",  # OpenAI's APIs here:
             "/v1/messages")  # errors in OpenAI's shape; Anthropic's Messages API in Anthropic's (``MESSAGES``)
MESSAGES = "/v1/messages"
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
                   429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}
OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 409: "conflict_error", 413: "invalid_request_error", 429: "rate_limit_error"}
CODES = {400: "invalid_request", 401: "invalid_api_key", 403: "permission_denied", 404: "not_found",
         405: "method_not_allowed", 409: "conflict", 413: "request_too_large", 422: "invalid_request",
         429: "rate_limit_exceeded", 500: "server_error", 503: "service_unavailable"}  # an error's code where it names none more precise


def error_body(path: str, status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """An error's body: ``{"detail": ...}`` on the sessions API; Anthropic's ``{"type": "error", "error":
    {...}}`` on the Messages API; OpenAI's ``{"error": {...}}`` on its APIs' routes, whose clients (the
    OpenAI SDK) read the message from there, its ``code`` always a string (the status's own where the
    error names none)."""
    if not path.startswith(RESPONSES):
        return {"detail": message}
    if path.startswith(MESSAGES):  # Anthropic's shape: its SDK reads error.type and error.message
        return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    return {"error": {"message": message, "type": OPENAI_TYPES.get(status, "server_error"), "param": param,
                      "code": code or CODES.get(status, "server_error")}}


OPENAI_ERROR = {"title": "OpenAIError", "type": "object", "required": ["error"], "description": "An error on the "
                "Responses API's routes, in OpenAI's shape (the SDK reads its message)", "properties": {"error": {
                    "type": "object", "required": ["message", "type"], "properties": {
                        "message": {"type": "string"}, "type": {"type": "string"},
                        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}


def error_event(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """A stream's ``error`` event: Open Responses nests the error, OpenAI's SDK reads it at the top."""
    error = {"type": "server_error", "code": code, "message": message, "param": param}
    return {"type": "error", "code": code, "message": message, "param": param, "error": error}
