"""Suite-wide test setup: the README's test command runs on three xdist workers (pyproject's addopts).

Every test module that starts Ray (its tests carry the marker ``cluster`` or ``engines``) is listed in
``RAY_MODULES``. Under xdist their tests form one unit of work, which one worker runs one test after
another: two local Ray clusters at once would fight over 2 cores, ports and ``/tmp/ray``, and a module's
cluster fixture starts once. The other workers run every other module meanwhile, each whole; many of
their tests wait more than they compute. xdist's own ``--dist loadgroup`` would do this from
``xdist_group`` marks, but its 3.8 release cannot rename node ids under pytest 9, so the grouping is by
module path here, which the controller (it collects nothing) can see. A test that starts Ray in a module
not listed fails, saying so.

The modules that validate a Ray Serve LLM ``LLMConfig`` (``LLM_CONFIG_MODULES``) form one unit too:
importing ``ray.serve.llm`` imports vLLM and torch, about 10 s of CPU in each worker that does it
(measured on the 2-core VM), so one worker pays it once.
"""

from __future__ import annotations

import pytest

RAY_MODULES = frozenset(f"tests/integration/{name}.py" for name in (
    "test_bench_scale", "test_engines", "test_k8s_deploy", "test_multinode", "test_plan_sim",
    "test_ray_telemetry", "test_serve_failures", "test_serve_fencing", "test_serve_local_cpu",
    "test_serve_sim", "test_wheel"))
RAY = "ray"
LLM_CONFIG_MODULES = frozenset(f"tests/{name}.py" for name in (
    "unit/test_cluster_config", "unit/test_k8s", "unit/launch/test_profiles", "security/test_api_policy"))
LLM_CONFIG = "llm-config"


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: every test of a Ray module is one, every test of an
    ``LLMConfig`` module another; any other module is one (its module fixtures, Checkov's scan for one,
    then run once, not once per worker)."""
    module = nodeid.split("::", 1)[0]
    if module in RAY_MODULES:
        return RAY
    return LLM_CONFIG if module in LLM_CONFIG_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class RayApart(LoadScopeScheduling):
        """xdist's scope scheduling with ``scope_of``'s scopes. The largest unit goes out first
        (``--loadscope-reorder``, on by default): the Ray unit, the run's longest pole."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return RayApart(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    starts_ray = item.get_closest_marker("cluster") or item.get_closest_marker("engines")
    module = item.nodeid.split("::", 1)[0]
    if starts_ray and module not in RAY_MODULES:
        pytest.fail(f"{module} starts Ray (marker cluster or engines) but is not in tests/conftest.py "
                    "RAY_MODULES: listed, it never runs beside another Ray test", pytrace=False)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything collection imported (torch, Ray, tau2, ...) moves to the collector's permanent
    generation, so the full collections during the run stop walking it again and again: the fast tier
    took about 15 % less CPU with it (measured on the 2-core VM). Objects made by tests are collected
    as before."""
    import gc

    gc.collect()
    gc.freeze()
