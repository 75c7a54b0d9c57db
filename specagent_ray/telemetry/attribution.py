"""Per-request attribution of MEASURED GPU time and DRAM traffic, by token share.

vLLM's continuous batching runs every active request through the same forward passes, so a window's GPU
time and DRAM bytes are shared by the requests active in it. A request's share of a window is the tokens it
had processed in that window (prefill + decode) over all tokens processed in it.

Conservation invariant: for every window, the requests' shares plus ``unattributed`` add up to the window's
totals (a window in which no request processed a token goes wholly to ``unattributed``; nothing is dropped).
Pure functions, no clock and no NVML.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Window:
    """One integration window of a sampler: [start, end) in seconds of the sampler's clock.

    ``gpu_seconds``: busy GPU-seconds summed over the sampled devices. ``dram_bytes``: DRAM bytes moved,
    or None when some sampled device could not measure it (never a partial sum presented as the total).
    """

    start: float
    end: float
    gpu_seconds: float
    dram_bytes: float | None

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"window ends ({self.end}) before it starts ({self.start})")
        if self.gpu_seconds < 0 or (self.dram_bytes is not None and self.dram_bytes < 0):
            raise ValueError("window totals must be >= 0")


@dataclass(frozen=True, slots=True)
class Attributed:
    """MEASURED resources charged to one request (or left unattributed), summed over windows.

    ``dram_bytes`` is None if any window that contributed to it had no DRAM measurement. ``tokens`` is the
    number of tokens the shares were computed from (0: nothing was observed, so nothing was measured).
    """

    gpu_seconds: float = 0.0
    dram_bytes: float | None = 0.0
    tokens: float = 0
    windows: int = 0

    def __add__(self, other: Attributed) -> Attributed:
        if not isinstance(other, Attributed):
            return NotImplemented
        dram = None if self.dram_bytes is None or other.dram_bytes is None else self.dram_bytes + other.dram_bytes
        return Attributed(self.gpu_seconds + other.gpu_seconds, dram, self.tokens + other.tokens,
                          self.windows + other.windows)


@dataclass(frozen=True, slots=True)
class Attribution:
    """Result of :func:`attribute`: per-request totals plus what no request was active for.

    Guarantees ``sum(requests) + unattributed == totals`` up to float rounding (each window's last share is
    the window's remainder, so per-window sums are exact to one rounding).
    """

    requests: Mapping[Any, Attributed] = field(default_factory=dict)
    unattributed: Attributed = Attributed()
    totals: Attributed = Attributed()

    def __add__(self, other: Attribution) -> Attribution:
        """Combine attributions from disjoint devices (e.g. two nodes of one tensor-parallel engine)."""
        if not isinstance(other, Attribution):
            return NotImplemented
        merged: dict[str, Attributed] = dict(self.requests)
        for rid, a in other.requests.items():
            merged[rid] = merged[rid] + a if rid in merged else a
        return Attribution(merged, self.unattributed + other.unattributed, self.totals + other.totals)


def _split(window: Window, tokens: Mapping[Any, float]) -> dict[Any, Attributed]:
    active = [(rid, n) for rid, n in sorted(tokens.items()) if n > 0]
    total = sum(n for _, n in active)
    out: dict[str, Attributed] = {}
    gpu_left, dram_left = window.gpu_seconds, window.dram_bytes
    for i, (rid, n) in enumerate(active):
        last = i == len(active) - 1
        gpu = gpu_left if last else window.gpu_seconds * n / total
        dram = None if window.dram_bytes is None else (dram_left if last else window.dram_bytes * n / total)
        gpu_left -= gpu
        if dram_left is not None and dram is not None:
            dram_left -= dram
        out[rid] = Attributed(gpu, dram, n, 1)
    return out


def attribute(windows: Sequence[Window], tokens: Sequence[Mapping[Any, float]]) -> Attribution:
    """Split each window's totals across requests by token share.

    ``tokens[i]`` maps request id -> tokens that request processed in ``windows[i]`` (must be >= 0).
    Raises ValueError if the sequences differ in length or a count is negative.
    """
    if len(windows) != len(tokens):
        raise ValueError(f"{len(windows)} windows but {len(tokens)} token maps")
    requests: dict[Any, Attributed] = {}
    unattributed = totals = Attributed()
    for window, counts in zip(windows, tokens):
        if any(n < 0 for n in counts.values()):
            raise ValueError("token counts must be >= 0")
        shares = _split(window, counts)
        totals = totals + Attributed(window.gpu_seconds, window.dram_bytes, sum(counts.values()), 1)
        if not shares:
            unattributed = unattributed + Attributed(window.gpu_seconds, window.dram_bytes, 0, 1)
        for rid, share in shares.items():
            requests[rid] = requests[rid] + share if rid in requests else share
    return Attribution(requests, unattributed, totals)


def bucket_tokens(windows: Sequence[Window], events: Iterable[tuple[float, str, int]]) -> list[dict[str, int]]:
    """Token maps for :func:`attribute` from ``(time, request_id, tokens)`` events (e.g. one per engine
    step), placed in the window with ``start <= time < end``.

    ``windows`` must be sorted and non-overlapping. Events outside every window are ignored: their
    tokens did not run while anything was measured.
    """
    starts = [w.start for w in windows]
    buckets: list[defaultdict[str, int]] = [defaultdict(int) for _ in windows]
    for t, rid, n in events:
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t < windows[i].end:
            buckets[i][rid] += n
    return [dict(b) for b in buckets]


@dataclass(frozen=True, slots=True)
class Span:
    """One engine call as the meter sees it: who it is charged to (``key``), when it ran ([start, end], wall
    clock seconds) and its tokens processed (prompt tokens not served from cache, plus decoded ones)."""

    key: Hashable
    start: float
    end: float
    tokens: int


def spread(windows: Sequence[Window], spans: Iterable[Span]) -> list[dict[Hashable, float]]:
    """Token maps for :func:`attribute` from calls that may cross windows: a call's tokens are spread evenly
    over its time, so a window gets ``tokens * overlap / duration`` of it (a call with no duration counts
    wholly in the window it falls in). ``windows`` must be sorted and non-overlapping; time outside every
    window is not measured, so tokens there count nowhere."""
    starts = [w.start for w in windows]
    buckets: list[defaultdict[Hashable, float]] = [defaultdict(float) for _ in windows]
    for s in spans:
        if s.tokens <= 0:
            continue
        i = max(bisect.bisect_right(starts, s.start) - 1, 0)
        duration = s.end - s.start
        while i < len(windows) and windows[i].start <= s.end:
            w = windows[i]
            if duration <= 0:
                if w.start <= s.start < w.end:
                    buckets[i][s.key] += s.tokens
                    break
            else:
                overlap = min(w.end, s.end) - max(w.start, s.start)
                if overlap > 0:
                    buckets[i][s.key] += s.tokens * overlap / duration
            i += 1
    return [dict(b) for b in buckets]
