"""The house's walls: which packages may import which. A test, so a shortcut across a wall fails CI.

The walls are import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``): no import cycle at
any level, the package's floors, ``serve/``'s parts, and the Responses API's models apart from its
implementation. ``docs/architecture.md`` draws them."""

from __future__ import annotations

import ast
import dataclasses
import functools
import logging
import tomllib
from pathlib import Path

import pytest
from importlinter import cli

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "specagent_ray"


@functools.cache
def imported(path: Path, package: Path = PACKAGE) -> frozenset[str]:
    """Every module ``path`` imports, as absolute dotted names (relative imports resolved)."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return frozenset(names)


def offenders(inside: str, forbidden: str, exempt: str | None = None, package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted((package / inside).rglob("*.py")):
        if exempt and exempt in path.relative_to(package).parts:
            continue
        bad = sorted(n for n in imported(path, package) if n == forbidden or n.startswith(forbidden + "."))
        if bad:
            found.append(f"{path.relative_to(package)}: {', '.join(bad)}")
    return found


def lint_imports(**kwargs) -> int:
    """import-linter's check, leaving the process's loggers as they were: its CLI configures logging with
    ``dictConfig``, which disables every logger that exists then (other tests' ``caplog`` would see nothing)."""
    loggers = [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    disabled = {lg.name: lg.disabled for lg in loggers}
    try:
        return cli.lint_imports(**kwargs)
    finally:
        for lg in loggers:
            lg.disabled = disabled[lg.name]


def test_production_code_never_imports_the_test_fixtures():
    assert offenders(".", "specagent_ray.testing", exempt="testing") == []


def test_the_walls_catch_a_relative_import(tmp_path):
    """The checker itself can fail: a relative import of the fixtures is seen."""
    assert "specagent_ray.ports.free_port" in imported(PACKAGE / "launch" / "main_job.py")
    module = tmp_path / "specagent_ray" / "serve" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text("from ..testing.http import serve_in_thread\n")
    assert offenders(".", "specagent_ray.testing", exempt="testing", package=tmp_path / "specagent_ray") == [
        "serve/x.py: specagent_ray.testing.http, specagent_ray.testing.http.serve_in_thread"]


@pytest.mark.parametrize("wall", ["serve", "protocol", "models", "tools", "costs", "telemetry", "storage", "control",
                                  "sim", "launch", "loadtest"])
@pytest.mark.parametrize("bench", ["bench", "planner", "results"])
def test_the_serving_layer_never_imports_the_bench(wall, bench):
    assert offenders(wall, f"specagent_ray.{bench}") == []


def test_the_coordinator_only_coordinates():
    """Assembly, recovery, group commit and reports live in their own modules; the coordinator stays small."""
    lines = len((PACKAGE / "serve" / "sessions" / "coordinator.py").read_text().splitlines())
    assert lines < 250, f"serve/sessions/coordinator.py has {lines} lines"


def test_the_import_contracts_hold():
    """Every contract of ``[tool.importlinter]`` is kept (the checker prints the broken ones)."""
    assert lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True) == 0


def _fake_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for folder in path.relative_to(root).parents:
            if str(folder) != ".":
                (root / folder / "__init__.py").touch()


def _toml(v: object) -> str:
    return "[" + ", ".join(f'"{x}"' for x in v) + "]" if isinstance(v, list) else f'"{v}"'


@pytest.mark.parametrize("offence", ["core imports sessions", "a cycle inside a function", "none"])
def test_the_contracts_catch_an_import_up_and_a_hidden_cycle(tmp_path, monkeypatch, offence):
    """The same contracts, on a package named ``fake`` with serve/'s parts, break where they should:
    a part importing one above it, and a cycle between two modules hidden in a function body."""
    files = {f"fake/serve/{part}/m.py": "" for part in
             ("gateway", "responses", "sessions", "engines", "toolhost", "log", "core")}
    files["fake/serve/app.py"] = "from .gateway import m\n"
    if offence == "core imports sessions":
        files["fake/serve/core/m.py"] = "from ..sessions import m\n"
    elif offence == "a cycle inside a function":
        files["fake/serve/core/a.py"] = "from . import b\n"
        files["fake/serve/core/b.py"] = "def f():\n    from . import a\n"
    _fake_package(tmp_path, files)
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = [c for c in config["contracts"] if c["type"] == "acyclic_siblings" or "serve/'s parts" in c["name"]]
    lines = ["[tool.importlinter]", 'root_package = "fake"']
    for c in contracts:
        lines.append("[[tool.importlinter.contracts]]")
        lines += [f"{k} = {_toml(v).replace('specagent_ray', 'fake')}" for k, v in c.items()]
    (tmp_path / "fake.toml").write_text("\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    broken = lint_imports(config_filename=str(tmp_path / "fake.toml"), no_cache=True, no_logo=True)
    assert broken == (0 if offence == "none" else 1)


def test_serve_has_parts_and_a_small_top():
    """At least 4 sub-packages name serve/'s parts; at most 6 modules stay at its top."""
    parts = [p for p in (PACKAGE / "serve").iterdir() if (p / "__init__.py").exists()]
    top = list((PACKAGE / "serve").glob("*.py"))
    assert len(parts) >= 4 and len(top) <= 6, (sorted(p.name for p in parts), sorted(p.name for p in top))


MODULE_LINES = 400
FUNCTION_LINES = 60
# Where a function may be longer than FUNCTION_LINES, and why: one line each. Empty today.
LONG_FUNCTIONS: dict[str, str] = {}


def long_functions(root: Path, limit: int = FUNCTION_LINES) -> dict[str, int]:
    """Every function or method under ``root`` (a folder or one file) longer than ``limit`` lines, as
    ``path::qualified.name``; a nested function counts inside its parent and on its own."""
    found: dict[str, int] = {}

    def walk(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}."
                if not isinstance(child, ast.ClassDef) and (n := child.end_lineno - child.lineno + 1) > limit:
                    found[f"{path}::{name[:-1]}"] = n
            walk(child, path, name)

    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    for f in files:
        walk(ast.parse(f.read_text()), str(f.relative_to(root.parent if root.is_file() else PACKAGE)), "")
    return found


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert long == {}


@pytest.mark.parametrize("root", ["protocol", "serve", "cli.py"])
def test_no_function_is_over_60_lines_in_the_core_the_server_and_the_cli(root):
    long = {k: n for k, n in long_functions(PACKAGE / root).items() if k not in LONG_FUNCTIONS}
    assert long == {}, "split them, or name each in LONG_FUNCTIONS with its reason"


def test_the_function_check_sees_a_long_method_and_a_long_nested_function(tmp_path):
    def body(indent: int) -> list[str]:
        return [" " * indent + f"x{i} = {i}" for i in range(FUNCTION_LINES)]

    lines = ["class C:", "    def short(self):", "        return 1", "", "    def long(self):", *body(8),
             "", "", "def outer():", "    def inner():", *body(8), "    return inner"]
    module = tmp_path / "m.py"
    module.write_text("\n".join(lines) + "\n")
    assert long_functions(module) == {"m.py::C.long": FUNCTION_LINES + 1, "m.py::outer": FUNCTION_LINES + 3,
                                      "m.py::outer.inner": FUNCTION_LINES + 1}


def test_a_session_is_what_the_parts_below_it_take():
    """``core.views``' protocols and ``log.group_commit.Journaled`` name only what ``Session`` has: the
    engines, the tool host and the log take a session through them without importing it."""
    from specagent_ray.serve.core.views import FinishedSession, SessionView
    from specagent_ray.serve.log.group_commit import Journaled
    from specagent_ray.serve.sessions.session import Session

    has = {f.name for f in dataclasses.fields(Session)} | set(dir(Session))
    for protocol in (SessionView, FinishedSession, Journaled):
        wanted = set(protocol.__annotations__) | {n for n in vars(protocol) if not n.startswith("_")}
        assert wanted - has == set(), protocol.__name__


def test_the_modules_the_scheduler_groups_exist():
    """conftest.py groups test modules by path (Ray modules, torch modules): a moved module would
    silently leave its group, and run beside a Ray cluster or pay vLLM's import in a second worker."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_conftest", REPO / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    listed = set(conftest.RAY_MODULES) | conftest.TORCH_MODULES
    assert [m for m in sorted(listed) if not (REPO / m).is_file()] == []


def test_no_two_test_files_share_a_name():
    """pytest imports test files by basename (no packages under tests/): two of one name stop collection."""
    from collections import Counter
    from pathlib import Path

    names = Counter(p.name for p in Path(__file__).parents[1].rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
