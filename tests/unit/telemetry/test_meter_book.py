"""The meter's book: the split rule, conservation, idle time, two tenants, a failing node, a restart."""

from __future__ import annotations

import pytest

from specagent_ray.telemetry.attribution import Span, Window, spread
from specagent_ray.telemetry.meter_book import MeterBook, day_of, span_of

DAY = day_of(100.0)


def windows(start: float, n: int, gpu: float = 0.05, dram: float | None = 1e9, dt: float = 0.1) -> list[Window]:
    return [Window(start + i * dt, start + (i + 1) * dt, gpu, dram) for i in range(n)]


def book_with(nodes: dict[str, list[str]]) -> MeterBook:
    book = MeterBook(seal_after_s=5.0)
    for role, names in nodes.items():
        for node in names:
            book.node_state(role, node, None)
    return book


def test_spread_counts_a_call_by_its_overlap_with_each_window() -> None:
    ws = windows(0.0, 3)  # [0, .1), [.1, .2), [.2, .3)
    maps = spread(ws, [Span("a", 0.05, 0.25, 100), Span("b", 0.15, 0.15, 7), Span("c", 0.5, 0.6, 9)])
    assert maps[0] == pytest.approx({"a": 25.0})
    assert maps[1] == pytest.approx({"a": 50.0, "b": 7})
    assert maps[2] == pytest.approx({"a": 25.0})  # "c" ran while nothing was measured: counted nowhere


def test_a_window_is_split_by_tokens_processed() -> None:
    book = book_with({"strong": ["n1"]})
    book.add_windows("strong", "n1", [Window(100.0, 101.0, 0.8, 4e9)])
    book.add_spans("strong", [span_of("t1", "s1", 100.0, 101.0, 300), span_of("t2", "s2", 100.0, 101.0, 100)])
    usage = book.tenant_usage()
    assert usage["t1"][DAY]["strong"]["gpu_seconds"] == pytest.approx(0.6)
    assert usage["t2"][DAY]["strong"]["gpu_seconds"] == pytest.approx(0.2)
    assert usage["t1"][DAY]["strong"]["dram_bytes"] == pytest.approx(3e9)


def test_a_call_alone_on_the_device_gets_its_whole_window() -> None:
    book = book_with({"weak": ["n1"]})
    book.add_windows("weak", "n1", [Window(100.0, 100.1, 0.07, 5e8)])
    book.add_spans("weak", [span_of("t1", "s1", 100.02, 100.05, 12)])
    assert book.session("s1")["weak"].gpu_seconds == pytest.approx(0.07)
    assert book.session("s1")["weak"].dram_bytes == pytest.approx(5e8)


def test_idle_windows_are_reported_and_never_charged() -> None:
    book = book_with({"strong": ["n1"]})
    book.add_windows("strong", "n1", windows(100.0, 10, gpu=0.05))  # 1 s, 0.5 GPU-s busy
    book.add_spans("strong", [span_of("t1", "s1", 100.0, 100.3, 30)])  # active in the first 3 windows only
    totals = book.totals()["roles"]["strong"]
    assert totals["charged"]["gpu_seconds"] == pytest.approx(0.15)
    assert totals["unattributed"]["gpu_seconds"] == pytest.approx(0.35)
    assert book.tenant_usage()["t1"][DAY]["strong"]["gpu_seconds"] == pytest.approx(0.15)


def expected_shares(windows_by_node: list[list[Window]], spans: list[tuple[str, str, float, float, int]]):
    """The split rule worked by hand, apart from the book and from ``attribution``: each window's GPU-seconds go
    to the calls that overlap it, in proportion to the tokens each processed in it (a call's tokens spread
    evenly over its time). Returns ({tenant: gpu_seconds}, {session: gpu_seconds})."""
    tenants: dict[str, float] = {}
    sessions: dict[str, float] = {}
    for w in (w for node in windows_by_node for w in node):
        tokens = {(t, s): n * max(0.0, min(w.end, end) - max(w.start, start)) / (end - start)
                  for t, s, start, end, n in spans}
        total = sum(tokens.values())
        for (t, s), n in tokens.items():
            if n > 0:
                tenants[t] = tenants.get(t, 0.0) + w.gpu_seconds * n / total
                sessions[s] = sessions.get(s, 0.0) + w.gpu_seconds * n / total
    return tenants, sessions


