"""What a load run sends: a mix of tau2 tasks, turned into session bodies for the gateway.

``--tasks airline:0-4,retail:0,retail:7`` names (tool source, task id) pairs; session ``i`` of a run gets
pair ``i mod len(mix)`` and ``trial = i`` (the seed of simulated engines), so two runs of the same
workload send the same sessions in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Workload:
    mix: tuple[tuple[str, str], ...]  # (tool source, task id)
    user: str = "simulated"  # simulated (sim engines) | tau2 (model engines)
    method: str = "specagent"
    k: int | None = None
    max_steps: int | None = None
    client_user_turns: int = 2  # user "client": the load client answers this many agent messages, the last with stop
    cancel_every: int = 0  # cancel every n-th session (0: none): at its first commit or wait on the client

    def options(self) -> dict[str, Any]:
        """What the Locust user class needs besides the task mix (``locustfile.py``, ``--sa-workload``)."""
        return {"user": self.user, "method": self.method, "k": self.k, "max_steps": self.max_steps,
                "client_user_turns": self.client_user_turns, "cancel_every": self.cancel_every}

    def body(self, i: int, method: str | None = None) -> dict[str, Any]:
        source, task_id = self.mix[i % len(self.mix)]
        body: dict[str, Any] = {"tool_source": source, "task_id": task_id, "user": self.user,
                                "method": method or self.method, "trial": i}
        if self.k is not None:
            body["k"] = self.k
        if self.max_steps is not None:
            body["max_steps"] = self.max_steps
        return body


def parse_mix(text: str) -> tuple[tuple[str, str], ...]:
    """``airline:0-4,retail:0`` -> ((airline, 0), ..., (airline, 4), (retail, 0)). Ranges are inclusive."""
    mix: list[tuple[str, str]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        source, sep, ids = part.partition(":")
        if not sep or not source or not ids:
            raise ValueError(f"task mix entry {part!r} is not SOURCE:ID or SOURCE:FIRST-LAST (e.g. airline:0-4)")
        lo, dash, hi = ids.partition("-")
        if dash:
            if not (lo.isdigit() and hi.isdigit()) or int(lo) > int(hi):
                raise ValueError(f"task range {ids!r} in {part!r} is not FIRST-LAST with FIRST <= LAST")
            mix.extend((source, str(n)) for n in range(int(lo), int(hi) + 1))
        else:
            mix.append((source, ids))
    if not mix:
        raise ValueError("the task mix is empty")
    return tuple(mix)
