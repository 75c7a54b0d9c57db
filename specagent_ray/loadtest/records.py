"""What a load run records per session, and the step latency it derives (no network code: the Locust
user class in ``locustfile.py`` writes these, the report reads them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Commits that reach the client within this long of each other arrived together (one group commit of
# the session log publishes them at once): one delivery, whose latency its steps share.
BURST_S = 0.005


def step_latencies(start_s: float, deliveries: list[tuple[float, int]]) -> list[float]:
    """Per committed step: the time since the session's previous delivery (or its start), divided by
    the steps of this delivery."""
    out, last = [], start_s
    for t, n in deliveries:
        out.extend([(t - last) / n] * n)
        last = t
    return out


@dataclass
class SessionRecord:
    """One session as the client saw it. Times are Unix seconds until ``LoadResult`` shifts them to
    seconds since the run started."""

    index: int
    phase: str  # load | baseline
    method: str
    tool_source: str
    task_id: str
    trial: int
    start_s: float
    end_s: float | None = None
    session_id: str | None = None
    outcome: str = "running"  # done | failed | timed_out | cancelled (server side) | error | unfinished
    error_kind: str | None = None
    error: str | None = None
    throttled: int = 0  # 429s and 503s waited out while creating
    commits: list[tuple[float, int]] = field(default_factory=list)  # deliveries: (time, steps committed)
    step_latencies: list[float] = field(default_factory=list)  # per committed step, s
    strong_calls: int = 0
    strong_prompt: int = 0
    strong_decode: int = 0
    weak_decode: int = 0
    user_messages: int = 0  # posted by the client (client-user sessions)
    tool_results: int = 0  # client tool calls answered
    cancelled_by_client: bool = False

    @property
    def steps(self) -> int:
        return sum(n for _, n in self.commits)

    def delivered(self, now: float, n: int) -> None:
        """A commit event of ``n`` steps arrived at ``now``."""
        if self.commits and now - self.commits[-1][0] < BURST_S:  # the same delivery
            self.commits[-1] = (self.commits[-1][0], self.commits[-1][1] + n)
        else:
            self.commits.append((now, n))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionRecord:
        data = dict(data)
        data["commits"] = [tuple(c) for c in data.get("commits", [])]
        return cls(**data)

    def shifted(self, t0: float) -> SessionRecord:
        """Times as seconds since ``t0``."""
        self.start_s -= t0
        self.end_s = None if self.end_s is None else self.end_s - t0
        self.commits = [(t - t0, n) for t, n in self.commits]
        self.step_latencies = step_latencies(self.start_s, self.commits)
        return self
