"""The ``specagent-ray`` command: a registry of commands, in groups.

Each command's flags and run live beside its code: a module's ``add_parser(sub)`` adds the command to ``sub``
and sets ``run(args, console) -> exit code`` on its parser. This module only lists them, in the groups that
``specagent-ray --help`` and ``specagent-ray bench --help`` show, and turns the errors a user can fix into one
line and exit code 2."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from .bench.engines import features as engines
from .bench.quality import beyond
from .bench.quality import command as quality
from .bench.roofline import command as roofline
from .bench.served import (
    batching,
    binder_cost,
    chaos,
    meter,
    replica_calls,
    restart,
    scale,
)
from .bench.theory import montecarlo, throughput
from .launch import command as serve
from .loadtest import command as loadtest
from .models.backend import BackendError
from .planner import adaptive
from .planner import command as planner
from .results import command as results
from .storage.base import StoreError

EPILOG = """examples:
  specagent-ray bench tau2 --domain airline --trials 3
  specagent-ray bench tau2 --domain retail --methods strong,weak,specagent --tasks 0,1,2 --k 8
  specagent-ray bench throughput --seconds 3
  specagent-ray bench theory --p 0.5,0.7,0.9
  specagent-ray bench restart --finished 10000 --live 100
  specagent-ray bench roofline --device cpu
  specagent-ray bench engines --features "prefill ahead"
  specagent-ray bench chaos --sessions 12
  specagent-ray bench binder --wire-repeats 30
  specagent-ray bench tau2 --tasks 0,1 --store s3://bench-results/team-a
  specagent-ray results ls
  specagent-ray results compare tau2-airline-seed0.json tau2-airline-seed1.json

All policies in these benches are SIMULATED (seeded replays of tau2 gold actions through an error
model); Pass@1 is measured by tau2's own evaluator; FLOPs, HBM-read and GPU latency are ESTIMATED
from the model specs in specagent_ray/costs/data on a named GPU profile."""

AddParser = Callable[[Any], Any]
Groups = Sequence[tuple[str, Sequence[AddParser]]]


class _Listing:
    """Adds commands to one subparsers action, group by group, and keeps each one's name and help for the
    parent's ``--help`` (argparse lists subcommands in one flat list; this listing replaces it)."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub
        self.groups: list[tuple[str, list[tuple[str, str]]]] = []
        self.parsers: dict[str, argparse.ArgumentParser] = {}

    def group(self, title: str) -> None:
        """The commands added from now on are listed under ``title``."""
        self.groups.append((title, []))

    def add_parser(self, name: str, help: str = "", **kwargs: Any) -> argparse.ArgumentParser:
        self.groups[-1][1].append((name, help))
        self.parsers[name] = self.sub.add_parser(name, **kwargs)
        return self.parsers[name]

    def text(self, what: str) -> str:
        width = max(60, shutil.get_terminal_size().columns - 2)  # argparse's own width
        pad = max(len(name) for _, names in self.groups for name, _ in names) + 6
        lines = [f"{what}:"]
        for title, names in self.groups:
            lines.append(f"  {title}:")
            for name, text in names:
                lines.append(textwrap.fill(text, width, initial_indent=f"    {name}".ljust(pad),
                                           subsequent_indent=" " * pad))
        return "\n".join(lines)


def add_groups(parser: argparse.ArgumentParser, dest: str, plural: str, groups: Groups) -> str:
    """Adds each group's commands under ``parser`` (the one chosen in ``args.<dest>``); returns their listing, for
    its ``--help``."""
    name = dest.upper()
    teaches = f"one of the {plural} below; `{parser.prog} {name} --help` teaches it"
    listing = _Listing(parser.add_subparsers(dest=dest, required=True, metavar=name, help=teaches))
    for title, adds in groups:
        listing.group(title)
        for add in adds:
            add(listing)
    return listing.text(plural)


def _add_bench(sub: Any) -> None:
    bench = sub.add_parser("bench", help="benchmarks (quality, cost, throughput, theory)",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.epilog = add_groups(bench, "bench", "benches", BENCHES)


COMMANDS: Groups = (
    ("run the application", (serve.add_parser, loadtest.add_parser)),
    ("measure and compare", (_add_bench, results.add_parser)),
    ("plan a deployment", (planner.add_parser,)),
)
BENCHES: Groups = (
    ("quality: every method on benchmark tasks, graded (bench/quality/)", (quality.add_parser, beyond.add_parser)),
    ("the served path: the app under load, restarts and faults (bench/served/)",
     (batching.add_parser, scale.add_parser, restart.add_parser, chaos.add_parser, replica_calls.add_parser,
      binder_cost.add_parser, meter.add_parser)),
    ("engines and devices (bench/engines/, bench/roofline/)", (engines.add_parser, roofline.add_parser)),
    ("the protocol loop in a synthetic world (bench/theory/)", (montecarlo.add_parser, throughput.add_parser)),
    ("the K controller at the planner's loads (planner/adaptive.py)", (adaptive.add_parser,)),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specagent-ray", description="SpecAgent: a weak model drafts agent steps, a strong model reviews them.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.epilog = add_groups(p, "command", "commands", COMMANDS) + "\n\n" + EPILOG
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(width=max(Console().width, 132))
    try:
        return args.run(args, console)
    except (ValueError, StoreError, BackendError, TimeoutError) as exc:
        # one line, no traceback; escape() so brackets in keys or S3 messages are not read as markup
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
