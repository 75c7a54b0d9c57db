"""The k8s/ manifests, rendered fresh by k8s/render.sh and checked offline, layer by layer:

- built-in kinds, and every pod template inside the Ray CRDs, with kubernetes_validate (strict);
- RayService, RayJob and PodMonitor with the JSON schemas in k8s/schema (unknown fields fail);
- serveConfigV2 with Ray's ServeDeploySchema, each LLM config with LLMConfig, our args with AppConfig;
- the choices the README promises (GPU sizing, probes, /dev/shm, secrets, the load-test entrypoint).

Each layer has a negative test that breaks one field of the rendered dict in memory. No cluster needed,
but kubectl (with its built-in kustomize) is: without it these tests fail, they never skip.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
import sys
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource

from specagent_ray.launch.deployment_profiles import OURS, RAY_LLM, validate_args
from specagent_ray.testing.k8s import (
    K8S,
    KUBECTL_MISSING,
    OVERLAYS,
    PROFILE,
    REPO,
    cluster_of,
    groups,
    one,
    pod_templates,
    ray_containers,
    render,
    serve_config,
)

K8S_VERSION = "1.32.0"  # the oldest Kubernetes these manifests target (kubectl here is 1.32)
CRDS = {("ray.io/v1", "RayService"): "rayservice", ("ray.io/v1", "RayJob"): "rayjob",
        ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor"}
LOADTEST_FLAGS = {"--url", "--api-key-env", "--mode", "--sessions", "--concurrency", "--rate", "--duration-s",
                  "--tasks", "--client-processes", "--out"}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """Every overlay, rendered fresh (see specagent_ray/testing/k8s.py)."""
    return render(tmp_path_factory.mktemp("rendered"))


# ---------------------------------------------------------------------------------------------- validators

def validate_builtin(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def validate_pod_templates(doc: dict[str, Any]) -> None:
    """The CRDs embed corev1.PodTemplateSpec: check each one as a v1 PodTemplate, strictly."""
    for name, template in pod_templates(doc):
        validate_builtin({"apiVersion": "v1", "kind": "PodTemplate",
                          "metadata": {"name": f"{doc['metadata']['name']}-{name}"}, "template": template})


def crd_validator(kind: str) -> jsonschema.protocols.Validator:
    resources = {p.name: Resource.from_contents(json.loads(p.read_text())) for p in (K8S / "schema").glob("*.json")}
    registry = Registry().with_resources(resources.items())
    schema = json.loads((K8S / "schema" / f"{kind}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_crd(doc: dict[str, Any]) -> None:
    kind = CRDS[(doc["apiVersion"], doc["kind"])]
    errors = sorted(crd_validator(kind).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        raise jsonschema.ValidationError("; ".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                                                   for e in errors))


def validate_serve_config(text: str) -> Any:
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(yaml.safe_load(text))
    for app in schema.applications:
        validate_args(app.import_path, app.args or {})  # AppConfig for ours, LLMConfig for Ray Serve LLM
    return schema


def validate_otelcol(config: dict[str, Any]) -> None:
    """What the collector checks at start-up: every pipeline names components that are defined."""
    service = config["service"]
    for ext in service.get("extensions", []):
        assert ext in config.get("extensions", {}), f"extension {ext} is not defined"
    for name, pipeline in service["pipelines"].items():
        assert pipeline.get("receivers") and pipeline.get("exporters"), f"pipeline {name} needs receivers and exporters"
        for section in ("receivers", "processors", "exporters"):
            for component in pipeline.get(section, []):
                assert component in config.get(section, {}), f"pipeline {name}: {section[:-1]} {component} is not defined"


def validate(doc: dict[str, Any]) -> None:
    """Every check a rendered document gets, by kind."""
    if (doc["apiVersion"], doc["kind"]) in CRDS:
        validate_crd(doc)
        if doc["kind"] in ("RayService", "RayJob"):
            validate_pod_templates(doc)
        if doc["kind"] == "RayService":
            validate_serve_config(doc["spec"]["serveConfigV2"])
    else:
        validate_builtin(doc)


# ---------------------------------------------------------------------------------------------- positive

def test_kubectl_is_available():
    assert shutil.which("kubectl"), KUBECTL_MISSING


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_document_validates(rendered, overlay):
    docs = rendered[overlay]
    kinds = {d["kind"] for d in docs}
    assert {"RayService", "RayJob", "PodMonitor", "Deployment", "Service", "ConfigMap", "Namespace"} <= kinds
    for doc in docs:
        validate(doc)
        assert doc["metadata"].get("namespace", "") or doc["kind"] == "Namespace", doc["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_serve_config_is_generated_from_the_profile(rendered, overlay):
    profile_text = (REPO / "deployments" / f"{PROFILE[overlay]}.yaml").read_text()
    spec = yaml.safe_load((K8S / "overlays" / overlay / "serve-profile.yaml").read_text())
    assert spec["profile"] == PROFILE[overlay]
    text = one(rendered[overlay], "RayService")["spec"]["serveConfigV2"]
    if not spec["overrides"]:
        assert text.rstrip("\n") == profile_text.rstrip("\n")  # byte for byte, comments included
    got, expected = yaml.safe_load(text), yaml.safe_load(profile_text)
    expected["http_options"]["host"] = "0.0.0.0"  # a pod's Serve proxy answers on the pod IP
    ours, mine = (next(a for a in c["applications"] if a["import_path"] == OURS) for c in (expected, got))
    ours["deployments"] = mine["deployments"]  # pinned where their Secrets are (tests/security/test_k8s_pods.py)
    if overlay == "cpu-dev":
        ours["args"]["session_log"] = "/var/lib/specagent/sessions"  # on the cpu group's PVC
    assert got == expected  # nothing else differs from the profile
    validate_serve_config(text)
    assert not any(d["kind"] == "ConfigMap" and d["metadata"]["name"] == "specagent-serve-config"
                   for d in rendered[overlay]), "the serve-config ConfigMap is a kustomize source only"


def test_gpu_prod_sizes_the_verifier_group_for_the_strong_model(rendered):
    docs = rendered["gpu-prod"]
    service = one(docs, "RayService")
    g = groups(service)
    llm = next(a for a in serve_config(docs)["applications"] if a["import_path"] == RAY_LLM)["args"]["llm_configs"]
    verifier = next(c for c in llm if c["model_loading_config"]["model_id"] == "verifier")
    drafter = next(c for c in llm if c["model_loading_config"]["model_id"] == "drafter")
    tp, pp = verifier["engine_kwargs"]["tensor_parallel_size"], verifier["engine_kwargs"]["pipeline_parallel_size"]

    def gpus(group):
        res = group["template"]["spec"]["containers"][0]["resources"]
        assert res["limits"].get("nvidia.com/gpu") == res["requests"].get("nvidia.com/gpu")
        return int(res["limits"].get("nvidia.com/gpu", 0))

    assert gpus(g["head"]) == 0 and gpus(g["cpu"]) == 0
    assert g["head"]["rayStartParams"]["num-cpus"] == "0"
    v = g["verifier"]
    assert v["minReplicas"] == v["maxReplicas"] == v["replicas"] == pp == 2  # one pipeline stage per pod
    assert gpus(v) == tp == 8 and v["replicas"] * gpus(v) == 16 == len(verifier["placement_group_config"]["bundles"])
    d = g["drafter"]
    assert gpus(d) == drafter["engine_kwargs"]["tensor_parallel_size"] == 1
    assert d["minReplicas"] < d["maxReplicas"] == drafter["deployment_config"]["autoscaling_config"]["max_replicas"]
    assert cluster_of(service)["enableInTreeAutoscaling"] is True
    for name in ("verifier", "drafter"):
        pod = g[name]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H20"}  # the profile's accelerator_type H20
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert service["spec"]["upgradeStrategy"]["type"] in ("NewCluster", "NewClusterWithIncrementalUpgrade")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ray_pods_have_probes_limits_shm_keys_and_pinned_images(rendered, overlay):
    docs = rendered[overlay]
    for doc in (one(docs, "RayService"), one(docs, "RayJob")):
        for name, group, c in ray_containers(doc):
            where = f"{doc['kind']} {name}"
            assert c["readinessProbe"] and c["livenessProbe"], where
            assert c["resources"]["requests"] == c["resources"]["limits"], where  # Ray sizes itself from limits
            assert all(isinstance(v, str) for v in group["rayStartParams"].values()), where
            shm = {v["name"]: v for v in group["template"]["spec"]["volumes"]}[
                next(m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm")]
            assert shm["emptyDir"]["medium"] == "Memory", where
            repo, _, tag = c["image"].rpartition(":")
            assert repo.startswith("ghcr.io/specagent/specagent-ray") and tag and tag != "latest", (where, c["image"])
            assert "metrics" in {p["name"] for p in c["ports"]}, where
        if doc["kind"] == "RayService":
            for name, _, c in ray_containers(doc):
                env = {e["name"]: e for e in c["env"]}
                if name == "cpu":  # the Gateway's group (pinned there); no other pod gets the keys
                    assert env["SPECAGENT_API_KEYS"]["valueFrom"]["secretKeyRef"] == {
                        "name": "specagent-api-keys", "key": "api-keys"}, name
                else:
                    assert "SPECAGENT_API_KEYS" not in env, name
                if name != "head":  # KubeRay's RayService rule: a worker is ready when its Serve proxy is
                    assert "localhost:8000/-/healthz" in " ".join(c["readinessProbe"]["exec"]["command"])
    app = next(a for a in serve_config(docs)["applications"] if a["import_path"] == OURS)
    from specagent_ray.serve.core.config import AppConfig

    assert AppConfig.model_validate(app["args"]).gateway.api_keys_env == "SPECAGENT_API_KEYS"
    if overlay == "cpu-dev":  # dev keys are generated; gpu-prod's Secret is created out of band
        secret = one(docs, "Secret", "specagent-api-keys")
        assert {"api-keys", "loadtest-api-key"} <= set(secret["data"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_job_runs_the_load_test_and_the_bench_against_the_service(rendered, overlay):
    docs = rendered[overlay]
    job = one(docs, "RayJob")
    spec = job["spec"]
    assert spec["submissionMode"] == "K8sJobMode" and spec["shutdownAfterJobFinishes"] is True
    assert 0 < spec["ttlSecondsAfterFinished"] and 0 < spec["activeDeadlineSeconds"] <= 4 * 3600
    head = cluster_of(job)["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in head["env"]}
    public = one(docs, "Service", "specagent-gateway")  # the gateway proxy: the only public entry
    assert env["SPECAGENT_URL"] == f"http://{public['metadata']['name']}:{public['spec']['ports'][0]['port']}"
    assert {e["name"]: e for e in head["env"]}["SPECAGENT_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == \
        "specagent-api-keys"
    commands = job_commands(spec["entrypoint"], env)
    loadtests = [c for c in commands if c[:2] == ["specagent-ray", "loadtest"]]
    assert sorted(dict(pairs(c[2:]))["--mode"] for c in loadtests) == ["closed", "open"]
    for cmd in loadtests:
        check_loadtest(cmd)
    bench = [c for c in commands if c[:3] == ["specagent-ray", "bench", "batching"]]
    assert len(bench) == 1
    from specagent_ray.cli import build_parser

    parsed = build_parser().parse_args(bench[0][1:])  # the real CLI accepts the bench's flags
    assert parsed.sessions and all(n > 0 for n in parsed.sessions)
    results = {m["name"]: m["mountPath"] for m in head["volumeMounts"]}["results"]
    assert env["RESULTS_DIR"] == results
    claim = {v["name"]: v for v in cluster_of(job)["headGroupSpec"]["template"]["spec"]["volumes"]}["results"]
    one(docs, "PersistentVolumeClaim", claim["persistentVolumeClaim"]["claimName"])


def job_commands(entrypoint: str, env: dict[str, str | None]) -> list[list[str]]:
    """The entrypoint's commands as the head's shell will run them. KubeRay pastes the entrypoint into
    its submitter's bash command line, so it must be one `bash -c '...'` with no single quote inside."""
    outer = shlex.split(entrypoint)
    assert outer[:2] == ["bash", "-c"] and len(outer) == 3, outer
    script = outer[2]
    assert "'" not in script
    variables = set(re.findall(r"\$\{?(\w+)", script))
    assert variables <= set(env), f"entrypoint uses {sorted(variables - set(env))}, not in the head's env"
    expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: env[m.group(1)] or "", script)
    return [shlex.split(part) for part in re.split(r";|&&", expanded) if part.strip() not in ("", "set -eu")]


