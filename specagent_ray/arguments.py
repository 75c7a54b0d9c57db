"""Argument types the commands share (every floor may use them): comma-separated lists (``--tasks 0,1,2``, ``--p 0.5,0.7``)."""

from __future__ import annotations


def texts(text: str) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``: items stripped, empty ones dropped."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in texts(text))


def floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in texts(text))
