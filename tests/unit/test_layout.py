"""The house's walls: which packages may import which. A test, so a shortcut across a wall fails CI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "specagent_ray"


def imported(path: Path, package: Path = PACKAGE) -> set[str]:
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
    return names


def offenders(inside: str, forbidden: str, exempt: str | None = None, package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted((package / inside).rglob("*.py")):
        if exempt and exempt in path.relative_to(package).parts:
            continue
        bad = sorted(n for n in imported(path, package) if n == forbidden or n.startswith(forbidden + "."))
        if bad:
            found.append(f"{path.relative_to(package)}: {', '.join(bad)}")
    return found


def test_production_code_never_imports_the_test_fixtures():
    assert offenders(".", "specagent_ray.testing", exempt="testing") == []


def test_the_walls_catch_a_relative_import(tmp_path):
    """The checker itself can fail: a relative import of the fixtures is seen."""
    assert "specagent_ray.ports.free_port" in imported(PACKAGE / "serve" / "main_job.py")
    module = tmp_path / "specagent_ray" / "serve" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text("from ..testing.http import serve_in_thread\n")
    assert offenders(".", "specagent_ray.testing", exempt="testing", package=tmp_path / "specagent_ray") == [
        "serve/x.py: specagent_ray.testing.http, specagent_ray.testing.http.serve_in_thread"]


@pytest.mark.parametrize("wall", ["serve", "protocol", "models", "tools", "costs", "telemetry", "storage"])
def test_the_serving_layer_never_imports_the_bench(wall):
    assert offenders(wall, "specagent_ray.bench") == []


def test_the_coordinator_only_coordinates():
    """Assembly, recovery, group commit and reports live in their own modules; the coordinator stays small."""
    lines = len((PACKAGE / "serve" / "coordinator.py").read_text().splitlines())
    assert lines < 250, f"serve/coordinator.py has {lines} lines"