def pairs(args: list[str]) -> list[tuple[str, str]]:
    assert len(args) % 2 == 0 and all(a.startswith("--") for a in args[::2]), args
    return list(zip(args[::2], args[1::2]))


def check_loadtest(cmd: list[str]) -> None:
    flags = dict(pairs(cmd[2:]))
    assert set(flags) <= LOADTEST_FLAGS, set(flags) - LOADTEST_FLAGS
    assert {"--url", "--api-key-env", "--mode", "--tasks", "--out"} <= set(flags)
    assert flags["--mode"] in ("closed", "open") and flags["--api-key-env"] == "SPECAGENT_API_KEY"
    for numeric in ("--sessions", "--concurrency", "--rate", "--duration-s", "--client-processes"):
        assert float(flags[numeric]) > 0, numeric
    assert re.fullmatch(r"(airline|retail):\d+-\d+(,(airline|retail):\d+-\d+)*", flags["--tasks"])
    from specagent_ray.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions if a.dest)  # noqa: SLF001 (argparse has no API for this)
    if "loadtest" in sub.choices:  # once the load generator's CLI lands, it must accept the job's command too
        parser.parse_args(cmd[1:])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_monitoring_scrapes_ray_pods_and_the_collector(rendered, overlay):
    docs = rendered[overlay]
    ray_monitor = one(docs, "PodMonitor", "specagent-ray")
    selector = ray_monitor["spec"]["selector"]["matchLabels"]
    for doc in (one(docs, "RayService"), one(docs, "RayJob")):
        for name, group, c in ray_containers(doc):
            labels = group["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items(), (doc["kind"], name)
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            assert ports[ray_monitor["spec"]["podMetricsEndpoints"][0]["port"]] == 8080
    collector = one(docs, "Deployment", "specagent-otel-collector")
    config_map_name = collector["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    config = yaml.safe_load(one(docs, "ConfigMap", config_map_name)["data"]["config.yaml"])
    validate_otelcol(config)
    assert "otlp" in config["receivers"] and "prometheus" in config["exporters"]
    prom_port = int(config["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1])
    collector_monitor = one(docs, "PodMonitor", "specagent-otel-collector")
    ports = {p["name"]: p["containerPort"] for p in collector["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports[collector_monitor["spec"]["podMetricsEndpoints"][0]["port"]] == prom_port


# ---------------------------------------------------------------------------------------------- negative

def break_field(doc: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


HEAD = ("spec", "rayClusterConfig", "headGroupSpec")
WORKER = ("spec", "rayClusterConfig", "workerGroupSpecs", 0)
JOB_HEAD = ("spec", "rayClusterSpec", "headGroupSpec")

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_grafana_dashboard_ships_in_a_configmap_the_sidecar_loads(rendered, overlay):
    from specagent_ray.telemetry.dashboard import render as dashboard

    cm = one(rendered[overlay], "ConfigMap", "specagent-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # kube-prometheus-stack's sidecar label
    assert json.loads(cm["data"]["specagent-ray.json"]) == dashboard()  # the committed JSON is up to date


@pytest.mark.parametrize("kind, name, path, value, error", [
    # built-in kinds, kubernetes_validate strict
    ("Deployment", "specagent-otel-collector", ("spec", "template", "spec", "containers", 0, "ports", 0, "containerPort"),
     "otlp", "otlp"),
    ("Deployment", "specagent-otel-collector", ("spec", "replica"), 2, "replica"),
    ("Service", "specagent-otel-collector", ("spec", "ports", 0, "port"), "four-three-one-seven", "four"),
    ("PersistentVolumeClaim", "specagent-bench-results", ("spec", "accessMode"), ["ReadWriteOnce"], "accessMode"),
    # pod templates inside the CRDs, kubernetes_validate strict
    ("RayService", "specagent", HEAD + ("template", "spec", "containers", 0, "livenesProbe"), {}, "livenesProbe"),
    ("RayService", "specagent", WORKER + ("template", "spec", "volumes", 0, "emptyDir", "medium"), 7, "medium|7"),
    ("RayJob", "specagent-loadtest", JOB_HEAD + ("template", "spec", "containers", 0, "env", 0, "valueFom"), {},
     "valueFom"),
    # the CRD schemas in k8s/schema
    ("RayService", "specagent", WORKER + ("minReplica",), 1, "minReplica"),
    ("RayService", "specagent", ("spec", "upgradeStrategy", "type"), "Rolling", "Rolling"),
    ("RayService", "specagent", HEAD + ("rayStartParams", "num-cpus"), 0, "num-cpus|not of type"),
    ("RayService", "specagent", ("spec", "rayClusterConfig", "enableInTreeAutoscaler"), True, "enableInTreeAutoscaler"),
    ("RayJob", "specagent-loadtest", ("spec", "shutdownAfterJobFinish"), True, "shutdownAfterJobFinish"),
    ("RayJob", "specagent-loadtest", ("spec", "submissionMode"), "K8sJob", "K8sJob"),
    ("RayJob", "specagent-loadtest", ("spec", "ttlSecondsAfterFinished"), -1, "ttlSecondsAfterFinished"),
    ("PodMonitor", "specagent-ray", ("spec", "podMetricEndpoints"), [], "podMetricEndpoints"),
    ("PodMonitor", "specagent-ray", ("spec", "podMetricsEndpoints", 0, "interval"), "15 seconds", "interval|15 seconds"),
])
def test_a_broken_field_fails_validation(rendered, kind, name, path, value, error):
    doc = one(rendered["gpu-prod"], kind, name)
    validate(doc)
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError), match=error):
        validate(break_field(doc, path, value))


@pytest.mark.parametrize("overlay, path, value, error", [
    ("cpu-dev", ("http_options", "port"), "eighty", "port"),                                         # ServeDeploySchema
    ("cpu-dev", ("applications", 0, "import_path"), "no_colon_here", "import_path"),                  # ServeDeploySchema
    ("cpu-dev", ("applications", 0, "args", "coordinator", "max_batch"), 0, "max_batch"),             # AppConfig
    ("cpu-dev", ("applications", 0, "args", "gateway", "api_key_env"), "X", "api_key_env"),           # AppConfig
    ("gpu-prod", ("applications", 0, "args", "llm_configs", 0, "engine_kwarg"), {}, "engine_kwarg"),  # LLMConfig
    ("gpu-prod", ("applications", 0, "args", "llm_configs", 1, "deployment_config", "autoscaling_config",
                  "min_replicas"), -1, "min_replicas"),                                               # LLMConfig
    ("gpu-prod", ("applications", 1, "args", "engines", "verifier", "modle"), "x", "modle"),          # AppConfig
])
def test_a_broken_serve_config_field_fails_validation(rendered, overlay, path, value, error):
    service = one(rendered[overlay], "RayService")
    config = yaml.safe_load(service["spec"]["serveConfigV2"])
    broken = break_field(config, path, value)
    service["spec"]["serveConfigV2"] = yaml.safe_dump(broken)
    with pytest.raises(Exception, match=error):
        validate(service)


def test_a_broken_collector_pipeline_fails_validation(rendered):
    docs = rendered["gpu-prod"]
    name = one(docs, "Deployment", "specagent-otel-collector")["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    config = yaml.safe_load(one(docs, "ConfigMap", name)["data"]["config.yaml"])
    validate_otelcol(config)
    config["service"]["pipelines"]["metrics"]["exporters"] = ["prometheusremotewrite"]
    with pytest.raises(AssertionError, match="exporter prometheusremotewrite is not defined"):
        validate_otelcol(config)


def test_a_broken_job_entrypoint_is_caught(rendered):
    job = one(rendered["gpu-prod"], "RayJob")
    env = {e["name"]: e.get("value") for e in cluster_of(job)["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    entrypoint = job["spec"]["entrypoint"]
    with pytest.raises(AssertionError, match="LOADTEST_SESION"):
        job_commands(entrypoint.replace("$LOADTEST_SESSIONS", "$LOADTEST_SESION"), env)
    with pytest.raises(AssertionError):
        job_commands(entrypoint.replace("--mode open", "--mode 'open now'"), env)  # a quote ends bash -c's script
    with pytest.raises(AssertionError, match="--duration"):
        check_loadtest(job_commands(entrypoint.replace("--duration-s", "--duration"), env)[0])


def test_serve_config_generator_refuses_unknown_applications(tmp_path):
    overlay = tmp_path / "bad"
    overlay.mkdir()
    (overlay / "serve-profile.yaml").write_text("profile: sim\noverrides: {applications: {spec-agent: {}}}\n")
    done = subprocess.run([sys.executable, str(K8S / "serve_config.py"), str(overlay)], capture_output=True, text=True)
    assert done.returncode != 0 and "spec-agent" in done.stderr


# ------------------------------------------------------------------------------------- the chain's overlay

@pytest.fixture(scope="module")
def chain_docs(tmp_path_factory) -> list[dict[str, Any]]:
    """k8s/overlays/gpu-chain rendered fresh (not in testing/k8s.py's OVERLAYS, which this file does not own)."""
    return render(tmp_path_factory.mktemp("chain"), ("gpu-chain",))["gpu-chain"]


def test_the_chain_overlay_serves_the_chain_profile_and_gives_the_mid_its_own_gpu_group(chain_docs):
    from specagent_ray.bench.quality.variants import MID_MODEL

    service = one(chain_docs, "RayService")
    validate_pod_templates(service)
    g = groups(service)
    llm = next(a for a in serve_config(chain_docs)["applications"] if a["import_path"] == RAY_LLM)["args"]["llm_configs"]
    mid = next(c for c in llm if c["model_loading_config"]["model_id"] == "mid")
    assert mid["model_loading_config"]["model_source"].endswith("/" + MID_MODEL)  # the default the total chose
    res = g["mid"]["template"]["spec"]["containers"][0]["resources"]
    assert int(res["limits"]["nvidia.com/gpu"]) == int(res["requests"]["nvidia.com/gpu"]) \
        == mid["engine_kwargs"]["tensor_parallel_size"] == 2
    assert g["mid"]["maxReplicas"] == mid["deployment_config"]["autoscaling_config"]["max_replicas"]
    assert g["mid"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H20"}
    # everything but the mid is gpu-prod's
    assert [x["groupName"] for x in cluster_of(service)["workerGroupSpecs"]] == ["verifier", "drafter", "cpu", "mid"]
    assert int(g["verifier"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) == 8
