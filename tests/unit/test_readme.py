"""The README's two set-up commands and CI stay in step."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    return [line.split(": ", 1)[1].strip("`") for line in lines[:3] if line.startswith(("Main job", "Tests"))]


def test_readme_opens_with_the_two_commands():
    main, tests = _commands()
    assert "specagent-ray serve local-cpu" in main and "pip install" in main and ".[bench,cpu]" in main
    assert "pytest" in tests and ".[dev,cpu]" in tests


def test_ci_runs_the_readme_test_command():
    _, tests = _commands()
    assert tests in (ROOT / ".ci" / "run").read_text()


def test_cli_help_teaches(capsys):
    import pytest

    from specagent_ray.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "tau2", "--help"])
    out = capsys.readouterr().out
    for flag in ("--domain", "--methods", "--trials", "--k", "--review-messages", "--out"):
        assert flag in out
