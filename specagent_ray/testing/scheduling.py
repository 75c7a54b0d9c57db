"""The suite's xdist scheduling rule that is not xdist's own (``tests/conftest.py`` uses it)."""

from __future__ import annotations

from collections import OrderedDict


def hold_back(workqueue: OrderedDict[str, object], last: str) -> None:
    """Before the next unit is handed out: ``last`` moves behind every other unit left, so that it goes
    out only when it is the last one. The others keep their order."""
    if len(workqueue) > 1 and next(iter(workqueue)) == last:
        workqueue.move_to_end(last)
