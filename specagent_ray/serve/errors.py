"""Errors the HTTP API turns into 4xx answers. Each carries its status and a one-line message."""

from __future__ import annotations


class ApiError(Exception):
    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class BadRequest(ApiError):
    status = 400


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