@pytest.mark.parametrize("seal_at", [None, 107.0, 120.0])
def test_conservation_over_a_run_sealed_or_live(seal_at: float | None) -> None:
    """Conservation by role, and each tenant's and each session's charge as the split rule gives it: sealed,
    live, and sealed in part (107: calls that cross the cut are split across the sealed and live windows)."""
    book = book_with({"strong": ["n1", "n2"], "weak": ["n3"]})
    strong = [windows(100.0, 100, gpu=0.07, dram=2e9), windows(100.0, 100, gpu=0.07, dram=2e9)]
    weak = [windows(100.0, 100, gpu=0.03, dram=1e9)]
    for node, ws in zip(("n1", "n2"), strong, strict=True):
        book.add_windows("strong", node, ws)
    book.add_windows("weak", "n3", weak[0])
    calls = [(f"t{i % 3}", f"s{i}", 100.0 + i * 0.37, 100.0 + i * 0.37 + 0.9, 50 + i) for i in range(24)]
    book.add_spans("strong", [span_of(*c) for c in calls])
    book.add_spans("weak", [span_of(*c) for c in calls[::2]])
    if seal_at is not None:
        book.seal(seal_at)
    for role, per_node, ws, mine in (("strong", 0.07 * 100 * 2, strong, calls), ("weak", 0.03 * 100, weak, calls[::2])):
        t = book.totals()["roles"][role]
        assert t["measured"]["gpu_seconds"] == pytest.approx(per_node)
        assert t["charged"]["gpu_seconds"] + t["unattributed"]["gpu_seconds"] == pytest.approx(per_node, rel=1e-9)
        tenants, sessions = expected_shares(ws, mine)
        assert sum(tenants.values()) == pytest.approx(t["charged"]["gpu_seconds"], rel=1e-9)
        usage = book.tenant_usage()
        assert {x: days[DAY][role]["gpu_seconds"] for x, days in usage.items() if role in days[DAY]} == \
            pytest.approx(tenants, rel=1e-9)
        assert {f"s{i}": book.session(f"s{i}")[role].gpu_seconds for i in range(24)
                if role in book.session(f"s{i}")} == pytest.approx(sessions, rel=1e-9)


def test_a_sealed_window_is_never_charged_again() -> None:
    book = book_with({"strong": ["n1"]})
    book.add_windows("strong", "n1", windows(100.0, 10))
    book.add_spans("strong", [span_of("t1", "s1", 100.0, 101.0, 10)])
    first = book.seal(110.0)
    again = book.seal(111.0)
    assert first[("t1", "strong")].gpu_seconds == pytest.approx(0.5)
    assert again == {}
    assert book.tenant_usage()["t1"][DAY]["strong"]["gpu_seconds"] == pytest.approx(0.5)


def test_a_role_with_a_failing_node_is_not_reported_measured_and_the_others_are() -> None:
    book = book_with({"strong": ["n1", "n2"], "weak": ["n3"]})
    book.node_state("strong", "n2", "NVMLError_DriverNotLoaded")
    for role, node in (("strong", "n1"), ("weak", "n3")):
        book.add_windows(role, node, windows(100.0, 5))
        book.add_spans(role, [span_of("t1", "s1", 100.0, 100.5, 5)])
    assert "DriverNotLoaded" in book.state("strong")
    assert book.state("weak") is None
    assert set(book.tenant_usage()["t1"][DAY]) == {"weak"}
    assert set(book.session("s1")) == {"weak"}


def test_a_role_without_a_meter_is_not_measured() -> None:
    book = MeterBook()
    book.add_spans("strong", [span_of("t1", "s1", 100.0, 100.5, 5)])
    assert book.state("strong") is not None
    assert book.tenant_usage() == {} and book.session("s1") == {}


def test_a_meter_that_restarts_leaves_a_gap_and_conservation_holds() -> None:
    book = book_with({"strong": ["n1"]})
    book.add_windows("strong", "n1", windows(100.0, 5))  # [100, 100.5)
    book.add_windows("strong", "n1", windows(101.0, 5))  # the restarted meter's, from 101
    book.add_spans("strong", [span_of("t1", "s1", 100.0, 101.5, 150)])
    t = book.totals()["roles"]["strong"]
    assert t["measured"]["gpu_seconds"] == pytest.approx(0.5)  # the gap was not measured and is not invented
    assert t["charged"]["gpu_seconds"] == pytest.approx(0.5)


def test_a_window_without_dram_makes_the_share_dram_unknown_not_zero() -> None:
    book = book_with({"strong": ["n1"]})
    book.add_windows("strong", "n1", [Window(100.0, 100.1, 0.05, None), Window(100.1, 100.2, 0.05, 1e9)])
    book.add_spans("strong", [span_of("t1", "s1", 100.0, 100.2, 10)])
    assert book.tenant_usage()["t1"][DAY]["strong"] == {"gpu_seconds": pytest.approx(0.1), "dram_bytes": None}


def test_a_late_call_is_counted_as_late() -> None:
    book = book_with({"strong": ["n1"]})
    book.add_windows("strong", "n1", windows(100.0, 10))
    book.seal(200.0)
    book.add_spans("strong", [span_of("t1", "s1", 100.0, 101.0, 10)])
    assert book.late_spans == 1
    assert book.totals()["roles"]["strong"]["unattributed"]["gpu_seconds"] == pytest.approx(0.5)


def test_an_answer_after_new_windows_or_calls_counts_them() -> None:
    book = book_with({"strong": ["n1"]})
    book.add_windows("strong", "n1", windows(100.0, 5))
    book.add_spans("strong", [span_of("t1", "s1", 100.0, 100.5, 10)])
    assert book.session("s1")["strong"].gpu_seconds == pytest.approx(0.25)
    book.add_spans("strong", [span_of("t2", "s2", 100.0, 100.5, 10)])  # now the two share the windows
    assert book.session("s1")["strong"].gpu_seconds == pytest.approx(0.125)
    book.add_windows("strong", "n1", windows(100.5, 5))  # more windows, none with a call: unattributed
    assert book.totals()["roles"]["strong"]["unattributed"]["gpu_seconds"] == pytest.approx(0.25)
    book.seal(200.0)
    assert book.tenant_usage()["t2"][DAY]["strong"]["gpu_seconds"] == pytest.approx(0.125)
