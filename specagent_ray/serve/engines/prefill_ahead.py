"""Prefill ahead of the verify: the verifier computes the committed history H while the block is drafted.

When a session starts drafting a block, the verifier gets the leading block of that block's verify prompt
(system message + H, ``Prompts.leading_block``) as a prefill-only request: ``max_tokens`` 1, the lowest
priority kind (``prefill``). vLLM keeps its KV blocks in the prefix cache, so the verify that follows
computes only the block itself. The call is recorded in the session's ledger as a strong ``prefill``
call, so resource reports count what it cost.

Skipped where H is known to be cached already: H's steps are a prefix of the steps of the last prompt
this session sent the verifier (a verify whose block was accepted whole, a repair of the same H), and
that prompt is still trusted to be cached. vLLM 0.32 has no TTL or pin for prefix blocks and evicts them
least recently used when KV memory runs short, so an untrusted prefix (a long tool pause, a busy engine)
is prefilled again: the keep-warm. Trust ends after ``trust_s``, or, where the verifier's KV cache size
is known (``kv_tokens``), once the verifier has computed more new KV since that prompt than
``KV_TRUST_SHARE`` of it: its least recently used blocks are the next to go. A prefill that fails costs
nothing but its own request: the verify computes H itself.

A verify that finds its session's prefill still running waits for it (``settled``): vLLM caches a prefix
block only once it is computed, so a verify sent alongside would compute H a second time. Not where
priorities are sent: there the prefill is the engine's last choice, and a verify waiting on it would be
a priority inversion; the verify goes first and the prefill then finds H cached.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ...models.backend import Backend
from ...models.llm import PromptTrail
from ...models.prompts import Prompts
from ...protocol.interfaces import CallRecord
from ...protocol.types import History, Step
from ..core.views import SessionView
from .priority import ProgramPriority

log = logging.getLogger(__name__)

# Of the verifier's KV cache, the share that new KV may fill before a session's prefix is no longer trusted.
# Not all of it: running requests hold blocks too, and another client of the engine (tau2's user
# simulator, a second coordinator) computes KV this coordinator does not see.
KV_TRUST_SHARE = 0.5


class PrefillAhead:
    """Guarantees: at most one prefill per block start; none where the session's last verifier prompt
    already began with H; a prefill never raises into the session, and its usage reaches the session's
    ledger; with ``kv_tokens``, a prefix is not trusted once new KV of more than ``KV_TRUST_SHARE`` of
    ``kv_tokens`` has been computed on the verifier since it was sent. Sessions are forgotten
    least-recently-used past ``keep``."""

    def __init__(self, backend: Backend, priority: ProgramPriority, send_priority: bool,
                 clock: Callable[[], float], trust_s: float = float("inf"), keep: int = 100_000,
                 kv_tokens: int | None = None):
        self.backend, self.priority, self.send_priority = backend, priority, send_priority
        self.clock, self.trust_s, self.keep = clock, trust_s, keep
        self.kv_reach = KV_TRUST_SHARE * kv_tokens if kv_tokens else float("inf")
        self._sent: OrderedDict[str, tuple[float, tuple[Step, ...], int]] = OrderedDict()
        self.tasks: set[asyncio.Task] = set()
        self._running: dict[str, asyncio.Task] = {}
        self.counts = {"sent": 0, "skipped": 0, "rewarmed": 0, "failed": 0}

    def sent(self, session_id: str, steps: Sequence[Step]) -> None:
        """The verifier was asked a prompt over these steps (its prefix stays cached for a while)."""
        self._sent[session_id] = (self.clock(), tuple(steps), self.computed)
        self._sent.move_to_end(session_id)
        while len(self._sent) > self.keep:
            self._sent.popitem(last=False)

    @property
    def computed(self) -> int:
        """New KV computed on the verifier by this coordinator's calls so far, failed ones' included
        (``ProgramPriority.strong_computed``: every verifier call, this prefill's too, goes through it)."""
        return self.priority.strong_computed

    def covered(self, session_id: str, history: History) -> bool:
        """H's steps are a prefix of the last verifier prompt's (whenever that was)."""
        last = self._sent.get(session_id, (0.0, None, 0))[1]
        steps = history.steps
        return last is not None and len(steps) <= len(last) and all(
            a is b or a == b for a, b in zip(steps, last, strict=False))

    def cached(self, session_id: str, history: History) -> bool:
        """Known to be cached: covered by a verifier prompt sent less than ``trust_s`` ago, with less than
        ``kv_reach`` new KV computed on the verifier since."""
        at, _, computed = self._sent.get(session_id, (float("-inf"), None, 0))
        fresh = self.clock() - at < self.trust_s and self.computed - computed < self.kv_reach
        return fresh and self.covered(session_id, history)

    def start(self, session: SessionView, prompts: Prompts, history: History, headers: Callable[[], dict],
              trail: PromptTrail | None = None) -> None:
        """Begin the prefill of ``history``'s leading block for ``session``, unless cached;
        ``trail``: the session's prompts to the verifier, which measure the prefill's predicted cache hit."""
        if self.cached(session.id, history):
            self.counts["skipped"] += 1
            return
        self.counts["rewarmed" if self.covered(session.id, history) else "sent"] += 1
        self.sent(session.id, history.steps)
        task = asyncio.get_running_loop().create_task(self._prefill(session, prompts, history, headers, trail))
        self.tasks.add(task)
        self._running[session.id] = task
        task.add_done_callback(functools.partial(self._done, session.id))

    def _done(self, session_id: str, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if self._running.get(session_id) is task:
            del self._running[session_id]

    async def settled(self, session_id: str) -> None:
        """Wait until the session's prefill, if one is running, has finished (or failed); at once where
        priorities are sent (the engine serves the verify first)."""
        task = self._running.get(session_id)
        if task is not None and not task.done() and not self.send_priority:
            await asyncio.wait([task])  # never raises: _prefill keeps its own failures

    async def _prefill(self, session: SessionView, prompts: Prompts, history: History, headers: Callable[[], dict],
                       trail: PromptTrail | None) -> None:
        messages = prompts.leading_block(history)
        start = self.clock()

        async def call(n: Callable[[], int]) -> Any:
            return await self.backend.complete(messages, None, 1, 0.0, headers(),
                                               priority=n() if self.send_priority else None)
        try:
            done = await self.priority.run(session.id, "prefill", call)
        except Exception as exc:  # noqa: BLE001 - the verify computes H itself, as without prefill ahead
            self.counts["failed"] += 1
            self._sent.pop(session.id, None)
            log.info("prefill ahead of session %s failed: %s", session.id, exc)
            return
        usage = done.usage
        if trail is not None:
            usage = replace(usage, predicted_cached_tokens=trail.predicted(messages, usage.prompt_tokens))
        session.ledger.record(CallRecord("strong", "prefill", usage, self.clock() - start))
