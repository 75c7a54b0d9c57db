"""Every profile loads through Ray's own schemas (ServeDeploySchema, LLMConfig) and our AppConfig."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from specagent_ray.launch.deployment_profiles import PROFILES, load_profile, profile_path, validate_args

# Found, not imported: importing ray.serve.llm takes seconds, in every xdist worker at collection.
if importlib.util.find_spec("ray.serve.llm") is None:
    pytest.skip("LLMConfig needs the cpu extra (ray.serve.llm deps)", allow_module_level=True)


@pytest.mark.parametrize("name", PROFILES)
def test_each_profile_validates(name):
    schema = load_profile(name)
    assert {a.name for a in schema.applications} >= {"specagent"}


def test_gpu_profile_is_the_papers_setup():
    schema = load_profile("gpu-tp16")
    engines = next(a for a in schema.applications if a.name == "engines").args["llm_configs"]
    verifier = next(c for c in engines if c["model_loading_config"]["model_id"] == "verifier")
    kw = verifier["engine_kwargs"]
    assert kw["tensor_parallel_size"] * kw["pipeline_parallel_size"] == 16 == len(verifier["placement_group_config"]["bundles"])
    assert verifier["model_loading_config"]["model_source"].startswith("s3://")
    assert kw["enable_prefix_caching"] is True


@pytest.mark.parametrize("path, value, error", [
    (("applications", 1, "args", "coordinator", "max_batch"), 0, "max_batch"),
    (("applications", 1, "args", "engines", "kind"), "gpu", "kind"),
    (("applications", 1, "args", "tool_sources", "airline", "kind"), "shell", "kind"),
    (("applications", 1, "args", "coordinator", "batch_windo_ms"), 5, "batch_windo_ms"),
    (("applications", 0, "args", "llm_configs", 0, "engine_kwarg"), {}, "engine_kwarg"),
    (("http_options", "port"), "eighty", "port"),
    (("applications", 0, "import_path"), "no_colon_here", "import_path"),
])
def test_a_broken_field_fails_with_its_name(tmp_path, path, value, error):
    raw = yaml.safe_load(profile_path("local-cpu").read_text())
    node = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(raw))
    with pytest.raises(Exception, match=error):
        load_profile(broken)


def test_priorities_go_only_to_engines_that_schedule_by_them(tmp_path):
    """An engine without vLLM's priority scheduler refuses any priority but 0: such a profile fails to load."""
    raw = yaml.safe_load(profile_path("local-cpu").read_text())
    raw["applications"][1]["args"]["engines"]["verifier"]["send_priority"] = True
    verifier = raw["applications"][0]["args"]["llm_configs"][1]
    verifier["engine_kwargs"] = {k: v for k, v in verifier["engine_kwargs"].items() if k != "scheduling_policy"}
    broken = tmp_path / "fcfs.yaml"
    broken.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="engines.verifier.send_priority is on, but engine 'verifier' runs "
                                         "scheduling_policy 'fcfs'"):
        load_profile(broken)
    raw["applications"][1]["args"]["engines"]["verifier"]["send_priority"] = False
    broken.write_text(yaml.safe_dump(raw))
    load_profile(broken)


@pytest.mark.parametrize("name", ["gpu-tp16", "gpu-tp16-chain", "local-cpu"])
def test_the_vllm_profiles_turn_on_what_paid_in_bench_engines(name):
    """Prefill ahead paid (docs/serving.md, Agent-aware engines); sending priorities did not, so it is off,
    with the engines ready for it (scheduling_policy: priority) should a deployment measure otherwise."""
    raw = yaml.safe_load(profile_path(name).read_text())
    ours = raw["applications"][1]["args"]["engines"]
    assert ours["prefill_ahead"] is True
    assert not ours["drafter"].get("send_priority") and not ours["verifier"].get("send_priority")
    for engine in raw["applications"][0]["args"]["llm_configs"]:
        assert engine["engine_kwargs"]["scheduling_policy"] == "priority"
        assert engine["engine_kwargs"]["enable_prefix_caching"] is True


