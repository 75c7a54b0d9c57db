"""Deterministic scripted parts that ship in the package, for tests and the throughput bench.

They replay a fixed list of outputs, so every branch of the protocol can be driven exactly.
An ``Exception`` in a script is raised in place of an output (e.g. ``MalformedOutput``).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..protocol.types import Action, History, Observation, Proposal, Review, Step, Usage, Verdict



class _Script:
    def __init__(self, items: Iterable[object], default: object):
        self.items = list(items)
        self.default = default
        self.calls: list[tuple[History, tuple[Step, ...], str | None]] = []

    def next(self) -> object:
        item = self.items.pop(0) if self.items else self.default
        if isinstance(item, Exception):
            raise item
        return item


class ScriptedPolicy(_Script):
    """Proposes the scripted actions in order, then stops. Records what it was shown."""

    def __init__(self, actions: Iterable[object] = (), usage: Usage = Usage(100, 0, 20)):
        super().__init__(actions, Action.stop())
        self.usage = usage

    async def propose(self, history: History, draft: Sequence[Step] = (), feedback: str | None = None) -> Proposal:
        self.calls.append((history, tuple(draft), feedback))
        item = self.next()
        return item if isinstance(item, Proposal) else Proposal(item, self.usage)  # type: ignore[arg-type]


class ScriptedVerifier(_Script):
    """Answers the scripted verdicts in order, then accepts whole blocks."""

    def __init__(self, verdicts: Iterable[object] = (), usage: Usage = Usage(200, 0, 10)):
        super().__init__(verdicts, None)
        self.usage = usage

    async def verify(self, history: History, block: Sequence[Step]) -> Review:
        self.calls.append((history, tuple(block), None))
        item = self.next()
        if item is None:
            item = Verdict(len(block))
        return item if isinstance(item, Review) else Review(item, self.usage)  # type: ignore[arg-type]


class ScriptedUser:
    """Replies from a script, then 'ok'. A reply containing ``###STOP###`` ends the conversation."""

    def __init__(self, replies: Iterable[str] = ()):
        self.replies = list(replies)
        self.heard: list[str] = []

    async def reply(self, text: str) -> Observation:
        self.heard.append(text)
        answer = self.replies.pop(0) if self.replies else "ok"
        return Observation(answer, user_stop="###STOP###" in answer)


class RecordingJournal:
    """A protocol ``Journal`` that keeps every event in order (a referee reads them as the run goes)."""

    def __init__(self):
        self.events: list = []

    def event(self, event) -> None:
        self.events.append(event)

    def committed(self, steps) -> None:
        return None
