"""The suite's own scheduling rule: the real-engine Ray unit goes out last (tests/conftest.py)."""

from collections import OrderedDict

from specagent_ray.testing.scheduling import hold_back


def hand_out(units: list[str], last: str) -> list[str]:
    queue = OrderedDict((u, {}) for u in units)
    order = []
    while queue:
        hold_back(queue, last)
        order.append(queue.popitem(last=False)[0])
    return order


def test_the_held_back_unit_goes_out_only_when_it_is_the_last_one_left():
    assert hand_out(["ray", "ray-engines", "torch", "a", "b"], "ray-engines") == ["ray", "torch", "a", "b", "ray-engines"]
    assert hand_out(["ray-engines", "a"], "ray-engines") == ["a", "ray-engines"]
    assert hand_out(["ray-engines"], "ray-engines") == ["ray-engines"]


def test_the_other_units_keep_their_order():
    assert hand_out(["c", "b", "a"], "ray-engines") == ["c", "b", "a"]
