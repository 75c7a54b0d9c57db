"""Token model for simulated calls (SIMULATED figures that feed the ESTIMATED cost model).

Prompt sizes come from the real text: the domain's policy and tool schemas, and each step's
rendered action and observation, at ``chars_per_token``. Decode sizes are a reasoning budget plus the
action itself. ``PrefixCache`` applies the paper's accounting: a prompt prefix is prefilled once per
session and model, later calls that repeat it get it from cache.

The simulated world (``sim/``) counts its calls with it; the served wires estimate a prompt's tokens with
its ``chars_per_token`` where no tokenizer can be asked (``serve/agents/tokens.py``): so it lives here,
beside the real backends, and ``sim/`` imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..protocol.types import Action, History, Step, Usage


def _tokens(chars: int, per_token: float) -> int:
    return int(chars / per_token) + 1


@dataclass
class PrefixCache:
    """One model's prefix cache within one session: remembers the previous prompt's steps and
    serves the longest common prefix (system block included) from cache."""

    last: tuple[Step, ...] | None = None

    def hit(self, tokens: "TokenModel", steps: tuple[Step, ...]) -> int:
        if self.last is None:
            self.last = steps
            return 0
        k = 0
        for a, b in zip(self.last, steps, strict=False):
            if a is not b:
                break
            k += 1
        self.last = steps
        return tokens.system_tokens + tokens.steps_tokens(steps[:k])


@dataclass
class TokenModel:
    """Sizes of prompts and outputs. ``reasoning`` is the decode budget spent before an action.

    Calibrated on the paper's airline table (thinking mode): Strong-only reads about 24 TB of HBM per
    strong call (333 TB / 13.8 calls), i.e. about 700 decoded tokens per step at 34 GB of active bf16
    weights per token; a verdict reasons over the whole block before answering (``verdict_tokens``).
    The same table puts SpecAgent at 148 TB over 3.1 strong calls, about 48 TB per call: a verdict
    (with its fused repair) decodes about two steps' worth, 1,400 tokens.
    """

    system_tokens: int = 2500
    reasoning: dict[str, int] = field(default_factory=lambda: {"weak": 700, "strong": 700})
    verdict_tokens: int = 1400
    verdict_tokens_per_step: int = 6
    chars_per_token: float = 4.0

    def action_tokens(self, action: Action) -> int:
        return _tokens(len(action.describe()), self.chars_per_token) + 4

    def step_tokens(self, step: Step) -> int:
        obs = step.observation.content if step.observation is not None else ""
        return self.action_tokens(step.action) + _tokens(len(obs), self.chars_per_token)

    def steps_tokens(self, steps: Sequence[Step]) -> int:
        return sum(self.step_tokens(s) for s in steps)

    def step_usage(self, cache: PrefixCache, history: History, draft: Sequence[Step], action: Action,
                   role: str) -> Usage:
        steps = history.steps + tuple(draft)
        prompt = self.system_tokens + self.steps_tokens(steps)
        decode = self.reasoning.get(role, 700) + self.action_tokens(action)
        hit = min(cache.hit(self, steps), prompt)
        return Usage(prompt, hit, decode, hit)  # the layout's prediction is the model: delivered as predicted

    def verify_usage(self, cache: PrefixCache, history: History, block: Sequence[Step],
                     repair: Action | None) -> Usage:
        steps = history.steps + tuple(block)
        prompt = self.system_tokens + self.steps_tokens(steps)
        decode = self.verdict_tokens + self.verdict_tokens_per_step * len(block)
        if repair is not None:
            decode += self.action_tokens(repair)
        hit = min(cache.hit(self, steps), prompt)
        return Usage(prompt, hit, decode, hit)
