"""A policy and a verifier backed by a real model behind any ``Backend`` (see ``models/backend.py``).

Both ask for structured output (the action or verdict JSON schema), parse it with ``models/parsing``,
and handle malformed output the same way: one retry, whose prompt is the first prompt plus the bad
answer and the reason it was refused (so it is still a prefix-cache hit); if the retry is malformed
too, ``MalformedReply`` (a ``MalformedOutput``) is raised with both reasons. The protocol loop then turns
it into a strong step (policy) or a full rejection (verifier) and records the reason. Parsed output is
the only output that leaves this module, so malformed output is never executed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from ..protocol.interfaces import MalformedOutput
from ..protocol.types import History, Proposal, Review, Step, Usage
from ..telemetry.tracing import traceparent_headers
from .backend import Backend
from .parsing import parse_action, parse_review, parse_verdict
from .prompts import ChatMessage, PromptConfig, Prompts, common_prefix, retry_messages, serialize

T = TypeVar("T")
HeaderSource = Callable[[], Mapping[str, str]]
# A request's engine priority, asked afresh for each request (a retry is a new request): None sends none.
PrioritySource = Callable[[], "int | None"]


class MalformedReply(MalformedOutput):
    """Malformed output after the one retry. ``usage`` sums both calls, so a ledger that reads it
    can still count the tokens spent."""

    def __init__(self, message: str, usage: Usage):
        super().__init__(message)
        self.usage = usage


def add(a: Usage, b: Usage) -> Usage:
    return Usage(a.prompt_tokens + b.prompt_tokens, a.cached_prompt_tokens + b.cached_prompt_tokens,
                 a.decode_tokens + b.decode_tokens, a.predicted_cached_tokens + b.predicted_cached_tokens)


class PromptTrail:
    """The last prompt one session sent one engine. ``predicted`` is what the prompt layout says the
    engine's prefix cache should deliver for the next one: the share of its text that the previous
    prompt already began with, in the engine's own token count."""

    def __init__(self) -> None:
        self.last = ""

    def predicted(self, messages: Sequence[ChatMessage], prompt_tokens: int) -> int:
        text, last = serialize(messages), self.last
        self.last = text
        return prompt_tokens * common_prefix(text, last) // len(text) if text else 0


async def ask(backend: Backend, messages: Sequence[ChatMessage], schema: Mapping[str, Any], max_tokens: int,
              temperature: float, headers: HeaderSource | None,
              parse: Callable[[str, str | None], T], priority: PrioritySource | None = None,
              trail: PromptTrail | None = None, top_p: float | None = None) -> tuple[T, Usage]:
    """Call, parse, and on ``MalformedOutput`` retry exactly once; each call's priority is ``priority()``
    at the time. Returns the value and the summed usage; with a ``trail``, each call's predicted cached
    tokens are in it. ``top_p`` is sent only when set (the engine's default otherwise)."""
    total = Usage()
    reasons: list[str] = []
    prompt = list(messages)
    nucleus = {"top_p": top_p} if top_p is not None else {}
    for attempt in range(2):
        completion = await backend.complete(prompt, schema, max_tokens, temperature,
                                            dict(headers()) if headers else None,
                                            priority=priority() if priority else None, **nucleus)
        usage = completion.usage
        if trail is not None:
            usage = replace(usage, predicted_cached_tokens=trail.predicted(prompt, usage.prompt_tokens))
        total = add(total, usage)
        try:
            return parse(completion.text, completion.finish_reason), total
        except MalformedOutput as exc:
            reasons.append(str(exc))
            prompt = retry_messages(messages, completion.text, str(exc))
    raise MalformedReply(f"{reasons[0]}; after one retry: {reasons[1]}", total)


class _ModelCaller:
    """What a policy and a verifier share: the backend, the prompts and the sampling settings (greedy by
    default; ``top_p`` None leaves the engine's own)."""

    default_max_tokens = 1024

    def __init__(self, backend: Backend, config: PromptConfig, tool_schemas: Mapping[str, Any],
                 max_tokens: int | None = None, temperature: float = 0.0,
                 headers: HeaderSource | None = traceparent_headers, trail: PromptTrail | None = None,
                 top_p: float | None = None):
        self.backend = backend
        self.trail = trail  # the engine's prompts of this session, shared by the callers on one engine
        self.prompts = Prompts(config, tool_schemas)
        self.max_tokens = max_tokens or self.default_max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.headers = headers


class LLMPolicy(_ModelCaller):
    """Implements ``Policy``: the next action from H + draft, or a repair step from (H, r).

    Guarantees: a returned tool action names one of ``tool_schemas`` and carries an object as
    arguments (schema conformance is the tool adapter's ``valid()``); usage sums every call made,
    the retry included; confidence is 1.0 (self-reported confidence is not read from the model)."""

    async def propose(self, history: History, draft: Sequence[Step] = (), feedback: str | None = None,
                      priority: PrioritySource | None = None) -> Proposal:
        messages = self.prompts.draft(history, draft, feedback)
        names: Collection[str] = self.prompts.tool_names
        parallel, structured = self.prompts.config.parallel_calls, self.prompts.structured
        action, usage = await ask(self.backend, messages, self.prompts.action_schema, self.max_tokens,
                                  self.temperature, self.headers,
                                  lambda text, finish: parse_action(text, names, finish, parallel, structured),
                                  priority, self.trail, self.top_p)
        return Proposal(action, usage, 1.0)


class LLMVerifier(_ModelCaller):
    """Implements ``Verifier``: one call over H + block that decodes only a short verdict ``(j, r, ã)``.

    Guarantees: a returned verdict has ``0 <= j <= n``; a fused repair, if any, names a known tool;
    usage sums every call made, the retry included."""

    default_max_tokens = 512
    criterion = "semantic"  # or "exact": the exact-match ablation's reviewer (``by_exact_match``)

    def for_critical(self) -> LLMVerifier:
        """The same reviewer asked to check a critical staged call argument by argument (a second look)."""
        look = copy.copy(self)
        look.criterion = "critical"
        return look

    def by_exact_match(self) -> LLMVerifier:
        """The same reviewer (backend, prompts, sampling) asked to accept only its own exact steps."""
        exact = copy.copy(self)
        exact.criterion = "exact"
        return exact

    async def verify(self, history: History, block: Sequence[Step],
                     priority: PrioritySource | None = None) -> Review:
        n = len(block)
        names: Collection[str] = self.prompts.tool_names
        parallel, structured = self.prompts.config.parallel_calls, self.prompts.structured
        prompt = self.prompts.verify(history, block, self.criterion)
        if self.prompts.config.confidence:  # the chain's mid verifier: how sure it is, to escalate when not
            (verdict, sure), usage = await ask(
                self.backend, prompt, self.prompts.verdict_schema(n), self.max_tokens, self.temperature, self.headers,
                lambda text, finish: parse_review(text, n, names, finish, parallel, structured), priority,
                self.trail, self.top_p)
            return Review(verdict, usage, sure)
        verdict, usage = await ask(self.backend, prompt, self.prompts.verdict_schema(n),
                                   self.max_tokens, self.temperature, self.headers,
                                   lambda text, finish: parse_verdict(text, n, names, finish, parallel, structured),
                                   priority, self.trail, self.top_p)
        return Review(verdict, usage)