def test_prefill_ahead_needs_a_verifier_that_caches_prefixes(tmp_path):
    raw = yaml.safe_load(profile_path("local-cpu").read_text())
    raw["applications"][1]["args"]["engines"]["prefill_ahead"] = True
    verifier = raw["applications"][0]["args"]["llm_configs"][1]
    verifier["engine_kwargs"] = {**verifier["engine_kwargs"], "enable_prefix_caching": False}
    broken = tmp_path / "uncached.yaml"
    broken.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="engines.prefill_ahead is on, but engine 'verifier' has no enable_prefix_caching"):
        load_profile(broken)


def test_unknown_builders_and_profiles_are_refused():
    with pytest.raises(ValueError, match="unknown application builder"):
        validate_args("os:system", {})
    with pytest.raises(ValueError, match="unknown profile 'prod'"):
        profile_path("prod")


def test_the_main_job_picks_each_benchmark_sources_first_tasks():
    from specagent_ray.launch.main_job import default_tasks

    assert default_tasks("sim", "airline", 2) == ("0", "1")
    assert len(default_tasks("sim", "telecom", 10)) == 10
    assert default_tasks("sim", "files", 2) == ("multi_turn_base_0", "multi_turn_base_1")
    with pytest.raises(ValueError, match="no benchmark tool source 'nope'"):
        default_tasks("sim", "nope", 2)


def _app_args(name: str) -> dict:
    return next(a for a in load_profile(name).applications if a.name == "specagent").args


@pytest.mark.parametrize("name", PROFILES)
def test_each_profile_names_the_hardware_its_reports_are_estimated_for(name):
    """No profile relies on the default deployment silently: the resource report says what it estimates."""
    assert "hardware" in _app_args(name)


@pytest.mark.parametrize("name", ["gpu-tp16", "gpu-tp16-chain"])
def test_gpu_profile_reports_are_estimated_on_the_hardware_it_deploys(name):
    from specagent_ray.serve.core.config import AppConfig

    app = AppConfig.model_validate(_app_args(name))
    hardware = app.hardware
    engines = next(a for a in load_profile(name).applications if a.name == "engines").args["llm_configs"]
    by_id = {c["model_loading_config"]["model_id"]: c for c in engines}
    roles = [("verifier", hardware.strong_model, hardware.strong_gpus),
             ("drafter", hardware.weak_model, hardware.weak_gpus)]
    assert ("mid" in by_id) is (app.engines.mid is not None) is (hardware.mid_model is not None) is (name != "gpu-tp16")
    if app.engines.mid is not None:
        roles.append((app.engines.mid.model, hardware.mid_model, hardware.mid_gpus))
    for role, model, gpus in roles:
        c = by_id[role]
        kw = c["engine_kwargs"]
        assert c["model_loading_config"]["model_source"].rstrip("/").rsplit("/", 1)[-1] == model
        assert kw.get("tensor_parallel_size", 1) * kw.get("pipeline_parallel_size", 1) == gpus
        assert c["accelerator_type"].lower() == hardware.gpu


