"""Which tests of the fast tier's modules run in the slow tier only: ``tests/slow_tier.txt``.

The whole suite (the README's test command, CI) runs every test. The fast tier (``-m "not slow"``, the
developer's loop) leaves out whole modules marked ``slow`` and the tests ``tests/slow_tier.txt`` names,
one node id a line, grouped under ``#`` comments that say why. ``tests/conftest.py`` marks them and
refuses a run where the file names a test that does not exist, or where it would leave a module without
one fast test (mark such a module ``slow`` instead, in the module).

Candidates come from a measured run, not from judgement alone::

    pytest -m "not slow" --durations=0 --durations-min=0 > durations.txt
    python -m specagent_ray.testing.slow_tier durations.txt --min-s 0.5

prints the node ids whose setup, call and teardown together took at least ``--min-s`` seconds and are
not listed yet, keeping each module's fastest test fast where all of its tests would go.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+::.*\S)\s*$")  # a parameter id may hold spaces


def read_listed(path: Path) -> list[str]:
    """The node ids a tier file lists, in order (blank lines and ``#`` comments skipped)."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def left_without_a_fast_test(collected: Iterable[str], slow: set[str]) -> list[str]:
    """Modules with collected tests that ``slow`` would all take out of the fast tier."""
    fast: dict[str, bool] = defaultdict(bool)
    for nodeid in collected:
        fast[module_of(nodeid)] |= nodeid not in slow
    return sorted(m for m, any_fast in fast.items() if not any_fast)


def durations(lines: Iterable[str]) -> dict[str, float]:
    """Seconds per node id, setup + call + teardown, from pytest's ``--durations=0`` report."""
    total: dict[str, float] = defaultdict(float)
    for line in lines:
        m = DURATION.match(line)
        if m:
            total[m.group(3)] += float(m.group(1))
    return dict(total)


def candidates(timed: dict[str, float], listed: set[str], min_s: float) -> list[str]:
    """Node ids of at least ``min_s`` seconds not yet ``listed``, slowest first; each module keeps its
    fastest not-listed test out of them where every one of its tests would go."""
    chosen = {n for n, s in timed.items() if s >= min_s and n not in listed}
    for module in left_without_a_fast_test(timed, chosen | listed):
        remaining = [n for n in timed if module_of(n) == module and n not in listed]
        if remaining:
            chosen.discard(min(remaining, key=timed.__getitem__))
    return sorted(chosen, key=lambda n: -timed[n])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specagent_ray.testing.slow_tier", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("durations", type=Path, help="a fast-tier run's output with --durations=0 --durations-min=0")
    p.add_argument("--min-s", type=float, default=0.5, help="seconds a test takes to be a candidate (0.5)")
    p.add_argument("--tier-file", type=Path, default=Path("tests/slow_tier.txt"), help="the listed ones")
    args = p.parse_args(argv)
    timed = durations(args.durations.read_text().splitlines())
    listed = set(read_listed(args.tier_file)) if args.tier_file.exists() else set()
    for nodeid in candidates(timed, listed, args.min_s):
        print(f"{nodeid}  # {timed[nodeid]:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
