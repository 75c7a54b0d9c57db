"""Suite-wide test setup: the README's test command runs on three xdist workers (pyproject's addopts).

Every test module that starts Ray (its tests carry the marker ``cluster`` or ``engines``) is listed in
``RAY_UNITS``. Under xdist each unit is one unit of work, which one worker runs one test after another.
There is one unit: two (real vLLM engines beside simulated ones, two clusters at once on two workers)
took the 2-core VM to a load average of 21, where a Ray head timed out starting and timing tests failed
(measured 2026-12-07). Each module starts its own cluster: a shared head per worker (modules connecting
and disconnecting in turn) hung a Serve handle call in the whole suite, after other modules' drivers
had come and gone in the same process. The other workers run every other module meanwhile, each whole;
many of their tests wait more than they compute. xdist's own ``--dist loadgroup`` would do this from
``xdist_group`` marks, but its 3.8 release cannot rename node ids under pytest 9, so the grouping is by
module path here, which the controller (it collects nothing) can see. A test that starts Ray in a module
not listed fails, saying so.

The modules that validate a Ray Serve LLM ``LLMConfig`` (``LLM_CONFIG_MODULES``) form one unit too:
importing ``ray.serve.llm`` imports vLLM and torch, about 10 s of CPU in each worker that does it
(measured on the 2-core VM), so one worker pays it once.
"""

from __future__ import annotations

import pytest

RAY_UNITS = {
    "ray": ("test_bench_scale", "test_engines", "test_k8s_deploy", "test_multinode", "test_plan_sim",
            "test_ray_telemetry", "test_serve_failures", "test_serve_fencing", "test_serve_local_cpu",
            "test_serve_sim", "test_wheel"),
}
RAY_MODULES = {f"tests/integration/{name}.py": unit for unit, names in RAY_UNITS.items() for name in names}
LLM_CONFIG_MODULES = frozenset(f"tests/{name}.py" for name in (
    "unit/test_cluster_config", "unit/test_k8s", "unit/launch/test_profiles", "security/test_api_policy"))
LLM_CONFIG = "llm-config"


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: the tests of each of ``RAY_UNITS`` are one, every test of an
    ``LLMConfig`` module another; any other module is one (its module fixtures, Checkov's scan for one,
    then run once, not once per worker)."""
    module = nodeid.split("::", 1)[0]
    if module in RAY_MODULES:
        return RAY_MODULES[module]
    return LLM_CONFIG if module in LLM_CONFIG_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class RayApart(LoadScopeScheduling):
        """xdist's scope scheduling with ``scope_of``'s scopes. The largest units go out first
        (``--loadscope-reorder``, on by default): the Ray unit, the run's longest pole."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return RayApart(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    starts_ray = item.get_closest_marker("cluster") or item.get_closest_marker("engines")
    module = item.nodeid.split("::", 1)[0]
    if starts_ray and module not in RAY_MODULES:
        pytest.fail(f"{module} starts Ray (marker cluster or engines) but is not in tests/conftest.py "
                    "RAY_UNITS: listed, it never runs beside another Ray test of its unit", pytrace=False)

