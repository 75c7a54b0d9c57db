"""Program-level priority (serve/priority.py): kinds in order, least attained service first, bounded waits."""

from __future__ import annotations

import asyncio
import heapq

import pytest
from pydantic import ValidationError

from specagent_ray.protocol.types import Action, Effect, Observation, Step, Usage
from specagent_ray.serve.priority import KINDS, PriorityConfig, ProgramPriority


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


def test_write_slots_need_more_strong_slots():
    with pytest.raises(ValidationError, match="strong_slots"):
        PriorityConfig(write_slots=2, strong_slots=2)
    assert PriorityConfig(write_slots=1, strong_slots=4).write_slots == 1


def _slots_run(cfg: PriorityConfig, plan, cancel: tuple[str, ...] = ()):
    """Run ``plan`` ([(name, session, kind, seconds)], started in that order) against an engine of
    ``strong_slots`` sequences; returns the order in which calls reached it and the most strong calls
    ever at it at once. ``cancel``: names cancelled once every call has been asked."""
    p = ProgramPriority(cfg, clock=Clock())
    reached, at_engine, most = [], [0], [0]

    async def main():
        gates = {name: asyncio.Event() for name, *_ in plan}

        def call(name, kind):
            async def go(n):
                reached.append(name)
                at_engine[0] += kind != "draft"
                most[0] = max(most[0], at_engine[0])
                await gates[name].wait()
                at_engine[0] -= kind != "draft"
            return go

        tasks = {}
        for name, sid, kind, _ in plan:
            tasks[name] = asyncio.create_task(p.run(sid, kind, call(name, kind)))
            await asyncio.sleep(0)
        for name in cancel:
            tasks[name].cancel()
        await asyncio.sleep(0)
        for name, *_ in plan:  # the engine answers in the order asked
            gates[name].set()
            await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*tasks.values(), return_exceptions=True), 5)  # a lost slot: fails
        assert p.in_flight == {"strong": 0, "weak": 0} and not p._held

    asyncio.run(main())
    return reached, most[0]


def test_other_strong_calls_leave_the_write_slots_free_and_go_in_priority_order():
    cfg = PriorityConfig(write_slots=1, strong_slots=3)
    plan = [("v1", "a", "strong", 0), ("v2", "b", "strong", 0), ("p1", "c", "prefill", 0), ("v3", "d", "strong", 0),
            ("w1", "e", "write", 0), ("w2", "f", "write", 0), ("d1", "g", "draft", 0)]
    reached, most = _slots_run(cfg, plan)
    # v1, v2 fill the 2 shared sequences; the writes and the draft go at once; v3 (strong) before p1 (prefill)
    assert reached[:5] == ["v1", "v2", "w1", "w2", "d1"] and reached[5:] == ["v3", "p1"]
    assert most == 4  # writes may go past strong_slots: vLLM then queues them first, by priority
    off, _ = _slots_run(PriorityConfig(), plan)
    assert off == [name for name, *_ in plan]  # without write slots nothing waits here


def test_a_held_call_that_is_cancelled_gives_up_its_place_and_counts_nothing():
    cfg = PriorityConfig(write_slots=1, strong_slots=2)
    plan = [("v1", "a", "strong", 0), ("v2", "b", "strong", 0), ("v3", "c", "strong", 0)]
    reached, _ = _slots_run(cfg, plan, cancel=("v2",))
    assert reached == ["v1", "v3"]  # v2 never reached the engine; the in-flight counts balance (in _slots_run)


def test_a_call_cancelled_as_it_is_admitted_passes_its_slot_on():
    p = ProgramPriority(PriorityConfig(write_slots=1, strong_slots=2), clock=Clock())
    reached = []

    async def main():
        gate = asyncio.Event()

        async def call(name):
            reached.append(name)
            if name == "a":
                await gate.wait()

        tasks = [asyncio.create_task(p.run(s, "strong", lambda n, s=s: call(s))) for s in "abc"]
        await asyncio.sleep(0)
        assert reached == ["a"] and len(p._held) == 2
        gate.set()
        await asyncio.sleep(0)  # a ends: b is admitted, not yet running
        assert p.in_flight["strong"] == 1 and reached == ["a"]
        tasks[1].cancel()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)  # a lost slot: fails
        assert reached == ["a", "c"] and p.in_flight["strong"] == 0 and not p._held

    asyncio.run(main())
