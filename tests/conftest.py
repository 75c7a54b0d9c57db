"""Suite-wide test setup: the README's test command runs on three xdist workers (pyproject's addopts).

Every test module that starts Ray (its tests carry the marker ``cluster`` or ``engines``) is listed in
``RAY_UNITS``. Under xdist each unit is one unit of work, which one worker runs one test after another.
There are two units, and the real-engine one (``LAST``) is handed out only once it is the last unit left:
the other workers have then finished every other module, and two clusters overlap only for the last
minutes (the 2-core VM's load average peaked at 16, measured 2026-12-07; all tests passed). Handed out
at the start, two clusters beside the other workers' tests took the load to 21, where a Ray head timed out
starting and timing tests failed (measured earlier the same day). Each module starts its own cluster: a
shared head per worker (modules connecting and disconnecting in turn) hung a Serve handle call in the
whole suite, after other modules' drivers had come and gone in the same process. xdist's own ``--dist
loadgroup`` would group from ``xdist_group`` marks, but its 3.8 release cannot rename node ids under
pytest 9, so the grouping is by module path here, which the controller (it collects nothing) can see. A
test that starts Ray in a module not listed fails, saying so.

The modules that import torch (``TORCH_MODULES``) form one unit too: those that validate a Ray Serve LLM
``LLMConfig`` (importing ``ray.serve.llm`` imports vLLM and torch, about 10 s of CPU), those that compile
a grammar with xgrammar (about 3 s) and the roofline probe's, so one worker pays each import once
(measured on the 2-core VM).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Bytecode is cached even where the environment says not to (this VM sets PYTHONDONTWRITEBYTECODE=1):
# otherwise every process compiles this package, and pytest rewrites every test module, from source each
# time: about half of each xdist worker's 12 s of collection, and again in every Ray worker, replica and
# subprocess. Set before any test module is imported and before xdist, Ray or a subprocess inherits
# the environment. Caches land in __pycache__/ (git-ignored), keyed by each source file's mtime and size.
# ``SPECAGENT_TEST_BYTECODE=0`` keeps the environment's choice (the mutants script rewrites sources in place).
if os.environ.get("SPECAGENT_TEST_BYTECODE", "1") != "0":
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from specagent_ray.testing.scheduling import hold_back
from specagent_ray.testing.slow_tier import left_without_a_fast_test, read_listed

RAY_UNITS = {
    "ray": ("test_bench_scale", "test_k8s_deploy", "test_multinode", "test_plan_sim",
            "test_ray_telemetry", "test_serve_failures", "test_serve_fencing", "test_serve_local_cpu",
            "test_serve_sim", "test_wheel"),
    "ray-engines": ("test_engines",),
}
LAST = "ray-engines"  # handed out only once it is the last unit left
RAY_MODULES = {f"tests/integration/{name}.py": unit for unit, names in RAY_UNITS.items() for name in names}
TORCH_MODULES = frozenset(f"tests/{name}.py" for name in (
    "unit/test_cluster_config", "unit/test_k8s", "unit/launch/test_profiles", "security/test_api_policy",
    "unit/test_message_format", "unit/serve/messages/test_messages_translate",
    "unit/serve/responses/test_forward_fields", "unit/test_roofline"))
TORCH = "torch"


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: the tests of each of ``RAY_UNITS`` are one, every test of a
    ``TORCH_MODULES`` module another; any other module is one (its module fixtures, Checkov's scan for one,
    then run once, not once per worker)."""
    module = nodeid.split("::", 1)[0]
    if module in RAY_MODULES:
        return RAY_MODULES[module]
    return TORCH if module in TORCH_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class RayApart(LoadScopeScheduling):
        """xdist's scope scheduling with ``scope_of``'s scopes. The largest units go out first
        (``--loadscope-reorder``, on by default): the Ray unit, the run's longest pole. ``LAST`` waits
        until it is the only unit left."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            hold_back(self.workqueue, LAST)
            super()._assign_work_unit(node)

    return RayApart(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    starts_ray = item.get_closest_marker("cluster") or item.get_closest_marker("engines")
    module = item.nodeid.split("::", 1)[0]
    if starts_ray and module not in RAY_MODULES:
        pytest.fail(f"{module} starts Ray (marker cluster or engines) but is not in tests/conftest.py "
                    "RAY_UNITS: listed, it never runs beside another Ray test of its unit", pytrace=False)

# The slow tier's share of the fast tier's modules, by node id: tests/slow_tier.txt (``testing/slow_tier.py``).
SLOW_TESTS = frozenset(read_listed(Path(__file__).with_name("slow_tier.txt")))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``SLOW_TESTS`` get the ``slow`` marker before ``-m`` selects (this hook runs first). A whole run
    refuses a listed test that does not exist, and a module whose every test the list takes out of the
    fast tier (a module that is all slow says so with its own ``pytestmark``)."""
    fast_before = [item.nodeid for item in items if not item.get_closest_marker("slow")]
    for item in items:
        if item.nodeid in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    whole_run = not config.args or config.args == ["tests"] or config.args == [str(config.rootpath / "tests")]
    if not whole_run:
        return
    missing = sorted(SLOW_TESTS - {item.nodeid for item in items})
    if missing:
        raise pytest.UsageError(f"tests/slow_tier.txt names tests that do not exist: {missing}")
    emptied = left_without_a_fast_test(fast_before, set(SLOW_TESTS))
    if emptied:
        raise pytest.UsageError(f"tests/slow_tier.txt leaves these modules no fast test: {emptied}")


def pytest_configure(config: pytest.Config) -> None:
    """The hypothesis profile, before any test module (and its ``@settings``) is imported: ``fast`` when
    the run deselects the slow tier, ``full`` otherwise (``specagent_ray.testing.examples``). An explicit
    ``HYPOTHESIS_PROFILE`` wins."""
    import os

    from hypothesis import settings

    from specagent_ray.testing.examples import register_profiles

    register_profiles()
    fast = "not slow" in (config.option.markexpr or "")
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("fast" if fast else "full"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything collection imported (torch, Ray, tau2, ...) moves to the collector's permanent
    generation, so the full collections during the run stop walking it again and again: the fast tier
    took about 15 % less CPU with it (measured on the 2-core VM). Objects made by tests are collected
    as before."""
    import gc

    gc.collect()
    gc.freeze()
