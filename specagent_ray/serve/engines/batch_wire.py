"""How an engine batch crosses Ray between the coordinator and a simulated engine: as bytes.

Ray's own serializer (cloudpickle) calls Python code for every object, and a batch holds every session's
whole history, so a batch is pickled here by the C pickler. The protocol's records are frozen, slotted
dataclasses, which the pickler would otherwise save through ``dataclasses``' ``__getstate__`` (a
``fields()`` call per object, a third of the packing's CPU); the dispatch table below saves each as its
class and its fields' values, in declaration order, and rebuilds it by calling the class.

Guarantee: ``unpacked(packed(items)) == list(items)`` for any picklable items (the wire table only
changes how the protocol's records are spelled). Both ends are this application's own deployments, as
with any Ray call; bytes from anywhere else are never given to ``unpacked``.
"""

from __future__ import annotations

import copyreg
import io
import operator
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ...protocol.types import (Action, Observation, Proposal, Review, Step, ToolCall, Usage, UserToolCall,
                               Verdict)


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One session's call. ``steps`` is H's steps (the task itself never crosses the wire). A session's
    ``parallel`` is the same on all its requests (a replica keeps its models for the session)."""

    session_id: str
    domain: str
    task_id: str
    trial: int
    steps: tuple[Step, ...]
    draft: tuple[Step, ...] = ()
    feedback: str | None = None
    criterion: str = "semantic"  # a verify's acceptance criterion: "exact" for the exact-match ablation
    parallel: bool = False  # the session runs with parallel calls: its models draft them (SimSettings.parallel)


WIRE_RECORDS = (Action, Observation, Proposal, Review, SimRequest, Step, ToolCall, Usage, UserToolCall, Verdict)


def _by_fields(cls: type) -> Callable[[Any], tuple[type, tuple[Any, ...]]]:
    """``cls(*values)`` rebuilds the record: every field is an ``__init__`` parameter, in order."""
    names = [f.name for f in fields(cls)]
    assert all(f.init for f in fields(cls)), cls
    get = operator.attrgetter(*names)
    if len(names) == 1:
        return lambda obj: (cls, (get(obj),))
    return lambda obj: (cls, get(obj))


_TABLE = copyreg.dispatch_table.copy()
_TABLE.update({cls: _by_fields(cls) for cls in WIRE_RECORDS})


def packed(items: Sequence[Any]) -> bytes:
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _TABLE
    pickler.dump(list(items))
    return buf.getvalue()


def unpacked(items: Sequence[Any] | bytes) -> list[Any]:
    return pickle.loads(items) if isinstance(items, bytes) else list(items)
