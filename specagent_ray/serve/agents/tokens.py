"""How many tokens a prompt is, before it is sent (each wire renders its request's prompt text).

Who counts: where the verifier is a vLLM engine behind Ray Serve LLM (``OpenAIEngines``), its own
tokenizer, through the ingress's ``POST /tokenize``; the answer says ``"counted_by": "verifier"``.
Elsewhere (simulated and scripted engines, or an endpoint without ``/tokenize``, such as a cloud API)
the token model's estimate (``models/tokens.py``, characters per token), ``"counted_by": "estimate"``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ...models.tokens import TokenModel
from ..core.config import Endpoint

log = logging.getLogger(__name__)


@dataclass
class TokenCounter:
    """Counts with the verifier's tokenizer where it has one to ask, estimates otherwise (one warning
    when the verifier cannot be asked)."""

    verifier: Endpoint | None = None
    env: Mapping[str, str] | None = None
    tokens: TokenModel = field(default_factory=TokenModel)
    transport: httpx.AsyncBaseTransport | None = None  # tests: a fake engine
    _warned: bool = False

    async def count_prompt(self, prompt: str) -> dict[str, Any]:
        """``{"input_tokens": n, "counted_by": "verifier" | "estimate"}`` for ``prompt``."""
        counted = await self._ask(prompt) if self.verifier is not None else None
        if counted is None:
            return {"counted_by": "estimate", "input_tokens": int(len(prompt) / self.tokens.chars_per_token) + 1}
        return {"counted_by": "verifier", "input_tokens": counted}

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