def test_the_verifier_kv_prefill_ahead_counts_on_fits_what_the_profile_deploys():
    """Prefill ahead trusts a prefix until new KV of half ``verifier_kv_tokens`` was computed: a figure larger
    than the engine's KV cache would trust prefixes vLLM has already evicted."""
    import inspect

    from specagent_ray.costs.planner import MEMORY_UTILIZATION
    from specagent_ray.costs.specs import load_gpu, load_model
    from specagent_ray.models.tiny import build_tiny_model
    from specagent_ray.serve.core.config import AppConfig

    gpu_app = AppConfig.model_validate(_app_args("gpu-tp16"))
    hw = gpu_app.hardware
    strong, gpu = load_model(hw.strong_model), load_gpu(hw.gpu)
    gpu_engines = next(a for a in load_profile("gpu-tp16").applications if a.name == "engines").args["llm_configs"]
    share = next(c for c in gpu_engines if c["model_loading_config"]["model_id"] == "verifier")["engine_kwargs"].get(
        "gpu_memory_utilization", MEMORY_UTILIZATION)
    free = share * hw.strong_gpus * gpu.memory_bytes - strong.total_params * strong.bytes_per_param
    assert 0.5 * free / strong.kv_bytes_per_token < gpu_app.engines.verifier_kv_tokens <= free / strong.kv_bytes_per_token

    engines = next(a for a in load_profile("local-cpu").applications if a.name == "engines").args["llm_configs"]
    verifier = next(c for c in engines if c["model_loading_config"]["model_id"] == "verifier")
    space = float(verifier["runtime_env"]["env_vars"]["VLLM_CPU_KVCACHE_SPACE"]) * 2**30
    shape = {k: v.default for k, v in inspect.signature(build_tiny_model).parameters.items()}  # local-cpu's models
    per_token = 2 * shape["layers"] * shape["kv_heads"] * (shape["hidden"] // shape["heads"]) * 2  # K and V, bf16
    assert AppConfig.model_validate(_app_args("local-cpu")).engines.verifier_kv_tokens == space // per_token


def test_the_cpu_engine_kwargs_have_one_home():
    """local-cpu's drafter holds vLLM's CPU kwargs; edge-cloud's drafter and local_engines use the same."""
    from specagent_ray.launch.engines import cpu_engine_kwargs

    def drafter_kwargs(name: str) -> dict:
        engines = next(a for a in load_profile(name).applications if a.name == "engines").args["llm_configs"]
        return next(c for c in engines if c["model_loading_config"]["model_id"] == "drafter")["engine_kwargs"]

    assert drafter_kwargs("edge-cloud") == drafter_kwargs("local-cpu") == cpu_engine_kwargs()


def test_a_moved_port_moves_only_this_clusters_own_urls():
    from specagent_ray.launch.deployment_profiles import moved

    assert moved("http://127.0.0.1:8000/engines/v1", 8000, 9100) == "http://127.0.0.1:9100/engines/v1"
    assert moved("http://localhost:8000/v1", 8000, 9100) == "http://localhost:9100/v1"
    assert moved("http://127.0.0.1:18000/v1", 8000, 9100) == "http://127.0.0.1:18000/v1"  # another port
    assert moved("https://api.example-cloud.com:8000/v1", 8000, 9100) == "https://api.example-cloud.com:8000/v1"


def test_run_args_merge_deeply_into_the_profile():
    schema = load_profile("sim", {"engines": {"latency": {"verify_base_s": 0.5}}, "coordinator": {"max_batch": 3}})
    args = next(a for a in schema.applications if a.name == "specagent").args
    assert args["engines"]["latency"]["verify_base_s"] == 0.5
    assert args["engines"]["latency"]["draft_base_s"] == 0.02  # the profile's own, kept
    assert args["coordinator"]["max_batch"] == 3 and args["coordinator"]["max_sessions"] == 2000


def test_local_engines_can_run_replicas_behind_the_prefix_affinity_router(tmp_path):
    """``bench engines``' placement pair: two verifier replicas, Serve's default router, then Ray Serve
    LLM's prefix-aware one; Ray's own LLMConfig takes both."""
    from specagent_ray.launch.engines import PREFIX_ROUTER, cpu_llm_config

    plain = cpu_llm_config("verifier", tmp_path, replicas=2)
    routed = cpu_llm_config("verifier", tmp_path, replicas=2, router=PREFIX_ROUTER)
    assert plain.deployment_config["autoscaling_config"] == {"min_replicas": 2, "max_replicas": 2}
    assert "request_router_config" not in plain.deployment_config
    assert routed.deployment_config["request_router_config"] == {"request_router_class": PREFIX_ROUTER}
    assert routed.engine_kwargs["scheduling_policy"] == "priority"  # the profile's CPU kwargs, as for one replica


@pytest.mark.parametrize("name", ["gpu-tp16", "gpu-tp16-chain", "local-cpu", "edge-cloud"])
def test_every_self_hosted_engine_reports_its_gpus_to_the_meter_under_its_ledger_role(name):
    """Each LLMConfig is a MeteredLLMServer whose workers carry GpuPlacement, with the ledger role its
    calls have (the drafter's model: weak; the verifier's: strong; the mid's: mid); gpu-tp16 runs the meter."""
    import importlib

    app = next(a for a in load_profile(name).applications if a.name == "specagent").args
    roles = {app["engines"]["drafter"]["model"]: "weak", app["engines"]["verifier"]["model"]: "strong"}
    if app["engines"].get("mid"):
        roles[app["engines"]["mid"]["model"]] = "mid"
    engines = next(a for a in load_profile(name).applications if a.name == "engines").args["llm_configs"]
    for c in engines:
        assert c["server_cls"] == "specagent_ray.serve.engines.metered_llm:MeteredLLMServer"
        assert c["experimental_configs"]["specagent_role"] == roles[c["model_loading_config"]["model_id"]]
        module, _, cls = c["engine_kwargs"]["worker_extension_cls"].rpartition(".")
        assert hasattr(importlib.import_module(module), cls)
    assert ("meter" in app) == name.startswith("gpu-tp16")


def test_the_chain_profile_is_gpu_tp16_plus_the_mid_and_gpu_tp16_starts_no_mid():
    """gpu-tp16-chain adds the mid engine, its endpoint, its hardware and the chain rule, and nothing else: the
    rest cannot drift from gpu-tp16, whose default deployment has no mid (the chain is optional)."""
    plain = yaml.safe_load(profile_path("gpu-tp16").read_text())
    chain = yaml.safe_load(profile_path("gpu-tp16-chain").read_text())
    llm, ours = chain["applications"][0]["args"]["llm_configs"], chain["applications"][1]["args"]
    (mid,) = [c for c in llm if c["model_loading_config"]["model_id"] == "mid"]
    assert mid["experimental_configs"] == {"specagent_role": "mid"}
    assert mid["engine_kwargs"]["tensor_parallel_size"] == ours["hardware"]["mid_gpus"] == 2
    assert mid["model_loading_config"]["model_source"] == "s3://specagent-models/qwen3.5-35b-a3b"
    llm.remove(mid)
    assert ours["engines"].pop("mid") == {"url": "http://127.0.0.1:8000/engines/v1", "model": "mid"}
    assert ours["hardware"].pop("mid_model") == "qwen3.5-35b-a3b" and ours["hardware"].pop("mid_gpus") == 2
    assert ours.pop("chain") == {"settles": ["write"], "escalate_below": 0.7}
    assert chain == plain
    assert all(c["model_loading_config"]["model_id"] != "mid" for c in plain["applications"][0]["args"]["llm_configs"])


def test_a_mid_engine_without_its_hardware_fails_to_load(tmp_path):
    raw = yaml.safe_load(profile_path("gpu-tp16-chain").read_text())
    del raw["applications"][1]["args"]["hardware"]["mid_model"]
    broken = tmp_path / "unpriced.yaml"
    broken.write_text(yaml.safe_dump(raw))
    with pytest.raises(Exception, match="engines.mid adds a mid verifier, but hardware.mid_model is not set"):
        load_profile(broken)


def test_priorities_go_to_the_mid_only_where_it_schedules_by_them(tmp_path):
    raw = yaml.safe_load(profile_path("gpu-tp16-chain").read_text())
    raw["applications"][1]["args"]["engines"]["mid"]["send_priority"] = True
    llm = raw["applications"][0]["args"]["llm_configs"]
    mid = next(c for c in llm if c["model_loading_config"]["model_id"] == "mid")
    del mid["engine_kwargs"]["scheduling_policy"]
    broken = tmp_path / "fcfs-mid.yaml"
    broken.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="engines.mid.send_priority is on, but engine 'mid'"):
        load_profile(broken)


def test_the_sim_profile_runs_the_chain_with_a_mid_replica_and_its_hardware():
    schema = load_profile("sim", {"engines": {"mid_replicas": 1}, "hardware": {"mid_model": "qwen3-32b"},
                                  "chain": {"escalate_below": 0.6}})
    from specagent_ray.serve.core.config import AppConfig

    app = AppConfig.model_validate(next(a for a in schema.applications if a.name == "specagent").args)
    assert app.engines.mid_replicas == 1 and app.chain.escalate_below == 0.6
    with pytest.raises(Exception, match="hardware.mid_model"):
        load_profile("sim", {"engines": {"mid_replicas": 1}})