# The slow tier's share of the fast tier's modules: the whole suite runs these; the fast tier
# (``-m "not slow"``, the developer's loop) leaves them out. Each took at least 1.3 s on the 2-core VM
# (measured, shared load scaled back); a sweep keeps one sampled case in the fast tier. A name that
# matches no collected test fails the run, so the table cannot rot.
SLOW_TESTS = frozenset({
    # end-to-end runs of a command: the bench's own output is checked in its module's other tests
    "test_a_tiny_chaos_run_prints_one_row_per_fault_and_the_totals_last",
    "test_an_unreachable_endpoint_gives_one_clear_error_line",
    "test_bench_tau2_store_puts_json_and_png[local]",
    "test_plan_prints_the_corrected_h200_crossover_next_to_the_datasheet_one",
    "test_rows_put_each_crossover_next_to_the_other_with_the_difference",
    "test_crossover_moves_out_as_the_gpu_gets_more_flops_per_byte",
    "test_plan_command_chain_flags",
    "test_the_main_job_picks_each_benchmark_sources_first_tasks",
    "test_a_mix_of_only_strong_steps_prices_like_strong_only",
    "test_the_issues_two_answers_now_are_one_the_chain_headline_is_gpus_per_step_per_s",
    "test_the_fleet_table_derives_from_the_load_tables_operating_point_on_the_sized_fleet[flags1]",
    "test_unreachable_url_and_wrong_key_stop_before_the_run_with_one_line",
    # Monte-Carlo and load sweeps: one sampled case stays fast
    "test_proposition_1_matches_measurement_within_0_01[0.5]",
    "test_proposition_1_matches_measurement_within_0_01[0.9]",
    "test_chain_proposition_matches_measurement_within_0_01[p0.7-q0.7-e0.2/0.2]",
    "test_chain_proposition_matches_measurement_within_0_01[p0.9-q0.9-e0.5/0.5]",
    "test_past_the_crossover_each_session_decides_on_its_own_estimate",
    "test_a_session_drafts_until_its_estimate_has_blocks_behind_it",
    "test_100k_histories_over_1000_tenants_stay_within_both_bounds[10000-100000]",
    "test_100k_histories_over_1000_tenants_stay_within_both_bounds[64-50000]",
    "test_one_tenant_with_100k_distinct_histories_stays_within_its_bound",
    "test_memory_per_entry_is_what_the_docstring_says",
    "test_two_tenants_with_100_sessions_each_cannot_read_post_or_cancel_each_others",
    "test_a_burst_of_200_creates_over_http_admits_exactly_max_sessions",
    "test_copy_on_read_environments_end_in_the_same_db_as_full_copies[retail]",
    "test_store_faults_at_every_nth_operation[write-path-unknown]",
    "test_production_profiles_serve_only_checked_methods_and_no_docs[gpu-tp16]",
    # servers that crash, restart or time out on a real clock: one of each module stays fast
    "test_a_read_is_sent_at_most_twice_and_an_unkeyed_write_once",
    "test_a_read_cut_off_by_a_crash_is_sent_once_more_to_the_restarted_server_and_later_calls_run",
    "test_a_write_after_the_server_died_idle_goes_once_to_the_restarted_server",
    "test_a_write_cut_off_by_a_crash_is_never_sent_again_and_its_session_is_told_the_outcome_is_unknown",
    "test_tool_errors_are_observations_and_the_toolbox_keeps_working",
    "test_twenty_concurrent_calls[stdio]",
    "test_catalog_follows_pagination_cursors",
    "test_a_server_lost_mid_session_raises_unavailable_without_hanging",
    "test_a_conversation_outlives_its_coordinator",
    # whole agent loops through a real SDK: each module keeps its shorter loops fast
    "test_a_hosted_mcp_agent_asks_approval_and_the_rejected_draft_write_never_runs",
    "test_two_mcp_servers_and_a_function_tool_in_one_conversation",
    "test_mcp_reads_run_while_drafting_the_write_runs_once_after_acceptance_and_output_is_committed",
    "test_responses_in_a_conversation_continue_one_session_and_a_forged_write_never_runs",
    "test_a_write_approved_twice_runs_once_by_the_end_of_the_session",
    "test_a_new_user_turn_that_ignores_an_open_approval_request_is_400_naming_it",
    "test_a_denied_approval_ends_its_response_and_an_answer_after_a_delete_is_refused_at_once",
    "test_an_undocumented_status_or_a_wrong_allow_header_fails_the_run",
    "test_through_the_route_an_alias_reaches_the_configured_server_and_a_look_alike_is_400",
    "test_zero_error_strong_only_scores_base_cases_through_the_protocol",
    "test_the_gold_calls_pass_bfcls_checker_and_one_missing_write_fails_it[8]",
    "test_sessions_run_to_completion_with_batched_verifies_and_a_durable_log",
    "test_bfcl_sessions_run_on_their_own_backends_resume_after_a_crash_and_grade",
})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``SLOW_TESTS`` get the ``slow`` marker before ``-m`` selects (this hook runs first)."""
    names = {item.name for item in items}
    for item in items:
        if item.name in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    whole_run = not config.args or config.args == ["tests"] or config.args == [str(config.rootpath / "tests")]
    missing = sorted(SLOW_TESTS - names)
    if whole_run and missing:
        raise pytest.UsageError(f"tests/conftest.py SLOW_TESTS names tests that do not exist: {missing}")


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
