"""A load run's configuration and result (the run itself: ``locust_load.py`` on Locust).

Two modes. **Closed loop**: ``concurrency`` Locust users each run one session after another, so that
many sessions are always in flight; with ``stages`` (ascending levels) the run is cut into equal stages
and each stage adds users up to its level. **Open loop**: sessions arrive at ``rate`` per second
(Poisson, seeded); an arrival finding ``concurrency`` sessions already in flight is shed (counted, not
sent).

Every run is bounded. No session starts after ``duration_s`` or once ``sessions`` have started; sessions
still in flight then get ``drain_s`` to finish and are cancelled (on the server too) after that.
``max_errors`` failed sessions stop the run early. A server that cannot be reached or refuses the API
key stops the run before it starts (``LoadAborted``), with a one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .records import SessionRecord
from .workload import Workload

Mode = Literal["closed", "open"]


class LoadAborted(Exception):
    """The run could not start (unreachable URL, wrong API key, not a gateway)."""


@dataclass(frozen=True)
class LoadConfig:
    url: str
    api_key: str
    workload: Workload
    mode: Mode = "closed"
    concurrency: int = 100  # closed: sessions kept in flight; open: most in flight before shedding
    rate: float = 10.0  # open: arrivals per second
    sessions: int = 1000  # most sessions started
    duration_s: float = 60.0  # no session starts after this
    drain_s: float = 60.0  # then in-flight sessions get this long before they are cancelled
    ramp_s: float = 0.0  # closed: workers start spread over this
    max_errors: int = 20  # stop early at this many errors
    baseline_sessions: int = 20  # Strong-only sessions on the same (task, trial)s, for the token savings
    baseline_method: str = "strong"
    request_timeout_s: float = 60.0
    seed: int = 0
    stages: tuple[int, ...] = ()  # closed loop: ascending concurrency levels, equal shares of duration_s

    def __post_init__(self) -> None:
        if self.stages:
            if self.mode != "closed" or list(self.stages) != sorted(set(self.stages)) or self.stages[0] < 1:
                raise ValueError(f"stages must be ascending concurrency levels >= 1 of a closed-loop run, "
                                 f"got {', '.join(map(str, self.stages))}")
            object.__setattr__(self, "concurrency", self.stages[-1])
        for name in ("concurrency", "sessions", "max_errors"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("duration_s", "request_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.mode == "open" and not self.rate > 0:
            raise ValueError(f"open-loop runs need a rate > 0 sessions/s, got {self.rate}")
        if self.drain_s < 0 or self.ramp_s < 0 or self.baseline_sessions < 0:
            raise ValueError("drain_s, ramp_s and baseline_sessions must be >= 0")


@dataclass
class LoadResult:
    config: LoadConfig
    records: list[SessionRecord]
    wall_s: float  # the load phase, from the first start to the last end
    stopped_because: str
    shed: int
    timeline: list[dict[str, float]]  # one sample a second: t, in_flight, steps, done
    stats_before: dict[str, Any]
    stats_after: dict[str, Any] | None
    levels: list[tuple[float, float, int]] = field(default_factory=list)  # closed loop: (from s, to s, level)
    started_at: float = 0.0  # wall clock (time.time()) at the run's time 0
    client_cpu_s: float | None = None  # the load client's own CPU time (all its processes)
    locust: Any = None  # Locust's statistics of the load phase (locust_run.LocustStats)

    def load(self) -> list[SessionRecord]:
        return [r for r in self.records if r.phase == "load"]

    def baseline(self) -> list[SessionRecord]:
        return [r for r in self.records if r.phase == "baseline"]
