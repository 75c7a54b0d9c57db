"""The slow tier's list (``tests/slow_tier.txt``) and the candidates ``testing/slow_tier.py`` proposes for it."""

from __future__ import annotations

from pathlib import Path

from specagent_ray.testing.slow_tier import candidates, durations, left_without_a_fast_test, main, read_listed

REPORT = """\
============================= slowest durations ==============================
3.00s call     tests/a.py::test_slow_one
0.20s setup    tests/a.py::test_slow_one
0.90s call     tests/a.py::test_slow_two
0.05s call     tests/a.py::test_fast
2.00s call     tests/b.py::test_only[x]
1.00s call     tests/b.py::test_only[y]
0.10s teardown tests/b.py::test_only[y]
0.30s call     tests/c.py::test_spaced[weak + strong]
1759 passed in 53.06s
"""


def test_durations_add_setup_call_and_teardown_per_test():
    assert durations(REPORT.splitlines()) == {"tests/a.py::test_slow_one": 3.2, "tests/a.py::test_slow_two": 0.9,
                                              "tests/a.py::test_fast": 0.05, "tests/b.py::test_only[x]": 2.0,
                                              "tests/b.py::test_only[y]": 1.1, "tests/c.py::test_spaced[weak + strong]": 0.3}


def test_candidates_are_slowest_first_and_a_module_keeps_its_fastest_test():
    timed = durations(REPORT.splitlines())
    assert candidates(timed, set(), 0.5) == ["tests/a.py::test_slow_one", "tests/b.py::test_only[x]",
                                             "tests/a.py::test_slow_two"]  # b.py keeps [y], its fastest
    assert candidates(timed, {"tests/b.py::test_only[y]"}, 0.5) == [
        "tests/a.py::test_slow_one", "tests/a.py::test_slow_two"]  # [x] is b.py's last fast test now


def test_a_module_left_without_a_fast_test_is_named():
    collected = ["tests/a.py::test_1", "tests/a.py::test_2", "tests/b.py::test_1"]
    assert left_without_a_fast_test(collected, {"tests/a.py::test_1"}) == []
    assert left_without_a_fast_test(collected, {"tests/a.py::test_1", "tests/a.py::test_2"}) == ["tests/a.py"]


def test_the_shipped_list_reads_as_node_ids_without_duplicates():
    listed = read_listed(Path(__file__).parents[1] / "slow_tier.txt")
    assert listed and all(n.startswith("tests/") and "::" in n for n in listed)
    assert len(listed) == len(set(listed))


def test_the_command_prints_the_candidates_not_yet_listed(tmp_path, capsys):
    (tmp_path / "d.txt").write_text(REPORT)
    (tmp_path / "tier.txt").write_text("# listed\ntests/a.py::test_slow_one\n")
    assert main([str(tmp_path / "d.txt"), "--tier-file", str(tmp_path / "tier.txt"), "--min-s", "0.5"]) == 0
    assert capsys.readouterr().out.splitlines() == ["tests/b.py::test_only[x]  # 2.00 s",
                                                    "tests/a.py::test_slow_two  # 0.90 s"]
