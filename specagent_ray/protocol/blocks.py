"""What the loop knows about one block: what was drafted (``Block``) and the final answer on it
(``Ruling``). Made by the runtime, never read from model output."""

from __future__ import annotations

from dataclasses import dataclass

from .types import Author, Step, Verdict


@dataclass(frozen=True, slots=True)
class Block:
    """The drafted steps; the last one is staged iff ``staged``. ``refused`` says why the weak
    policy's last proposal was dropped without execution (invalid or malformed), if it was; ``lost``
    says why the drafter went away mid-block, if it did (then nothing is staged)."""

    steps: tuple[Step, ...]
    staged: bool = False
    refused: str | None = None
    lost: str | None = None


@dataclass(frozen=True, slots=True)
class Ruling:
    """The final answer on a block and who settled it: the mid or the strong verifier. A fused repair in it
    commits with ``judge`` as its author."""

    verdict: Verdict
    judge: Author = "strong"
