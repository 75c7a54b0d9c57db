"""The README's two set-up commands, CI and the main job stay in step."""

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _commands():
    """The commands of the README's first lines, in backticks after "Main job (...):" and "Tests (...):"."""
    lines = README.splitlines()
    return [re.search(r"`([^`]+)`\s*$", line).group(1) for line in lines[:3] if line.startswith(("Main job", "Tests"))]


def _quick_start() -> str:
    return README.split("## Quick start", 1)[1].split("\n## ", 1)[0]


def test_readme_opens_with_the_two_commands():
    main, tests = _commands()
    assert "pip install" in main and ".[bench,cpu]" in main
    assert "pytest" in tests and ".[dev,cpu]" in tests


def test_the_first_command_installs_and_runs_the_main_job_with_no_gpu_or_keys():
    from specagent_ray.cli import build_parser

    main, _ = _commands()
    last = shlex.split(main.split("&&")[-1])
    assert last[0] == ".venv/bin/specagent-ray" and last[1] == "serve"
    args = build_parser().parse_args(last[1:])
    assert args.command == "serve" and args.profile is None  # no profile: the main job, sim then local-cpu
    first_line = README.splitlines()[0].lower()
    assert "no gpu" in first_line and "keys" in first_line


def test_ci_runs_both_readme_commands_as_written_each_in_a_fresh_venv():
    main, tests = _commands()
    ci = (ROOT / ".ci" / "run").read_text()
    lines = [line for line in ci.splitlines() if not line.lstrip().startswith("#")]
    runs = [i for i, line in enumerate(lines) if main in line or tests in line]
    assert [main in lines[i] for i in runs] == [True, False], "the main job, then the tests, each once"
    for i in runs:  # the venv each command makes is new: nothing left from before
        assert any(line.startswith("rm -rf .venv") for line in lines[:i][-6:]), lines[max(0, i - 6):i + 1]
    assert "set -euo pipefail" in ci  # a failing command fails CI


def test_the_quick_start_states_what_the_main_job_does():
    from specagent_ray.launch import main_job
    from specagent_ray.launch.deployment_profiles import load_profile
    from specagent_ray.launch.workload import LOCAL_MODELS, apps_of

    text = " ".join(_quick_start().split())
    assert str(main_job.LOG) in text and "--verbose" in text
    assert f"{main_job.SIM_TASKS} tasks; its table appears" in text and f"(they load while the sim run goes), " \
        f"{main_job.REAL_TASKS} tasks" in text
    for name, seed in LOCAL_MODELS.items():  # what each role runs
        assert f"`{name}`, seed {seed}" in text
    hardware = main_job.hardware_label(apps_of(load_profile("sim")))  # the sim table's HBM estimate
    for model in (hardware.split(" on ")[0], hardware.split(" + ")[1].split(" on ")[0]):
        assert model.lower() in text.lower()
    for command, _ in main_job.NEXT_STEPS:  # the three lines the main job ends with
        assert command in text


def test_cli_help_teaches(capsys):
    import pytest

    from specagent_ray.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "tau2", "--help"])
    out = capsys.readouterr().out
    for flag in ("--domain", "--methods", "--trials", "--k", "--review-messages", "--out"):
        assert flag in out
