"""The ``specagent-ray`` command as a registry: every command and bench it lists can run, ``--help`` shows them
in their groups, and the set of commands is the one the README and the docs teach."""

from __future__ import annotations

import argparse
import io
from contextlib import redirect_stdout

import pytest

from specagent_ray.cli import build_parser, main

COMMANDS = {"serve", "loadtest", "bench", "results", "plan"}
BENCHES = {"tau2", "bfcl", "beyond", "batching", "scale", "restart", "chaos", "calls", "binder", "meter", "engines",
           "roofline", "theory", "throughput", "adaptive"}


def choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return dict(sub.choices)


def help_of(*argv: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return out.getvalue()


def test_the_same_commands_and_benches_as_before_the_registry():
    top = choices(build_parser())
    assert set(top) == COMMANDS
    assert set(choices(top["bench"])) == BENCHES


def test_every_command_has_its_run_beside_its_parser():
    top = choices(build_parser())
    leaves = {name: p for name, p in top.items() if name != "bench"} | choices(top["bench"])
    missing = sorted(name for name, p in leaves.items() if not callable(p.get_default("run")))
    assert missing == []
    assert top["bench"].get_default("run") is None  # a group, not a command: it needs a bench


@pytest.mark.parametrize("argv, names", [((), COMMANDS), (("bench",), BENCHES)])
def test_help_lists_each_command_once_under_a_group(argv, names):
    text = help_of(*argv)
    listing = text.split("commands:\n" if not argv else "benches:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    groups = [line for line in listing if line.startswith("  ") and not line.startswith("   ")]
    assert len(groups) >= 3 and all(g.rstrip().endswith(":") for g in groups)
    listed = [line.split()[0] for line in listing if line.startswith("    ") and line[4] != " "]
    assert sorted(listed) == sorted(names)


def test_a_bench_still_teaches_its_flags():
    text = help_of("bench", "tau2")
    assert "--domain" in text and "--backend" in text and "real engines (--backend vllm)" in text
    assert "--category" in help_of("bench", "bfcl")
