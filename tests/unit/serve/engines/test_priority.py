"""Program-level priority (serve/engines/priority.py): kinds in order, least attained service first, bounded waits."""

from __future__ import annotations

import asyncio
import heapq

import pytest
from pydantic import ValidationError

from specagent_ray.protocol.types import Action, Effect, Observation, Step, Usage
from specagent_ray.serve.core.tuning import KINDS, PriorityConfig
from specagent_ray.serve.engines.priority import ProgramPriority

READ = Step(Action.tool("lookup"), Observation("found"), "weak", Effect.READ)
STAGED = Step(Action.tool("book"), None, "weak", Effect.WRITE)  # no observation: staged


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_kinds_keep_their_order_whatever_the_sessions_service():
    clock = Clock()
    p = ProgramPriority(clock=clock)
    p.attained("heavy", 10**9)  # the highest level
    assert p.level("heavy") == p.cfg.levels - 1 and p.level("new") == 0
    for a, b in zip(KINDS, KINDS[1:]):
        assert p.of("heavy", a) < p.of("new", b), (a, b)


def test_less_attained_service_goes_first_within_a_kind():
    p = ProgramPriority(clock=Clock())
    p.attained("light", 100)
    p.attained("heavy", 50_000)
    assert p.level("light") < p.level("heavy")
    assert p.of("light", "strong") < p.of("heavy", "strong")
    assert p.of("light", "strong") <= p.of("new", "strong") + 0  # 100 tokens is still level 0


def test_kinds_too_close_for_the_levels_are_refused():
    with pytest.raises(ValidationError, match="kinds never swap"):
        PriorityConfig(slack_s={"write": 0, "strong": 0.5, "draft": 1, "prefill": 1.5}, level_s=0.2, levels=5)
    with pytest.raises(ValidationError, match="exactly the kinds"):
        PriorityConfig(slack_s={"write": 0, "strong": 1})


def test_a_request_is_never_passed_by_one_made_a_window_later():
    clock = Clock()
    p = ProgramPriority(clock=clock)
    p.attained("heavy", 10**9)
    first = p.of("heavy", "prefill")  # the worst number there is
    clock.t += p.cfg.max_slack_s + p.cfg.quantum_s
    assert p.of("new", "write") >= first  # the best number there is, a window later


def test_no_request_starves_under_a_flood_of_better_ones():
    """A queue served by (priority, arrival), as vLLM's priority scheduler serves it, twice overloaded by
    fresh sessions' staged-write verifies: the heavy session's prefill still leaves, before any request
    made more than max_slack_s after it."""
    clock = Clock()
    p = ProgramPriority(clock=clock)
    p.attained("heavy", 10**9)
    queue: list[tuple[int, int, str, float]] = []
    seq = 0
    heapq.heappush(queue, (p.of("heavy", "prefill"), seq, "heavy", clock.t))
    served_at = None
    while served_at is None and clock.t < 120:
        for _ in range(2):  # two arrivals per service: 2x overload
            seq += 1
            heapq.heappush(queue, (p.of(f"s{seq}", "write"), seq, "fresh", clock.t))
        _, _, who, asked = heapq.heappop(queue)
        if who == "heavy":
            served_at = clock.t
        else:
            assert asked <= p.cfg.max_slack_s + 1e-9 or served_at is not None
        clock.t += 0.05
    assert served_at is not None and served_at <= 2 * p.cfg.max_slack_s + 0.1


def test_run_measures_waits_and_counts_strong_service_only():
    clock = Clock()
    p = ProgramPriority(clock=clock)
    seen = []

    class Answer:
        usage = Usage(prompt_tokens=5000, cached_prompt_tokens=1000, decode_tokens=200)

    async def call(n):
        seen.append(n())
        clock.t += 0.5
        assert n() > seen[-1]  # asked again later (a retry), a later deadline
        return Answer()

    asyncio.run(p.run("s", "draft", call))
    assert p.level("s") == 0 and list(p.waits["draft"]) == [0.5]
    asyncio.run(p.run("s", "strong", call))
    assert p._service["s"] == 4200 and p.level("s") == 1 and list(p.waits["strong"]) == [0.5]
    assert abs(seen[0] - 200) <= 1 and abs(seen[1] - 150) <= 1  # (now + slack) / quantum: 2.0 s at 0, 1.0 s at 0.5


def test_a_failed_strong_call_still_counts_what_it_spent():
    p = ProgramPriority(clock=Clock())

    class Spent(Exception):
        usage = Usage(prompt_tokens=3000, cached_prompt_tokens=0, decode_tokens=0)

    async def call(n):
        raise Spent("malformed twice")

    with pytest.raises(Spent):
        asyncio.run(p.run("s", "write", call))
    assert p._service["s"] == 3000 and len(p.waits["write"]) == 1


def test_a_staged_verify_blocks_its_session_until_it_drafts_again():
    p = ProgramPriority(clock=Clock())
    assert p.verify_kind("s", [READ]) == "strong" and p.strong_kind("s") == "strong"
    assert p.verify_kind("s", [READ, STAGED]) == "write"
    assert p.strong_kind("s") == "write"  # the repair of a rejected staged write
    assert p.strong_kind("other") == "strong"
    assert p.draft_kind("s") == "draft" and p.strong_kind("s") == "strong"


def test_forgotten_sessions_are_bounded():
    p = ProgramPriority(clock=Clock(), keep=3)
    for i in range(10):
        p.attained(f"s{i}", 10**6)
        p.verify_kind(f"s{i}", [STAGED])
    assert len(p._service) == 3 and p.level("s0") == 0
    assert p.blocked >= {"s7", "s8", "s9"} and "s0" not in p.blocked
