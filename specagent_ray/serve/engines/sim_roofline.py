"""Simulated engines that batch like GPUs: a sim replica's calls progress at the cost model's pace for the
batch it runs now (continuous batching).

``latency.model: roofline`` in a sim profile. Each request is priced by its answer's tokens (the simulated
models' usage, what the session's ledger records); an answer without usage (an error) by the planner's token
model (``control/controller.TokenModel``) by its committed steps. A call first prefills its uncached prompt
(the roofline of ``planner.call_at_batch``'s prefill: compute or one weight read, plus the collectives),
then decodes its tokens one pass each, where a pass, shared by every sequence in flight, takes the roofline
of the replica's current batch: the weights the batch touches (an MoE's grow with the batch) plus every
decoding sequence's KV, or the batch's FLOPs, whichever is longer, plus the collectives. So a call that runs beside more sequences
slows down while they run, as in vLLM. A replica runs at most its batch cap (``Engine.batch_cap`` for a
session's longest context, ``MAX_CONTEXT``: the KV that fits next to the weights); later calls wait, as
vLLM's do. Estimated seconds pass ``time_scale`` times slower than real ones.

The replica meters what it served: calls, the batch each entered, sequences in flight integrated over real
time (a window's mean batch is its difference over the window's length), and ESTIMATED GPU-seconds (the
engine's GPUs while any call runs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ...control.controller import TokenModel
from ...costs.model import _sum_range, attention_flops_per_context
from ...costs.planner import CallShape, Engine, decode_weight_bytes

Kind = Literal["draft", "step", "verify"]
STEPS = 14  # committed steps of a session whose end sizes the KV a sequence may need (`specagent-ray plan`'s)


def max_context(tokens: TokenModel = TokenModel(), steps: int = STEPS) -> float:
    """The planner's ``Shapes.max_context`` of the token model: system, every step's new tokens, one decode."""
    return tokens.system + tokens.new * steps + tokens.step


@dataclass
class _Call:
    prefill_s: float  # ESTIMATED seconds of prefill left
    tokens: float  # decode tokens left
    context: float  # tokens in the sequence so far
    done: asyncio.Future


class Roofline:
    """One replica's calls under continuous batching. Guarantees: alone, a call takes what
    ``planner.call_at_batch`` says at batch 1 (to the tick); beside others, longer; ``meter`` counts every
    call served and integrates the sequences in flight."""

    def __init__(self, role: str, hardware: Any, time_scale: float = 1.0, tokens: TokenModel = TokenModel(),
                 clock: Callable[[], float] = time.monotonic, tick_s: float = 0.01):
        r = hardware.deployments()[{"verifier": "strong", "mid": "mid"}.get(role, "weak")]
        self.engine, self.tokens, self.clock = Engine(r.spec, r.gpu, r.n_gpus), tokens, clock
        self.time_scale, self.tick_s = time_scale, tick_s
        self.calls: list[_Call] = []
        self.cap = self.engine.batch_cap(max_context(tokens))
        self._room = asyncio.Semaphore(self.cap)
        self.in_flight, self._at = 0, clock()
        self._ticker: asyncio.Task | None = None
        self.meter = {"calls": 0, "batch_sum": 0.0, "gpu_s": 0.0, "seq_s": 0.0}
        spec, g = self.engine.spec, self.engine.gpus
        self._bw, self._peak = self.engine.gpu.hbm_bytes_per_s * g, self.engine.gpu.peak_flops * g
        self._per_pass = self.engine.gpu.collective_s(g) * spec.layers * (4 if spec.is_moe else 2)

    # -- the cost model, per prefill and per decode pass --------------------------------------------------

    def shape(self, kind: Kind, steps: int, drafted: int) -> CallShape:
        t = self.tokens
        context = t.system + t.new * steps
        if kind == "verify":
            return CallShape(context + t.new * drafted, context, t.verdict)
        prompt = context + t.new * drafted
        return CallShape(prompt, max(0.0, prompt - t.new), t.step)

    def prefill_s(self, shape: CallShape) -> float:
        spec, new = self.engine.spec, shape.prompt - shape.cached
        if new <= 0:
            return 0.0
        flops = 2 * spec.active_params * new + attention_flops_per_context(spec) * _sum_range(shape.cached + 1, new)
        weights = (spec.active_params + spec.total_params) * spec.bytes_per_param / 2
        return max(flops / self._peak, weights / self._bw) + self._per_pass

    def pass_s(self, batch: int, contexts: float) -> float:
        """One decode pass of ``batch`` sequences holding ``contexts`` tokens together (ESTIMATED seconds): the
        weights the batch touches and every sequence's KV, or the batch's FLOPs, plus the collectives."""
        spec = self.engine.spec
        memory = (decode_weight_bytes(spec, batch) + spec.kv_bytes_per_token * contexts) / self._bw
        compute = (batch * 2 * spec.active_params + attention_flops_per_context(spec) * contexts) / self._peak
        return max(memory, compute) + self._per_pass

    # -- serving -------------------------------------------------------------------------------------

    async def serve(self, kind: Kind, requests: Sequence[Any], usages: Sequence[Any] = ()) -> None:
        """Run a batch's calls to completion beside whatever else this replica runs."""
        loop = asyncio.get_running_loop()
        calls = []
        for i, r in enumerate(requests):
            u = usages[i] if i < len(usages) else None
            shape = (CallShape(u.prompt_tokens, u.cached_prompt_tokens, u.decode_tokens) if u is not None
                     else self.shape(kind, len(r.steps), len(r.draft)))
            calls.append(_Call(self.prefill_s(shape), shape.decode, shape.prompt, loop.create_future()))
        await asyncio.gather(*(self._one(c) for c in calls))

    async def _one(self, call: _Call) -> None:
        async with self._room:  # past the batch cap a call waits for a sequence to finish
            self.enter(1)
            self.calls.append(call)
            self.meter["calls"] += 1
            self.meter["batch_sum"] += self.in_flight
            if self._ticker is None or self._ticker.done():
                self._ticker = asyncio.get_running_loop().create_task(self._run())
            try:
                await call.done
            finally:
                self.calls.remove(call)
                self.leave(1)

    async def _run(self) -> None:
        last = self.clock()
        while self.calls:
            await asyncio.sleep(self.tick_s)
            now = self.clock()
            self.advance((now - last) / self.time_scale)
            last = now

    def advance(self, dt: float) -> None:
        """Let ``dt`` ESTIMATED seconds pass for every call in flight, at the current batch."""
        live = [c for c in self.calls if not c.done.done()]
        if not live:
            return
        self.meter["gpu_s"] += dt * self.engine.gpus
        decoding = [c for c in live if c.prefill_s <= 0]
        pass_s = self.pass_s(len(live), sum(c.context for c in decoding)) if decoding else 0.0
        for c in live:
            t = dt
            if c.prefill_s > 0:
                spent = min(t, c.prefill_s)
                c.prefill_s -= spent
                t -= spent
            if t > 0 and c.tokens > 0:
                n = min(c.tokens, t / (pass_s or self.pass_s(len(live), c.context)))
                c.tokens -= n
                c.context += n
            if c.prefill_s <= 0 and c.tokens <= 1e-9:
                c.done.set_result(None)

    # -- meters --------------------------------------------------------------------------------------

    def enter(self, n: int) -> None:
        self._tick()
        self.in_flight += n

    def leave(self, n: int) -> None:
        self._tick()
        self.in_flight -= n

    def _tick(self) -> None:
        now = self.clock()
        self.meter["seq_s"] += self.in_flight * (now - self._at)
        self._at = now

    def read(self) -> dict[str, float]:
        self._tick()
        return {**self.meter, "at": self._at}
