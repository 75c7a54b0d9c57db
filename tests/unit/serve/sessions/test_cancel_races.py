"""A cancel is never lost. Python 3.11's ``asyncio.wait_for`` returns the awaited result when the cancel
arrives in the same loop turn as that result: the caller's CancelledError is swallowed and the task goes
on. A DELETE then waits for a session that keeps running (seen in CI: the cancel of a session whose
engine call had just answered hung until the client's read timeout). Each waiting step of the session's
runner is checked here with the cancel landing exactly as its awaited result does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from specagent_ray.launch.workload import _follow
from specagent_ray.protocol.types import Task
from specagent_ray.serve.core.api import CreateSession
from specagent_ray.serve.core.handles import taken
from specagent_ray.serve.engines.engine_client import attempts
from specagent_ray.serve.sessions.session import Session


def session() -> Session:
    request = CreateSession(tool_source="airline", task_id="0", user="client", message="hi")
    return Session("s1", request, Task("0", "hi"), log=lambda sid, record, data: None)


class Response:
    """A Serve ``DeploymentResponse`` whose assignment to a replica is ``assigned``."""

    def __init__(self, assigned: asyncio.Future):
        self.assigned, self.cancelled = assigned, False

    async def _fetch_future_result_async(self):
        return await self.assigned

    def cancel(self) -> None:
        self.cancelled = True

    def __await__(self):
        return asyncio.sleep(0, "answer").__await__()


async def one_event(answer: asyncio.Future) -> AsyncIterator[dict]:
    yield await answer


WAITS = {
    "engine call (attempts)": lambda answer: attempts("drafter", 1, 60, lambda: answer),
    "client's answer (from_client)": lambda answer: session().from_client(answer, "a user message"),
    "replica assignment (taken)": lambda answer: taken(Response(answer), 60),
    "event stream (_follow)": lambda answer: _follow(one_event(answer), [], 60),
}


@pytest.mark.parametrize("wait", WAITS.values(), ids=WAITS.keys())
async def test_a_cancel_that_lands_with_the_answer_still_cancels(wait):
    answer = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(wait(answer))
    for _ in range(3):
        await asyncio.sleep(0)  # the task now waits on ``answer``
    answer.set_result({"t": "answer"})
    task.cancel()  # the same loop turn: the result is in, the task has not run yet
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancel_cancels_again_a_runner_that_swallowed_the_first_cancel():
    s, swallowed = session(), []

    async def stubborn() -> None:  # third-party code that catches the cancel and goes on
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.append(True)
        await asyncio.sleep(3600)

    s.runner = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    try:
        async with asyncio.timeout(10):
            await s.cancel(grace_s=0.05)
        assert swallowed == [True] and s.runner.cancelled()
    finally:
        s.runner.cancel()  # a failed cancel must not leave the test's loop waiting an hour


def test_no_module_waits_with_wait_for():
    """The races above are fixed by ``asyncio.timeout``; a new ``wait_for`` would bring them back."""
    import pathlib

    import specagent_ray

    users = [str(p) for p in pathlib.Path(specagent_ray.__file__).parent.rglob("*.py")
             if "asyncio.wait_for(" in p.read_text()]
    assert users == []
