"""Mutation checks of the safety tests, run on demand (not part of the suite).

    python -m specagent_ray.testing.mutants                  # every mutant
    python -m specagent_ray.testing.mutants --only NAME      # one (repeatable); --list names them
    python -m specagent_ray.testing.mutants --only NAME --tests NODEID   # does this other test catch it?

Each mutant breaks one guarding line of the package: the exact original text, the text put in its place,
and the tests that must catch it. The script copies the package and its tests to a temporary folder (the
working tree is never edited), checks that every listed test passes there unmutated, then for each mutant
edits the copy, runs each of its tests on its own (``pytest -x -q``, the copy first on ``PYTHONPATH``) and
puts the original back. A mutant is *caught* when every one of its tests fails, *missed* when one passes,
and an *error* when its original text is not found once (the code moved: update the table) or pytest could
not run. Prints a table; exits 1 if any mutant is missed or in error.

A new mechanism that guards a safety rule adds its mutant here, with the test that must catch it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("specagent_ray", "tests", "deployments", "docs", "k8s", "cluster", "pyproject.toml", "README.md")
PYTEST = ("-x", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "no:locust", "-o", "addopts=")


@dataclass(frozen=True)
class Mutant:
    """One broken line: ``original`` (exact, found ``count`` times in ``file``) becomes ``mutated``; each of
    ``tests`` (pytest node ids or files) must fail on it."""

    name: str
    file: str
    original: str
    mutated: str
    tests: tuple[str, ...]
    why: str
    count: int = 1


CHAIN = "tests/unit/test_chain_safety.py::"
SERVED_CHAIN = "tests/unit/serve/sessions/test_chain_served.py::"
SERVED_CRITICAL = "tests/unit/serve/sessions/test_critical_served.py::"
PROTOCOL, RUNNER = "specagent_ray/protocol/", "specagent_ray/serve/sessions/runner.py"
REVIEW, CHAIN_RULE = PROTOCOL + "review.py", PROTOCOL + "chain.py"

MUTANTS = (
    Mutant("chain-remit-lets-critical-through", CHAIN_RULE,
           "    if tier not in rule.settles and verdict.accepted_prefix == len(steps):\n",
           "    if tier not in rule.settles | {Tier.CRITICAL} and verdict.accepted_prefix == len(steps):\n",
           (CHAIN + "test_the_mid_never_settles_outside_its_remit",
            CHAIN + "test_the_mid_never_settles_a_critical_write_even_when_allowed_and_it_still_gets_its_second_check",
            SERVED_CHAIN + "test_a_block_whose_staged_step_is_critical_escalates_block_by_block"),
           "the mid verifier settles an accept of a CRITICAL block outside its remit"),
    Mutant("chain-staged-tier-as-write", CHAIN_RULE,
           "    tier = run.tiers.tier(steps[-1].action) if steps[-1].staged else Tier.READ\n",
           "    tier = Tier.WRITE\n",
           (CHAIN + "test_the_mid_never_settles_outside_its_remit",
            SERVED_CHAIN + "test_a_block_whose_staged_step_is_critical_escalates_block_by_block"),
           "the remit check reads every staged step as a plain write (ChainRule.settles is never asked of critical)"),
    Mutant("critical-check-not-served", RUNNER,
           "chain=self.cfg.chain.rule(), critical=self.cfg.critical.check())\n",
           "chain=self.cfg.chain.rule())\n",
           (SERVED_CRITICAL + "test_the_profiles_critical_check_is_the_one_a_served_session_runs",),
           "served sessions ignore the profile's critical section (always agree, k=2)"),
    Mutant("second-check-off", REVIEW,
           "    return await second_check(run, steps, ruling)\n",
           "    return ruling\n",
           (SERVED_CRITICAL + "test_every_weak_critical_write_that_runs_was_confirmed_by_the_second_check",
            SERVED_CRITICAL + "test_the_profiles_critical_check_is_the_one_a_served_session_runs",
            CHAIN + "test_the_mid_never_settles_outside_its_remit",
            "tests/unit/test_tiers_safety.py"),
           "no critical call gets its second check"),
    Mutant("restore-resends-calls", "specagent_ray/serve/sessions/session.py",
           "                    self.ledger.calls.extend(call_from(c.model_dump()) for c in calls)\n",
           "                    [self.ledger.record(call_from(c.model_dump())) for c in calls]\n",
           ("tests/unit/telemetry/test_meter_fleet.py::test_restored_calls_are_not_sent_again",),
           "a replayed session's calls reach the GPU meter a second time", count=2),
    Mutant("book-seals-finished-calls-only", "specagent_ray/telemetry/meter_book.py",
           "            a = attribute(done, spread(done, self._spans[role]))\n",
           "            a = attribute(done, spread(done, [s for s in self._spans[role] if s.end <= cut]))\n",
           ("tests/unit/telemetry/test_meter_book.py::test_conservation_over_a_run_sealed_or_live",),
           "sealing charges a sealed window only to calls that ended before the cut (tenants' shares move)"),
    Mutant("late-duplicate-after-approval", RUNNER,
           "            obs = await self.run_keyed(call, key)\n",
           "            obs = await self.run_keyed(call, key)\n"
           "            if approval is not None:  # mutant: an approved write runs again, later, under no key\n"
           "                await asyncio.sleep(0.5)\n"
           "                await self._run(call, None)\n",
           ("tests/integration/test_responses_no_duplicates.py",),
           "an approved write runs a second time 0.5 s after the first (a fixed 0.3 s wait misses it)"),
    Mutant("partial-accept-runs-every-staged-call", PROTOCOL + "accept.py",
           '    await run.execute_and_commit(accepted, "weak")',
           '    await run.execute_and_commit(staged, "weak")',
           ("tests/unit/test_safety_property.py::test_no_weak_write_reaches_a_tool_quick",),
           "issue 44's pinned mutant: after a partial accept the loop runs every staged call, rejected ones too"),
    Mutant("draft-runs-writes", PROTOCOL + "speculation.py",
           "        if run.tiers.classify(action) is Effect.WRITE:\n",
           "        if False:\n",
           ("tests/unit/test_safety_property.py::test_no_weak_write_reaches_a_tool_quick",),
           "the drafter runs a weak write at once, unreviewed, like a read"),
    Mutant("execute-skips-valid", PROTOCOL + "runtime.py",
           '        reason = self.validity.invalid_reason(action) if action is not None else "no action"\n',
           '        reason = None if action is not None else "no action"\n',
           ("tests/unit/test_safety_property.py::test_no_weak_write_reaches_a_tool_quick",),
           "the one guarded path runs an action without valid(): an invalid repair or strong step reaches a tool"),
    Mutant("tier-table-lowers-a-call", PROTOCOL + "tiers.py",
           "        return raised if raised.rank > base.rank else base\n",
           "        return raised\n",
           ("tests/unit/test_tiers_safety.py::test_a_tier_table_cannot_lower_a_write_to_a_read",),
           "a tier table lowers a write to a read, so the drafter runs it at once, unreviewed"),
    Mutant("strong-verdict-unchecked", PROTOCOL + "model_calls.py",
           "    return checked(answer.verdict, block)\n",
           "    return answer.verdict\n",
           ("tests/unit/test_safety_property.py::test_no_weak_write_reaches_a_tool_quick",),
           "the strong verifier's verdict is trusted as it came: a prefix out of range, per-call answers of any shape"),
    Mutant("mid-verdict-unchecked", PROTOCOL + "model_calls.py",
           "    verdict = checked(answer.verdict, block)\n",
           "    verdict = answer.verdict\n",
           ("tests/unit/test_chain_safety.py",),
           "the mid verifier's verdict is trusted as it came (the verify skeleton's check, skipped on the mid side)"),
    Mutant("lost-drafter-commits-its-reads", PROTOCOL + "speculation.py",
           "    if block.lost is not None:\n",
           "    if False:\n",
           ("tests/unit/test_speculation.py::test_lost_drafter_drops_the_block_and_redrafts_from_committed_history",),
           "a drafter lost mid-block has its reads committed instead of dropped (the redraft variant skipped)"),
    Mutant("repair-repeats-an-accepted-call", PROTOCOL + "repair.py",
           "    why = None if fused is None else run.validity.invalid_reason(fused) or _repeats(fused, ran)\n",
           "    why = None if fused is None else run.validity.invalid_reason(fused)\n",
           (("tests/unit/test_parallel_calls.py"
             "::test_a_fused_repair_that_repeats_an_accepted_call_is_refused_so_no_write_runs_twice"),),
           "after a partial accept a fused repair runs an accepted call again: a second write"),
    Mutant("intent-rerun-under-new-key", RUNNER,
           "s.resolved(intent, s.results.get(intent.key) or await self.run_keyed(call, intent.key))",
           "s.resolved(intent, s.results.get(intent.key) or await self.run_keyed(call, intent.key + '-again'))",
           (("tests/unit/serve/sessions/test_parallel_intents.py"
             "::test_a_crash_between_the_accepted_writes_of_one_action_runs_neither_twice"),),
           "issue 44's crash test: a restart reruns a logged intent under a new key, so the write runs twice"),
)


def copy_tree(into: Path) -> None:
    """The package, its tests and what they read, without caches, into ``into``."""
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, into / name)


def pytest(where: Path, target: str) -> tuple[int, str]:
    """Run one test target in the copy; its exit status and the tail of its output."""
    # no bytecode cache: a mutant of the same size written in the second of the last compile would be stale
    env = {**os.environ, "PYTHONPATH": str(where), "PYTHONDONTWRITEBYTECODE": "1", "SPECAGENT_TEST_BYTECODE": "0"}
    out = subprocess.run([sys.executable, "-m", "pytest", *PYTEST, target], cwd=where, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    return out.returncode, (out.stdout + out.stderr)[-2000:]


def imports_the_copy(where: Path) -> bool:
    env = {**os.environ, "PYTHONPATH": str(where), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", "import specagent_ray; print(specagent_ray.__file__)"],
                         cwd=where, env=env, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()).resolve().is_relative_to(where.resolve())


def baseline(where: Path, mutants: list[Mutant]) -> list[str]:
    """The tests that fail with no mutant applied (a mutant 'caught' by a failing test proves nothing)."""
    failing = []
    for target in sorted({t for m in mutants for t in m.tests}):
        code, tail = pytest(where, target)
        if code != 0:
            failing.append(f"{target} (exit {code}):\n{tail}")
    return failing


def check(where: Path, m: Mutant, tests: tuple[str, ...]) -> tuple[str, str]:
    """Apply ``m`` in the copy, run each test, put the original back: (status, detail)."""
    path = where / m.file
    text = path.read_text()
    found = text.count(m.original)
    if found != m.count:
        return "error", f"original text found {found} times in {m.file}, expected {m.count}"
    path.write_text(text.replace(m.original, m.mutated))
    try:
        results = {t: pytest(where, t) for t in tests}
    finally:
        path.write_text(text)
    passed = [t for t, (code, _) in results.items() if code == 0]
    broken = [f"{t} exit {code}: {tail[-600:]}" for t, (code, tail) in results.items() if code not in (0, 1)]
    if broken:
        return "error", "; ".join(broken)
    if passed:
        return "missed", "passed: " + ", ".join(passed)
    return "caught", "failed: " + ", ".join(short(t) for t in tests)


def short(target: str) -> str:
    return target.rsplit("/", 1)[-1]


def table(rows: list[tuple[str, str, str, float]]) -> str:
    width = max(len(r[0]) for r in rows)
    lines = [f"{'mutant':<{width}}  status  seconds  detail", f"{'-' * width}  ------  -------  ------"]
    lines += [f"{name:<{width}}  {status:<6}  {secs:7.1f}  {detail}" for name, status, detail, secs in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this mutant (repeatable)")
    parser.add_argument("--tests", action="append", metavar="TARGET", help="run these tests instead of the table's")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTANTS:
            print(f"{m.name}: {m.file}: {m.why}\n    must be caught by: {', '.join(m.tests)}")
        return 0
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"no such mutant: {', '.join(sorted(unknown))} (see --list)")
    with tempfile.TemporaryDirectory(prefix="specagent-mutants-") as tmp:
        where = Path(tmp)
        copy_tree(where)
        if not imports_the_copy(where):
            print("the copy is not what python imports (PYTHONPATH is shadowed): nothing checked")
            return 2
        failing = baseline(where, [Mutant(m.name, m.file, "", "", tuple(args.tests or m.tests), "") for m in chosen])
        if failing:
            print("these tests fail with no mutant applied:\n" + "\n".join(failing))
            return 2
        rows = []
        for m in chosen:
            start = time.monotonic()
            status, detail = check(where, m, tuple(args.tests or m.tests))
            rows.append((m.name, status, detail, time.monotonic() - start))
            print(f"{m.name}: {status}", flush=True)
    print(table(rows))
    return 1 if any(status != "caught" for _, status, _, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
