"""``bench chaos`` in small: two sessions under two faults through the real command, and its counting.

The run is the real one (the sim profile's coordinator, session log, lease and tau2 tool host in process,
a store that fails, a coordinator crashed and succeeded), only shorter; its table and last line are what
a script reads. The counting is checked against a log that does carry an infrastructure error."""

from __future__ import annotations

import re

from specagent_ray.bench.served.chaos import plan
from specagent_ray.cli import main
from specagent_ray.launch.workload import infrastructure_errors, observation_texts

LAST = re.compile(r"^lost (\d+), duplicated (\d+), error observations (\d+)$")


def test_a_tiny_chaos_run_prints_one_row_per_fault_and_the_totals_last(capsys):
    code = main(["bench", "chaos", "--sessions", "2", "--tasks", "7,9", "--faults", "store-errors,coordinator-killed",
                 "--lease-s", "1", "--spread-s", "1", "--bound-s", "30"])
    out = capsys.readouterr().out
    lines = out.rstrip("\n").splitlines()
    assert LAST.match(lines[-1]), lines[-1]
    assert lines[-1] == "lost 0, duplicated 0, error observations 0" and code == 0, out
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in lines if line.startswith("│")}
    assert list(rows) == ["none", "store-errors", "coordinator-killed"], out
    for fault, cells in rows.items():
        sessions, done, failed, lost = map(int, cells[:4])
        assert sessions == 2 and done + failed == 2 and lost == 0, (fault, cells)
        ran = list(map(int, cells[5].split("/")))
        assert ran[2] == 0 and sum(ran) >= 2, (fault, cells)  # tasks 7 and 9 write; none twice
        assert cells[6] == "0" and cells[7] == "0", (fault, cells)  # no write without an intent, no error text
    assert "successor serving after" in out  # the coordinator was really killed and succeeded


def test_an_infrastructure_error_anywhere_in_an_observation_is_found():
    commit = {"t": "commit", "steps": [
        {"observation": {"content": "ok", "parts": [{"content": "Error: ServiceUnavailable: not acknowledged"}]}},
        {"observation": {"content": "fine", "user_calls": [{"content": "chaos: injected store error (get)"}]}},
        {"observation": None}]}
    result = {"t": "tool_result", "observation": {"content": "7"}}
    assert sorted(infrastructure_errors([commit, result])) == [
        "Error: ServiceUnavailable: not acknowledged", "chaos: injected store error (get)"]
    assert {"ok", "fine", "7"} <= set(observation_texts(commit)) | set(observation_texts(result))


def test_the_baselines_run_first_and_the_mcp_fault_after_its_own():
    assert plan(("cpu-hog",)) == ["none", "cpu-hog"]
    assert plan(("mcp-server-killed", "store-errors")) == ["none", "store-errors", "none (mcp)", "mcp-server-killed"]
