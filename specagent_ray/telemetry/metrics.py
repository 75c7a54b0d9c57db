"""Protocol metrics, exported through Ray's metrics agent on Ray's Prometheus metrics port.

Names get Ray's ``ray_`` prefix on export, e.g. ``ray_specagent_accepted_prefix_bucket``. Create
``ProtocolMetrics`` inside a Ray driver, actor or Serve replica (after ``ray.init``); the recording
calls are cheap and never raise into the serving path.

The per-step updates (Algorithm 1's events, reviewed steps, accepted prefixes, engine waits, batch
sizes) are buffered: counter increments add up per series, observations queue, and ``flush()`` hands
them to Ray (the coordinator flushes once a second). Each Ray record call costs the caller's CPU; a
second's events of one kind cost one. Until a flush, Prometheus does not see them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ..costs.ledger import decoding
from ..protocol.interfaces import CallRecord
from ..protocol.types import Trajectory

PREFIX_BOUNDS = [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 8.5, 12.5]
CALL_BOUNDS = [0.5, 1.5, 2.5, 4.5, 8.5, 16.5, 32.5, 64.5]
LATENCY_BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
BATCH_BOUNDS = [1.5, 2.5, 4.5, 8.5, 16.5, 32.5, 64.5, 128.5, 256.5]
SHARE_BOUNDS = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99]
GAP_BOUNDS = [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]  # Ray's histograms take positive bounds only
MAX_BUFFERED = 50_000  # observations held before a flush is forced (a loop that stopped flushing)
Tags = tuple[tuple[str, str], ...]


def tenant_label(owner: str, named: frozenset[str]) -> str:
    """A metrics label's tenant: a configured tenant's name, everyone else ``other`` (bounded cardinality:
    one series set per named tenant, whatever the number of keys)."""
    return owner if owner in named else "other"


class ProtocolMetrics:
    """Accepted-prefix length, strong calls per session, verify latency, verifier batch size, fallbacks,
    and the engines' prefix cache by role: prompt tokens, cached tokens delivered and predicted (counters),
    and each finished session's delivered share and its gap to the predicted one (histograms)."""

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
        counter = lambda name, what, *tags: metrics.Counter(name, description=what, tag_keys=tags)  # noqa: E731
        self.reviewed_steps = counter("specagent_reviewed_steps_total", "Drafted steps the verifier reviewed, by "
                                      "verdict: the accepted prefix (accepted) and the rest of the block "
                                      "(rejected).", "method", "verdict")
        self.strong_calls_total = counter("specagent_strong_calls_total", "Strong-model calls of finished sessions "
                                          "(prefills ahead of a verify apart).", "method")
        self.events = counter("specagent_protocol_events_total", "Algorithm 1's events by kind: accepted, rejected, "
                              "repairs, malformed output, invalid actions, tool errors, verifier fallbacks.",
                              "method", "kind")
        self.session_steps = counter("specagent_session_steps_total", "Committed agent steps of finished sessions: "
                                     "the strong calls Strong-only would have made for them.", "method")
        self.engine_wait = metrics.Histogram(
            "specagent_engine_wait_seconds", description="An engine request's time from asked to answered, by "
            "kind (serve/engines/priority.py); write: a staged write's verify or repair (measured).",
            boundaries=LATENCY_BOUNDS, tag_keys=("kind",))
        tokens = lambda name, what: metrics.Counter(name, description=what, tag_keys=("role",))
        self.prompt_tokens = tokens("specagent_prompt_tokens_total", "Prompt tokens of model calls (measured).")
        self.cached_tokens = tokens("specagent_cached_prompt_tokens_total",
                                    "Prompt tokens the engines served from their prefix cache (delivered).")
        self.predicted_tokens = tokens("specagent_predicted_cached_tokens_total", "Prompt tokens the prompt "
                                       "layout predicts cached: shared with the session's previous prompt.")
        self.session_share = metrics.Histogram(
            "specagent_session_cached_share", description="A finished session's delivered cached share of "
            "its prompt tokens.", boundaries=SHARE_BOUNDS, tag_keys=("role",))
        tenant = lambda name, what, *tags: metrics.Counter(name, description=what, tag_keys=("tenant", *tags))
        self.tenant_tokens = tenant("specagent_tenant_tokens_total", "A tenant's tokens by role and kind (prompt, "
                                    "cached, decode), counted when its sessions end (measured).", "role", "kind")
        self.tenant_strong_calls = tenant("specagent_tenant_strong_calls_total", "A tenant's strong-model calls "
                                          "(prefills ahead of a verify apart), counted when its sessions end.")
        self.tenant_gpu_seconds = tenant("specagent_tenant_gpu_seconds_total", "A tenant's GPU-seconds, ESTIMATED by "
                                         "the cost model on the profile's hardware, counted when its sessions end.")
        self.tenant_sessions = tenant("specagent_tenant_sessions_total", "A tenant's sessions ended, by status.",
                                      "status")
        self.session_gap = metrics.Histogram(
            "specagent_session_cache_gap", description="A finished session's predicted minus delivered cached "
            "share where positive: cache the layout promised and the engines did not give (0 where they gave "
            "more, from prefixes shared across sessions).",
            boundaries=GAP_BOUNDS, tag_keys=("role",))
        self._counts: Counter[tuple[Any, Tags]] = Counter()
        self._observed: list[tuple[Any, float, Tags]] = []

    def _inc(self, counter: Any, n: float, tags: dict[str, str]) -> None:
        self._counts[(counter, tuple(tags.items()))] += n

    def _observe(self, histogram: Any, value: float, tags: dict[str, str] | None = None) -> None:
        self._observed.append((histogram, value, tuple(tags.items()) if tags else ()))
        if len(self._observed) >= MAX_BUFFERED:
            self.flush()

    def flush(self) -> None:
        """Hand what was buffered since the last flush to Ray: one increment per counter series, then
        every observation in the order it was made."""
        counts, observed, self._counts, self._observed = self._counts, self._observed, Counter(), []
        for (counter, tags), n in counts.items():
            if n > 0:  # Ray's Counter.inc refuses 0
                counter.inc(n, tags=dict(tags))
        for histogram, value, tags in observed:
            histogram.observe(value, tags=dict(tags) if tags else None)

    def observe_session(self, method: str, trajectory: Trajectory, calls: Sequence[CallRecord]) -> None:
        """A session run in-process: its events, then its end."""
        for event in trajectory.events:
            self.observe_event(method, event.kind, event.detail)
        self.observe_finished(method, calls, len(trajectory.steps))

    def observe_event(self, method: str, kind: str, detail: str) -> None:
        """One of Algorithm 1's events; an ``accepted`` one ("j/n") is a reviewed block's verdict. A detail
        that is not "j/n" counts the event and nothing else (the serving path never sees a raise)."""
        self._inc(self.events, 1, {"method": method, "kind": kind})
        if kind == "accepted":
            j, _, n = detail.partition("/")
            if not (j.isdigit() and n.isdigit() and int(j) <= int(n)):
                return
            self._observe(self.accepted_prefix, int(j), {"method": method})
            for verdict, count in (("accepted", int(j)), ("rejected", int(n) - int(j))):
                self._inc(self.reviewed_steps, count, {"method": method, "verdict": verdict})
        elif kind == "verifier_fallback":
            self.count_fallback("verifier")

    def observe_cache(self, calls: Iterable[CallRecord]) -> None:
        """One finished session's calls: token counters and its shares, per role."""
        sums: dict[str, list[int]] = {}
        for call in calls:
            u, total = call.usage, sums.setdefault(call.role, [0, 0, 0])
            total[0] += u.prompt_tokens
            total[1] += u.cached_prompt_tokens
            total[2] += u.predicted_cached_tokens
        for role, (prompt, cached, predicted) in sums.items():
            tags = {"role": role}
            for counter, n in ((self.prompt_tokens, prompt), (self.cached_tokens, cached),
                               (self.predicted_tokens, predicted)):
                self._inc(counter, n, tags)  # a series that sums to 0 is left out at the flush
            if prompt:
                self._observe(self.session_share, cached / prompt, tags)
                self._observe(self.session_gap, max(0.0, (predicted - cached) / prompt), tags)

    def observe_finished(self, method: str, calls: Sequence[CallRecord], steps: int) -> None:
        """A session's end: strong calls (a prefill ahead decodes nothing: not one), verify latencies and
        its committed steps (its cache: ``observe_cache``)."""
        tags = {"method": method}
        strong = decoding(calls)
        for call in strong:
            if call.purpose == "verify":
                self._observe(self.verify_latency, call.wall_s, tags)
        self._observe(self.strong_calls, len(strong), tags)
        self._inc(self.strong_calls_total, len(strong), tags)
        self._inc(self.session_steps, steps, tags)

    def observe_tenant(self, tenant: str, status: str, calls: Sequence[CallRecord], gpu_seconds: float) -> None:
        """A finished session's usage under its tenant's label (``tenant_label``: bounded)."""
        self._inc(self.tenant_sessions, 1, {"tenant": tenant, "status": status})
        tokens: Counter[tuple[str, str]] = Counter()  # (role, kind): one counter update each, not one per call
        for call in calls:
            u = call.usage
            for kind, n in (("prompt", u.prompt_tokens), ("cached", u.cached_prompt_tokens), ("decode", u.decode_tokens)):
                tokens[(call.role, kind)] += n
        for (role, kind), n in tokens.items():
            self._inc(self.tenant_tokens, n, {"tenant": tenant, "role": role, "kind": kind})
        self._inc(self.tenant_strong_calls, len(decoding(calls)), {"tenant": tenant})
        self._inc(self.tenant_gpu_seconds, gpu_seconds, {"tenant": tenant})

    def exported(self) -> set[str]:
        return exported(self)

    def observe_batch(self, size: int) -> None:
        self._observe(self.batch_size, size)

    def observe_wait(self, kind: str, wait_s: float) -> None:
        self._observe(self.engine_wait, wait_s, {"kind": kind})

    def count_fallback(self, kind: str) -> None:
        self._inc(self.fallbacks, 1, {"kind": kind})


