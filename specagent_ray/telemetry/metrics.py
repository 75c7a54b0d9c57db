"""Protocol metrics, exported through Ray's metrics agent on Ray's Prometheus metrics port.

Names get Ray's ``ray_`` prefix on export, e.g. ``ray_specagent_accepted_prefix_bucket``. Create
``ProtocolMetrics`` inside a Ray driver, actor or Serve replica (after ``ray.init``); the recording
calls are cheap and never raise into the serving path.
"""

from __future__ import annotations

from typing import Iterable

from ..protocol.interfaces import CallRecord
from ..protocol.types import Trajectory

PREFIX_BOUNDS = [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 8.5, 12.5]
CALL_BOUNDS = [0.5, 1.5, 2.5, 4.5, 8.5, 16.5, 32.5, 64.5]
LATENCY_BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
BATCH_BOUNDS = [1.5, 2.5, 4.5, 8.5, 16.5, 32.5, 64.5, 128.5, 256.5]


class ProtocolMetrics:
    """Accepted-prefix length, strong calls per session, verify latency, verifier batch size, fallbacks."""

    def __init__(self) -> None:
        from ray.util import metrics

        self.accepted_prefix = metrics.Histogram(
            "specagent_accepted_prefix", description="Accepted prefix j of each reviewed block.",
            boundaries=PREFIX_BOUNDS, tag_keys=("method",))
        self.strong_calls = metrics.Histogram(
            "specagent_strong_calls_per_session", description="Strong-model calls per finished session.",
            boundaries=CALL_BOUNDS, tag_keys=("method",))
        self.verify_latency = metrics.Histogram(
            "specagent_verify_latency_seconds", description="Wall time of one verify call, seconds (measured).",
            boundaries=LATENCY_BOUNDS, tag_keys=("method",))
        self.batch_size = metrics.Histogram(
            "specagent_verifier_batch_size", description="Verify requests submitted together to the verifier.",
            boundaries=BATCH_BOUNDS)
        self.fallbacks = metrics.Counter(
            "specagent_fallbacks_total", description="Verifier failures that fell back to a strong step.",
            tag_keys=("kind",))

    def observe_session(self, method: str, trajectory: Trajectory, calls: Iterable[CallRecord]) -> None:
        tags = {"method": method}
        for event in trajectory.events:
            if event.kind == "accepted":
                self.accepted_prefix.observe(int(event.detail.split("/")[0]), tags=tags)
        strong = 0
        for call in calls:
            if call.role == "strong":
                strong += 1
                if call.purpose == "verify":
                    self.verify_latency.observe(call.wall_s, tags=tags)
        self.strong_calls.observe(strong, tags=tags)

    def observe_batch(self, size: int) -> None:
        self.batch_size.observe(size)

    def count_fallback(self, kind: str) -> None:
        self.fallbacks.inc(1, tags={"kind": kind})
