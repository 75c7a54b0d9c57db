"""The agent service's small guarantees: a stream's event numbers are a function of its events (a resumed
stream numbers each event as before), and the typed coordinator port names only real coordinator
methods, with arguments their signatures take."""

from __future__ import annotations

import inspect
from typing import Any

from specagent_ray.serve.agents.port import CoordinatorPort
from specagent_ray.serve.agents.service import numbered
from specagent_ray.serve.sessions.coordinator import Coordinator


async def _events(n: int):
    for i in range(n):
        yield {"type": f"e{i}"}


async def test_a_resumed_stream_numbers_each_event_as_before():
    whole = [e async for e in numbered(_events(5))]
    resumed = [e async for e in numbered(_events(5), after=2)]
    assert [e["sequence_number"] for e in whole] == [0, 1, 2, 3, 4]
    assert resumed == whole[3:]


async def test_every_port_call_is_a_coordinator_method_called_as_its_signature_allows():
    seen: list[tuple[str, tuple, dict]] = []

    async def call(method: str, *args: Any, retry: bool | None = None, **kwargs: Any) -> dict:
        seen.append((method, args, kwargs))
        return {}

    port = CoordinatorPort(call)
    typed = [n for n, _ in inspect.getmembers(CoordinatorPort, inspect.iscoroutinefunction)]
    for name in typed:
        method = getattr(port, name)
        params = [p for p in inspect.signature(method).parameters.values() if p.default is inspect.Parameter.empty]
        await method(*[object() for _ in params])
    assert {m for m, _, _ in seen} == set(typed)
    made = inspect.getsource(Coordinator.__init__)  # the calls it assigns there (partials, its conversations')
    for method, args, kwargs in seen:
        target = getattr(Coordinator, method, None)
        if target is None:
            assert f"self.{method}" in made, method
        else:
            inspect.signature(target).bind(None, *args, **kwargs)
