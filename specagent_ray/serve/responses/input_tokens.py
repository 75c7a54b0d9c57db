"""``POST /v1/responses/input_tokens``: how many tokens a request's input is, before it is sent.

What is counted: the request's instructions (system and developer messages among them), its input
(the history rendered as the models' context, then the new input) and its tools' schemas, as one text.
The prompts the protocol builds add the domain's system block, so a response's ``usage.input_tokens``
is larger.

Who counts: where the verifier is a vLLM engine behind Ray Serve LLM (``OpenAIEngines``), its own
tokenizer, through the ingress's ``POST /tokenize``; the answer says ``"counted_by": "verifier"``.
Elsewhere (simulated and scripted engines, or an endpoint without ``/tokenize``, such as a cloud API)
the token model's estimate (``models/tokens.py``, characters per token), ``"counted_by": "estimate"``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ...models.tokens import TokenModel
from ..core.config import Endpoint
from .inputs import context, read, text
from .models import InputTokensBody, MessageItem

log = logging.getLogger(__name__)


def rendered(body: InputTokensBody, history: Sequence[Any] = ()) -> str:
    """The text of what ``body`` gives the models, after ``history`` (a conversation's items so far):
    instructions, context, new input, tool schemas."""
    items = ([MessageItem(role="user", content=body.input)] if isinstance(body.input, str)
             else list(body.input or []))
    reading = read([*history, *items])
    parts = [body.instructions or "", *reading.instructions, context(reading.history) or ""]
    parts += [text(i.content) if isinstance(i, MessageItem) else json.dumps(i.model_dump(mode="json", exclude_none=True))
              for i in reading.new]
    parts += [json.dumps(t, sort_keys=True) for t in body.tools or []]
    return "\n".join(p for p in parts if p)


@dataclass
class TokenCounter:
    """Counts with the verifier's tokenizer where it has one to ask, estimates otherwise (one warning
    when the verifier cannot be asked)."""

    verifier: Endpoint | None = None
    env: Mapping[str, str] | None = None
    tokens: TokenModel = field(default_factory=TokenModel)
    transport: httpx.AsyncBaseTransport | None = None  # tests: a fake engine
    _warned: bool = False

    async def count(self, body: InputTokensBody, history: Sequence[Any] = ()) -> dict[str, Any]:
        prompt = rendered(body, history)
        counted = await self._ask(prompt) if self.verifier is not None else None
        if counted is None:
            return {"object": "response.input_tokens", "counted_by": "estimate",
                    "input_tokens": int(len(prompt) / self.tokens.chars_per_token) + 1}
        return {"object": "response.input_tokens", "counted_by": "verifier", "input_tokens": counted}

    async def _ask(self, prompt: str) -> int | None:
        assert self.verifier is not None
        env = os.environ if self.env is None else self.env
        key = env.get(self.verifier.api_key_env, "") if self.verifier.api_key_env else "EMPTY"
        url = self.verifier.url.rstrip("/").removesuffix("/v1") + "/tokenize"
        try:
            async with httpx.AsyncClient(timeout=30.0, transport=self.transport) as client:
                r = await client.post(url, json={"model": self.verifier.model, "prompt": prompt},
                                      headers={"Authorization": f"Bearer {key}"})
                r.raise_for_status()
                return int(r.json()["count"])
        except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
            if not self._warned:
                self._warned = True
                log.warning("the verifier at %s counts no tokens (%s: %s); input_tokens answers the token "
                            "model's estimate", url, type(exc).__name__, exc)
            return None
