"""Program-level priority of engine requests (vLLM's ``priority``: lower is served first).

Every request gets a virtual deadline, ``now + slack``, sent as a whole number of ``quantum_s`` since the
scheduler started. The slack is the sum of
- its kind's slack (``PriorityConfig.slack_s``): a verify or repair of a session blocked on a staged write
  (``write``) has none; other strong-engine calls (``strong``) a little; drafts (``draft``) more; a
  prefill ahead of a verify (``prefill``) the most;
- ``level_s`` per level of the session's attained strong-engine service, least attained first (Autellix's
  program-level least attained service): level = floor(log2(1 + service / unit_tokens)), capped at
  ``levels - 1``. The kinds' slacks are further apart than the largest level slack, so a kind's order
  never depends on which session asks.

An engine that serves waiting requests by (priority, arrival), as vLLM's priority scheduler does, lets a
request be passed only by requests with an earlier deadline: ones that arrived at most
``max_slack_s`` after it. That is aging with a bound: a request waits at most that window plus the time
to serve what was already queued ahead of it, however many better requests keep arriving.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ..core.tuning import KINDS, Kind, PriorityConfig

T = TypeVar("T")


class ProgramPriority:
    """Deadlines for engine requests, per session and kind.

    Guarantees: at the same instant, write < strong < draft < prefill for any two sessions; within a
    kind, a session with less attained service gets a smaller (or equal) number; a request made
    ``max_slack_s`` or more after another never gets a smaller number. Sessions are forgotten
    least-recently-used past ``keep``; a forgotten session restarts at level 0."""

    def __init__(self, cfg: PriorityConfig | None = None, clock: Callable[[], float] = time.monotonic,
                 keep: int = 100_000, samples: int = 50_000):
        self.cfg = cfg or PriorityConfig()
        self.clock = clock
        self.epoch = clock()
        self.keep = keep
        self._service: OrderedDict[str, int] = OrderedDict()
        self.blocked: set[str] = set()  # sessions whose staged write is being verified or repaired
        self.waits: dict[Kind, deque[float]] = {k: deque(maxlen=samples) for k in KINDS}
        self.in_flight = {"strong": 0, "weak": 0, "mid": 0}  # this coordinator's requests now at each engine role
        self.strong_computed = 0  # new KV (uncached prompt + decoded tokens) of every strong-engine call so far
        self.on_wait: Callable[[Kind, float], None] = lambda kind, wait_s: None  # each wait, as observed

    def level(self, session_id: str) -> int:
        service = self._service.get(session_id, 0)
        return min(self.cfg.levels - 1, int(math.log2(1 + service / self.cfg.unit_tokens)))

    def of(self, session_id: str, kind: Kind) -> int:
        """The priority number of a request made now."""
        slack = self.cfg.slack_s[kind] + self.cfg.level_s * self.level(session_id)
        return int((self.clock() - self.epoch + slack) / self.cfg.quantum_s)

    def attained(self, session_id: str, tokens: int) -> None:
        """Add strong-engine service (uncached prompt tokens + decoded tokens) to a session."""
        self._service[session_id] = self._service.get(session_id, 0) + max(0, tokens)
        self._service.move_to_end(session_id)
        while len(self._service) > self.keep:
            gone, _ = self._service.popitem(last=False)
            self.blocked.discard(gone)

    def observe(self, kind: Kind, wait_s: float) -> None:
        """One request's time from being asked to being answered."""
        self.waits[kind].append(wait_s)
        self.on_wait(kind, wait_s)

    # -- the kinds of a session's calls ------------------------------------------------------------

    def draft_kind(self, session_id: str) -> Kind:
        self.blocked.discard(session_id)  # drafting again: no staged write is waiting any more
        return "draft"

    def verify_kind(self, session_id: str, block: Sequence[Any]) -> Kind:
        """A verify of a block that stages a write blocks its session until it (or a repair) is answered."""
        if any(step.staged for step in block):
            self.attained(session_id, 0)  # known, so that forgetting it unblocks it too
            self.blocked.add(session_id)
            return "write"
        self.blocked.discard(session_id)
        return "strong"

    def strong_kind(self, session_id: str) -> Kind:
        return "write" if session_id in self.blocked else "strong"

    async def run(self, session_id: str, kind: Kind, call: Callable[[Callable[[], int]], Awaitable[T]],
                  engine: str | None = None) -> T:
        """``call(number)``, where ``number()`` is the priority of a request made now (a retry asks
        again: a new request, a new deadline); its wait is observed, and a strong-engine call's tokens
        are the session's attained service (what a failed call spent included, where the failure
        carries its usage). ``engine``: the engine role it runs on (default: weak for a draft, else strong);
        a mid verifier's call (``"mid"``) is ordered like the strong one's but is no strong-engine service."""
        start = self.clock()
        result: Any = None
        role = engine or ("weak" if kind == "draft" else "strong")
        self.in_flight[role] += 1
        try:
            result = await call(lambda: self.of(session_id, kind))
            return result
        except Exception as exc:
            result = exc
            raise
        finally:
            self.in_flight[role] -= 1
            self.observe(kind, self.clock() - start)
            usage = getattr(result, "usage", None)
            if role == "strong" and usage is not None:
                new = max(0, usage.prompt_tokens - usage.cached_prompt_tokens) + usage.decode_tokens
                self.strong_computed += new
                self.attained(session_id, new)
