"""cluster/aws-gpu.yaml through Ray's own launcher schema, and its fit to the gpu-tp16 profile. No AWS calls:
``prepare_config`` only merges the AWS provider's defaults.yaml; ``validate_config`` is the check ``ray up``
runs (``ray/autoscaler/ray-schema.json`` plus the cross-field rules)."""

from __future__ import annotations

import copy
import importlib.util
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config  # ray[serve]: dev and cpu extras

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "cluster" / "aws-gpu.yaml"


def _load_module(name: str):
    spec = importlib.util.spec_from_file_location(f"cluster_{name}", REPO / "cluster" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def _validate(cfg: dict) -> dict:
    prepared = prepare_config(copy.deepcopy(cfg))
    validate_config(prepared)
    return prepared


def test_config_passes_rays_launcher_validation(raw):
    prepared = _validate(raw)
    assert prepared["provider"]["type"] == "aws"
    assert set(prepared["available_node_types"]) == {"head", "verifier", "drafter"}


def _set(path: str, value):
    def mutate(cfg):
        *parents, last = path.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return mutate


_DELETE = object()


@pytest.mark.parametrize("mutate, error", [
    (_set("available_node_types.verifier.num_gpus", 8), jsonschema.ValidationError),      # unknown field
    (_set("available_node_types.verifier.resources.GPU", "8"), jsonschema.ValidationError),  # not an int
    (_set("available_node_types.drafter.resources.GPU", 0.5), jsonschema.ValidationError),   # not an int
    (_set("available_node_types.drafter.min_workers", "1"), jsonschema.ValidationError),
    (_set("available_node_types.head.node_config", _DELETE), jsonschema.ValidationError),   # required
    (_set("max_worker", 10), jsonschema.ValidationError),                                   # typo'd key
    (_set("head_start_ray_commands", "ray start --head"), jsonschema.ValidationError),      # not a list
    (_set("head_node_type", "ray.head.default"), ValueError),                              # not a node type
    (_set("max_workers", 2), ValueError),                                                  # < sum(min_workers)
], ids=["unknown-field", "gpu-string", "gpu-fraction", "min-workers-string", "no-node-config",
        "typo-top-level", "commands-not-list", "bad-head-type", "max-below-min-sum"])
def test_a_broken_field_fails_validation(raw, mutate, error):
    mutate(raw)
    with pytest.raises(error):
        _validate(raw)


def test_node_types_match_the_gpu_tp16_layout(raw):
    types = raw["available_node_types"]
    head, verifier, drafter = types["head"], types["verifier"], types["drafter"]
    assert raw["head_node_type"] == "head"
    assert head["resources"].get("GPU", 0) == 0
    assert verifier["min_workers"] == verifier["max_workers"] == 2 and verifier["resources"]["GPU"] == 8
    assert drafter["min_workers"] == 1 and drafter["max_workers"] == 8 and drafter["resources"]["GPU"] == 1
    assert raw["max_workers"] >= verifier["max_workers"] + drafter["max_workers"]
    roles = {name: {k for k in t["resources"] if k.endswith("_node")} for name, t in types.items()}
    assert roles == {"head": {"head_node"}, "verifier": {"verifier_node"}, "drafter": {"drafter_node"}}
    assert "docker" not in raw  # no Docker: see the file's header


def test_commands_install_the_gpu_extra_start_ray_and_deploy_the_profile(raw):
    assert raw["file_mounts"]["~/specagent-ray"] == "."
    setup = "\n".join(raw["setup_commands"])
    assert "pip install" in setup and 'specagent-ray[gpu,bench]"' in setup  # bench: the tau2 tool sources
    head = "\n".join(raw["head_start_ray_commands"])
    assert "ray start --head" in head and "--autoscaling-config=~/ray_bootstrap_config.yaml" in head
    assert "deployments/gpu-tp16.yaml" in head and "serve deploy ~/gpu-tp16.aws.yaml" in head
    assert head.index("ray start --head") < head.index("serve deploy")
    assert any("--address=$RAY_HEAD_IP:6379" in c for c in raw["worker_start_ray_commands"])


def _render_argv(raw: dict, out: Path) -> list[str]:
    """The render command exactly as the head runs it, writing to ``out`` instead."""
    cmd = next(c for c in raw["head_start_ray_commands"] if "render_profile.py" in c)
    argv = shlex.split(cmd.split("&&", 1)[1])
    argv = argv[argv.index("cluster/render_profile.py") + 1:]
    argv[argv.index("-o") + 1] = str(out)
    return argv


def _engine_bundles(profile: dict) -> dict[str, list[dict[str, float]]]:
    """Placement bundles per model_id as ray.serve.llm derives them from each LLMConfig (no Ray needed)."""
    from ray.serve.llm import LLMConfig

    out = {}
    for app in profile["applications"]:
        for cfg in (app.get("args") or {}).get("llm_configs", []):
            llm = LLMConfig.model_validate(cfg)
            out[llm.model_id] = llm.get_engine_config().placement_bundles
    return out


def _fits(bundle: dict[str, float], resources: dict[str, float]) -> bool:
    return all(resources.get(k, 0) >= v for k, v in bundle.items() if v)


def _hosts(bundles, types) -> set[str]:
    return {name for name, t in types.items() if all(_fits(b, t["resources"]) for b in bundles)}


def test_rendered_profile_lands_each_engine_on_its_node_type(raw, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "gpu-tp16.aws.yaml"
    assert _load_module("render_profile").main(_render_argv(raw, out)) == 0
    bundles = _engine_bundles(yaml.safe_load(out.read_text()))
    types = raw["available_node_types"]
    assert _hosts(bundles["verifier"], types) == {"verifier"}
    assert _hosts(bundles["drafter"], types) == {"drafter"}
    # The strong model's 16 GPUs fit on the always-up verifier nodes and need both of them.
    gpus = sum(b.get("GPU", 0) for b in bundles["verifier"])
    per_node = types["verifier"]["resources"]["GPU"]
    assert gpus == 16 and types["verifier"]["min_workers"] * per_node >= gpus > per_node


def test_unrendered_profile_fits_no_aws_node_type(raw):
    # Why the head renders: the profile asks for H20s (accelerator_type:H20), which no node type has.
    bundles = _engine_bundles(yaml.safe_load((REPO / "deployments" / "gpu-tp16.yaml").read_text()))
    assert _hosts(bundles["verifier"], raw["available_node_types"]) == set()


def test_render_rejects_unknown_model_and_bad_accelerator(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    render = _load_module("render_profile")
    with pytest.raises(ValueError, match="no LLMConfig with model_id"):
        render.main(["deployments/gpu-tp16.yaml", "--pin", "strong=verifier_node", "-o", str(tmp_path / "a.yaml")])
    with pytest.raises(Exception, match="accelerator"):
        render.main(["deployments/gpu-tp16.yaml", "--accelerator", "verifier=H999", "-o", str(tmp_path / "b.yaml")])
    assert not list(tmp_path.iterdir())  # nothing half-written
