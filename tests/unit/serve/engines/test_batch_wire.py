"""An engine batch's bytes (serve/engines/batch_wire.py): what is packed is what is unpacked."""

import dataclasses
import pickle

from specagent_ray.protocol import types
from specagent_ray.protocol.types import (Action, ActionKind, Effect, Observation, Proposal, Review, Step, ToolCall,
                                          Usage, UserToolCall, Verdict)
from specagent_ray.serve.engines.batch_wire import WIRE_RECORDS, SimRequest, packed, unpacked


def every_field_set() -> list:
    """One of each record, no field left at its default, so a field the wire lost or reordered shows."""
    call = ToolCall("book", {"flight": "HAT001", "seats": [1, 2], "extra": None})
    action = Action(ActionKind.TOOL, call, "t")
    obs = Observation("ok", True, True, (UserToolCall(ToolCall("toggle", {}), "done", True),))
    step = Step(action, obs, "weak", Effect.WRITE)
    staged = Step(Action.message("hi"), None, "strong", Effect.READ)
    usage = Usage(11, 5, 7, 3)
    return [call, action, obs, step, staged, usage,
            Verdict(2, "no", Action.stop()), Proposal(action, usage, 0.25), Review(Verdict(1, "r", action), usage),
            SimRequest("s1", "retail", "t9", 3, (step,), (staged,), "feedback", "exact"),
            ValueError("an engine's error travels too")]


def test_every_record_comes_back_equal_and_of_its_class():
    items = every_field_set()
    back = unpacked(packed(items))
    assert [type(x) for x in back] == [type(x) for x in items]
    assert back[:-1] == items[:-1]
    assert str(back[-1]) == str(items[-1])


def test_the_wire_table_covers_the_protocol_records_a_batch_carries():
    """A record added to protocol.types and sent in a batch must be in the table, or it falls back to
    dataclasses' slow path: this names the ones that are not."""
    frozen = {c for c in vars(types).values() if dataclasses.is_dataclass(c) and isinstance(c, type)
              and c.__dataclass_params__.frozen}
    left_out = {c.__name__ for c in frozen - set(WIRE_RECORDS)}
    assert left_out == {"Event", "History", "Task"}  # never in a batch: a session's events, H's task stays home


def test_the_table_saves_records_without_dataclass_getstate(monkeypatch):
    """The point of the table: no ``fields()`` call per object while packing."""
    calls = []
    real = dataclasses.fields
    monkeypatch.setattr(dataclasses, "fields", lambda c: calls.append(c) or real(c))
    packed(every_field_set())
    assert calls == []
    pickle.dumps(every_field_set())
    assert calls, "the check cannot fail: plain pickle no longer calls fields()"
