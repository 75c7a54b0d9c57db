"""Simulated engines that batch like GPUs: a sim replica's call takes the cost model's time at its batch.

``latency.model: roofline`` in a sim profile. Each request of a batch gets a call shape from the planner's
token model (``costs/controller.TokenModel``) by its committed steps: a draft prompt is H plus the block
so far (all but the newest step cached), a verify prompt is H (cached) plus the block, a strong step's
prompt is H (all but the newest step cached); decode is a step's or a verdict's tokens. The replica's
batch is its requests in flight, this batch included, from every coordinator. A batch takes the longest
of its calls' latencies at that batch (``planner.call_at_batch``, the planner's own batch term), slept
times ``time_scale``. The replica meters what it served: calls, the batch each ran at, and ESTIMATED
GPU-seconds and HBM bytes (each call's share of the passes it rode in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ..costs.controller import TokenModel
from ..costs.planner import CallShape, Engine, Share, call_at_batch

Kind = Literal["draft", "step", "verify"]


class Roofline:
    """One replica's ESTIMATED call times. Guarantees: a batch's time never falls as the batch grows at the
    same calls (the cost model's pass time rises with the batch); ``meter`` sums every call timed."""

    def __init__(self, role: str, hardware: Any, tokens: TokenModel = TokenModel()):
        r = hardware.deployments()["strong" if role == "verifier" else "weak"]
        self.engine, self.tokens = Engine(r.spec, r.gpu, r.n_gpus), tokens
        self.in_flight = 0
        self.meter = {"calls": 0, "batch_sum": 0.0, "gpu_s": 0.0, "hbm": 0.0, "busy_s": 0.0}

    def shape(self, kind: Kind, steps: int, drafted: int) -> CallShape:
        t = self.tokens
        context = t.system + t.new * steps
        if kind == "verify":
            return CallShape(context + t.new * drafted, context, t.verdict)
        prompt = context + t.new * drafted
        return CallShape(prompt, max(0.0, prompt - t.new), t.step)

    def batch_seconds(self, kind: Kind, requests: Sequence[Any]) -> float:
        """The batch's ESTIMATED time at the replica's batch (``in_flight`` must already count it)."""
        batch = max(1, self.in_flight)
        longest = 0.0
        for r in requests:
            share: Share = call_at_batch(self.engine, self.shape(kind, len(r.steps), len(r.draft)), batch)
            longest = max(longest, share.latency_s)
            self.meter["calls"] += 1
            self.meter["batch_sum"] += batch
            self.meter["gpu_s"] += share.gpu_s
            self.meter["hbm"] += share.hbm
        self.meter["busy_s"] += longest
        return longest
