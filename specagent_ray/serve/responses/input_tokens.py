"""``POST /v1/responses/input_tokens``: how many tokens a request's input is, before it is sent.

What is counted: the request's instructions (system and developer messages among them), its input
(the history rendered as the models' context, then the new input) and its tools' schemas, as one text.
The prompts the protocol builds add the domain's system block, so a response's ``usage.input_tokens``
is larger.

Who counts: ``agents/tokens.py`` (the verifier's tokenizer where it can be asked, else an estimate).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..agents.tokens import TokenCounter as Counter
from .inputs import context, read, text
from .models import InputTokensBody, MessageItem


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


class TokenCounter(Counter):
    """``agents.tokens.TokenCounter``, counting a Responses request (``rendered``)."""

    async def count(self, body: InputTokensBody, history: Sequence[Any] = ()) -> dict[str, Any]:
        return {"object": "response.input_tokens", **await self.count_prompt(rendered(body, history))}
