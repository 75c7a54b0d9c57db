"""What the parts below the sessions need of a live session, as small protocols: the engines and the
tool sources take a session through these, so they never import ``session.py`` (which sits above them).
``session.Session`` satisfies each one; ``tests/unit/test_layout.py`` checks that it still does."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from ...costs.ledger import Ledger
from ...protocol.types import Step, Task
from .api import CreateSession


@runtime_checkable
class SessionView(Protocol):
    """A session as its engines see it: who it is, what it was asked, where its calls are recorded,
    and ``outside()``, the time it spends waiting on an engine or a client."""

    id: str
    request: CreateSession
    task: Task
    domain: str
    ledger: Ledger

    def outside(self) -> AbstractContextManager[None]: ...


@runtime_checkable
class FinishedSession(Protocol):
    """A finished session as its benchmark grades it: the task, the committed steps, how it ended."""

    id: str
    task: Task
    domain: str
    steps: Sequence[Step]
    termination: str | None
    reward: float | None