def exported(owner: object) -> set[str]:
    """The names an object's metrics have on Prometheus: Ray's ``ray_`` prefix, a histogram's three series."""
    from ray.util import metrics

    names = set()
    for m in (m for m in vars(owner).values() if isinstance(m, metrics.Metric)):
        suffixes = ("_bucket", "_sum", "_count") if isinstance(m, metrics.Histogram) else ("",)
        names.update(f"ray_{m._name}{suffix}" for suffix in suffixes)
    return names


class MeterMetrics:
    """The GPU meter's MEASURED figures on Ray's metrics port, counted as the meter seals its windows (so
    they trail the engines by ``meter.seal_after_s``): GPU-seconds and DRAM bytes by tenant and role, and
    the busy time no request was active in (never charged) by role. Series carry ``_measured`` in their
    names: no panel adds them to the ESTIMATED ones unlabelled."""

    def __init__(self, named: frozenset[str] = frozenset()) -> None:
        from ray.util import metrics

        self.named = named
        self.gpu_seconds = metrics.Counter(
            "specagent_tenant_gpu_seconds_measured_total", description="A tenant's GPU-seconds MEASURED by the "
            "GPU meter (NVML) and charged by token share, by role.", tag_keys=("tenant", "role"))
        self.dram_bytes = metrics.Counter(
            "specagent_tenant_dram_bytes_measured_total", description="A tenant's DRAM bytes MEASURED by the GPU "
            "meter (NVML GPM) and charged by token share, by role.", tag_keys=("tenant", "role"))
        self.unattributed = metrics.Counter(
            "specagent_gpu_seconds_unattributed_measured_total", description="MEASURED busy GPU-seconds in which "
            "no request of the role was active: reported, never charged to a tenant.", tag_keys=("role",))
        self._unattributed: dict[str, float] = {}

    def exported(self) -> set[str]:
        return exported(self)

    def charged(self, charged: Any, unattributed: Any) -> None:
        """What the meter sealed: ``{(tenant, role): Attributed}``, and its running unattributed totals."""
        for (tenant, role), a in charged.items():
            tags = {"tenant": tenant_label(tenant, self.named), "role": role}
            if a.gpu_seconds > 0:
                self.gpu_seconds.inc(a.gpu_seconds, tags=tags)
            if a.dram_bytes:
                self.dram_bytes.inc(a.dram_bytes, tags=tags)
        for role, a in unattributed.items():
            delta = a.gpu_seconds - self._unattributed.get(role, 0.0)
            if delta > 0:
                self.unattributed.inc(delta, tags={"role": role})
                self._unattributed[role] = a.gpu_seconds
