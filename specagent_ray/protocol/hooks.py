"""What sits around each block of the speculation loop without touching what runs in it: the K controller
(``Parts.block_size``), which picks each block's cap and learns from how the block went, and the block's
span. A hook sees a block only after it was drafted and its ruling only after it was made; nothing it does
can make a staged call run, so the loop's safety never depends on one. A new observer of blocks is a new
``BlockHook`` here, not a new branch in the loop."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from .blocks import Block, Ruling
from .interfaces import SpanHandle
from .runtime import Run


class BlockHook(Protocol):
    """Told of each block once drafted, and of its ruling once made (a block with nothing staged has none)."""

    def drafted(self, block: Block) -> None: ...

    def reviewed(self, block: Block, ruling: Ruling) -> None: ...


class Pacing:
    """The K controller's side of the loop: each block's cap in 0..k (k without a controller), and what each
    drafted and reviewed block tells it. A block whose drafter was lost tells it nothing (it is drafted again)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.chooser = run.parts.block_size

    def next_k(self) -> int:
        """The next block's draft cap: the controller's choice in 0..k, or k without one."""
        k = self.run.config.k
        return k if self.chooser is None else max(0, min(k, self.chooser.next_k(self.run.history)))

    def drafted(self, block: Block) -> None:
        if self.chooser is not None and block.lost is None:
            self.chooser.drafted(block.steps, block.staged)

    def reviewed(self, block: Block, ruling: Ruling) -> None:
        """The accepted prefix, and whether a rejection needs a separate strong repair (no valid fused one)."""
        if self.chooser is None:
            return
        verdict = ruling.verdict
        j, repair = verdict.accepted_prefix, verdict.repair
        if verdict.partial:  # some staged calls were rejected: to the controller, the staged step was
            j -= 1
        separate = j < len(block.steps) and (repair is None or self.run.validity.invalid_reason(repair) is not None)
        self.chooser.reviewed(block.steps, j, separate)


class BlockSpan:
    """The block's span: how long its draft was and how much of it was accepted."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.handle: SpanHandle | None = None

    @contextmanager
    def around(self) -> Iterator[None]:
        with self.run.recorder.span("block") as handle:
            self.handle = handle
            yield

    def drafted(self, block: Block) -> None:
        assert self.handle is not None
        self.handle.set("specagent.draft_length", len(block.steps))

    def reviewed(self, block: Block, ruling: Ruling) -> None:
        assert self.handle is not None
        self.handle.set("specagent.accepted_prefix", ruling.verdict.accepted_prefix)


class Hooks:
    """The loop's hooks, told in order (the span first, then the K controller)."""

    def __init__(self, run: Run) -> None:
        self.pacing = Pacing(run)
        self.span = BlockSpan(run)
        self.hooks: tuple[BlockHook, ...] = (self.span, self.pacing)

    def next_k(self) -> int:
        return self.pacing.next_k()

    def block(self) -> AbstractContextManager[None]:
        """The block's span, open around its draft, review and commit."""
        return self.span.around()

    def drafted(self, block: Block) -> None:
        for hook in self.hooks:
            hook.drafted(block)

    def reviewed(self, block: Block, ruling: Ruling) -> None:
        for hook in self.hooks:
            hook.reviewed(block, ruling)
