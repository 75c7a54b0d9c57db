"""A turn's path through ``serve/sessions`` goes one way: the coordinator hands a turn to ``turns.py`` once,
and ``turns.py`` writes it to the session (``session.py``), which never calls back into ``turns.py``. Before,
the coordinator entered ``turns.py`` for a repeat, then ``turn_taking.py``, which crossed to ``turns.py`` and
``session.py`` and back for every input: each of these tests fails on that path."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specagent_ray.serve.core.api import CreateSession, UserMessage
from specagent_ray.serve.core.config import AppConfig, ClientSource, CoordinatorConfig, SimEngines
from specagent_ray.serve.log.records import TurnMeta
from specagent_ray.serve.sessions import turns
from specagent_ray.serve.sessions.turns import TurnPost
from specagent_ray.testing.served import FAST, sim_coordinator

TURNS = turns.__file__


@contextmanager
def entries(module_file: str) -> Iterator[list[tuple[str, str]]]:
    """Every call into ``module_file`` from code outside it, made by this task while inside the block: (the
    caller's file, the function entered). Calls within the module, and the session runner's (another
    task, running meanwhile), are not the turn's."""
    seen: list[tuple[str, str]] = []
    task = asyncio.current_task()

    def profile(frame, event, arg) -> None:
        if event == "call" and frame.f_code.co_filename == module_file and asyncio.current_task() is task:
            caller = frame.f_back.f_code.co_filename if frame.f_back is not None else "?"
            if caller != module_file:
                seen.append((Path(caller).name, frame.f_code.co_name))

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(before)


def config() -> AppConfig:
    return AppConfig(engines=SimEngines(latency=FAST), coordinator=CoordinatorConfig(lease_s=1.0, lease_skew_s=0.05),
                     tool_sources={"airline": {"kind": "tau2", "domain": "airline"}, "app": ClientSource()})


async def test_a_turn_enters_turns_once_from_the_coordinator_and_a_repeat_too(tmp_path):
    coord = sim_coordinator(tmp_path / "log", config())
    await coord.start()
    sid = (await coord.create(CreateSession(tool_source="airline", task_id="0", user="client", message="hi")))[
        "session_id"]
    s = coord.sessions[sid]
    first = await s.wait_events(0, 30, whole_turn=True)
    assert not first["done"] and s.turns.ended, [e["t"] for e in first["events"]]
    post = TurnPost(previous=0, inputs=[UserMessage(text="my user id is mia_li_3668")], meta=TurnMeta(model="m"))
    with entries(TURNS) as seen:
        answer = await coord.respond(sid, post, idempotency_key="turn-1")
    assert answer["turn"] == 1
    assert seen == [("coordinator.py", "take_turn")]  # nothing it called came back into turns.py
    with entries(TURNS) as seen:  # the same turn again: answered by the turn that took it, nothing recorded
        again = await coord.respond(sid, post, idempotency_key="turn-1")
    assert again["turn"] == 1 and seen == [("coordinator.py", "take_turn")]
    assert [e["t"] for e in s.events[answer["start"]:answer["start"] + 2]] == ["turn", "user_message"]
    assert sum(e["t"] == "turn" for e in s.events) == 1
    await coord.cancel(sid)
