"""Hostile checks of the pods the k8s/ overlays make, including those inside RayService and RayJob:

- every pod and container runs locked down (non-root, no privilege escalation, no capabilities, the
  runtime's seccomp profile, a read-only root filesystem with writable volumes where Ray needs them);
- each Secret reaches only the pods that use it, and the Serve deployments that use it are pinned there;
- Ray's token auth is on, and the cpu-dev session log lives on a volume that outlives the pod.

Each checker also has a negative test that breaks one field of the rendered manifests in memory.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from specagent_ray.launch.deployment_profiles import OURS
from specagent_ray.testing.k8s import (
    OVERLAYS,
    all_pod_templates,
    cluster_of,
    groups,
    one,
    serve_config,
)

pytestmark = pytest.mark.security

Doc = dict[str, Any]
RAY_WRITABLE = ("/tmp", "/home/ray/.cache")  # Ray's session dir (/tmp/ray), model and compile caches
# Secret (name, key or None for all keys) -> the pods that use it ("Kind/name/group", as all_pod_templates names
# them). Nothing else may mount it or take it as an environment variable.
USES = {
    ("specagent-api-keys", "api-keys"): {"RayService/specagent/cpu"},  # the Gateway replica checks client keys
    ("specagent-api-keys", "loadtest-api-key"): {"RayJob/specagent-loadtest/head"},  # the load generator's key
    ("specagent-aws", None): {"RayService/specagent/verifier", "RayService/specagent/drafter",  # weights from S3
                              "RayService/specagent/mid",  # the chain's mid verifier (gpu-chain): its weights
                              "RayService/specagent/cpu"},  # the session log on S3 (coordinator, tool hosts)
}
# Serve deployments of our application -> what they read that only some pods have.
NEEDS = {r"Gateway": "api-keys", r"Coordinator(-\d+)?": "session log", r"ToolHost(-\d+)?": "session log"}


# ---------------------------------------------------------------------------------------------- checkers

def container_problems(c: Doc, pod: Doc) -> list[str]:
    sc = c.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    problems = []
    if sc.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation is not false")
    if caps.get("drop") != ["ALL"] or caps.get("add"):
        problems.append("capabilities do not drop ALL (or add some)")
    if sc.get("readOnlyRootFilesystem") is not True:
        problems.append("root filesystem is writable")
    if sc.get("privileged"):
        problems.append("privileged")
    if sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True or 0 in (sc.get("runAsUser"), pod.get("runAsUser")):
        problems.append("may run as root")
    if (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append("no RuntimeDefault seccomp profile")
    return [f"container {c['name']}: {p}" for p in problems]


def pod_problems(template: Doc) -> list[str]:
    """What is not locked down in one pod template: the pod's securityContext and each container's."""
    spec = template["spec"]
    pod = spec.get("securityContext") or {}
    problems = [] if pod.get("runAsNonRoot") is True else ["pod: runAsNonRoot is not true"]
    if (pod.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append("pod: no RuntimeDefault seccomp profile")
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        problems += container_problems(c, pod)
    return problems


def security_problems(docs: list[Doc]) -> dict[str, list[str]]:
    """Every pod's problems, plus KubeRay's autoscaler sidecar (configured in autoscalerOptions) and the
    RayJob's submitter, which KubeRay builds without a securityContext unless the job gives a template."""
    out = {where: p for where, _, template in all_pod_templates(docs) if (p := pod_problems(template))}
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] == "RayJob" and "submitterPodTemplate" not in doc["spec"]:
            out[f"{where}/submitter"] = ["no submitterPodTemplate: KubeRay's default submitter is not locked down"]
        options = cluster_of(doc).get("autoscalerOptions") if doc["kind"] in ("RayService", "RayJob") else None
        if options is not None:
            head = groups(doc)["head"]["template"]["spec"].get("securityContext") or {}
            autoscaler = {"name": "autoscaler", "securityContext": options.get("securityContext")}
            if p := container_problems(autoscaler, head):
                out[f"{where}/autoscaler"] = p
    return out


def secret_refs(template: Doc) -> set[tuple[str, str | None]]:
    """(secret, key) pairs a pod reads; key None means the whole secret (envFrom, volumes)."""
    spec = template["spec"]
    refs: set[tuple[str, str | None]] = set()
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        for e in c.get("env", []):
            if ref := (e.get("valueFrom") or {}).get("secretKeyRef"):
                refs.add((ref["name"], ref["key"]))
        refs |= {(f["secretRef"]["name"], None) for f in c.get("envFrom", []) if "secretRef" in f}
    for v in spec.get("volumes", []):
        if "secret" in v:
            refs.add((v["secret"]["secretName"], None))
        refs |= {(s["secret"]["name"], None) for s in (v.get("projected") or {}).get("sources", []) if "secret" in s}
    return refs


def secret_problems(docs: list[Doc]) -> list[str]:
    problems = []
    for where, _, template in all_pod_templates(docs):
        for name, key in sorted(secret_refs(template), key=str):
            if key is None:  # the whole secret: only where every one of its keys may go
                entries = [u for (n, _), u in USES.items() if n == name]
                users = set.intersection(*entries) if entries else set()
            else:
                users = USES.get((name, key), set()) | USES.get((name, None), set())
            if where not in users:
                problems.append(f"{where} reads secret {name}{'/' + key if key else ''}, which it does not use")
    return problems


# ---------------------------------------------------------------------------------------------- positive

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_and_container_is_locked_down(rendered, overlay):
    docs = rendered[overlay]
    assert len(list(all_pod_templates(docs))) >= 7  # Ray head + 3 groups, job head + submitter, collector, ...
    assert security_problems(docs) == {}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ray_containers_get_writable_volumes_for_what_ray_writes(rendered, overlay):
    docs = rendered[overlay]
    for doc in (one(docs, "RayService"), one(docs, "RayJob")):
        for name, group in groups(doc).items():
            spec = group["template"]["spec"]
            volumes = {v["name"]: v for v in spec["volumes"]}
            mounts = {m["mountPath"]: volumes[m["name"]] for m in spec["containers"][0]["volumeMounts"]}
            for path in RAY_WRITABLE:
                assert "emptyDir" in mounts.get(path, {}), (doc["kind"], name, path)
            assert spec["securityContext"]["runAsUser"] == 1000  # the ray user of rayproject/ray images


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_secret_reaches_only_the_pods_that_use_it(rendered, overlay):
    docs = rendered[overlay]
    assert secret_problems(docs) == []
    reads = {where: secret_refs(t) for where, _, t in all_pod_templates(docs)}
    assert ("specagent-api-keys", "api-keys") in reads["RayService/specagent/cpu"]  # else no gateway starts
    assert ("specagent-api-keys", "loadtest-api-key") in reads["RayJob/specagent-loadtest/head"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_deployments_that_need_a_secret_or_the_log_run_only_where_it_is(rendered, overlay):
    """The pods hold a secret only where its users run, so those Serve deployments are pinned to that group
    with a Ray custom resource that only the group offers; a name that does not match the real
    application (as Serve builds it) fails here before it fails a deploy."""
    from ray.serve._private.build_app import build_app as build_serve_app

    from specagent_ray.serve.app import build_app

    docs = rendered[overlay]
    app = next(a for a in serve_config(docs)["applications"] if a["import_path"] == OURS)
    built = [d.name for d in build_serve_app(build_app(app["args"]), name=app["name"]).deployments]
    pinned = {d["name"]: d for d in app.get("deployments", [])}
    assert set(pinned) <= set(built), f"overrides for deployments that do not exist: {set(pinned) - set(built)}"
    offered = {name: set(g.get("resources", {})) for name, g in groups(one(docs, "RayService")).items()}
    for name in built:
        need = next((n for pattern, n in NEEDS.items() if re.fullmatch(pattern, name)), None)
        if need is None:
            continue
        wanted = set(pinned.get(name, {}).get("ray_actor_options", {}).get("resources", {}))
        hosts = [g for g, res in offered.items() if wanted and wanted <= res]
        assert hosts == ["cpu"], f"{overlay}: {name} reads the {need} but may run on {hosts or 'any group'}"
    cpu = next(t for w, _, t in all_pod_templates(docs) if w == "RayService/specagent/cpu")
    log = app["args"]["session_log"]
    if log.startswith("s3://"):
        assert ("specagent-aws", None) in secret_refs(cpu)
    else:
        assert_on_a_persistent_volume(docs, cpu, log)


def assert_on_a_persistent_volume(docs: list[Doc], template: Doc, path: str) -> None:
    assert path.startswith("/"), f"session_log {path!r} is relative: it lands on the container's filesystem"
    spec = template["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = [m for m in spec["containers"][0]["volumeMounts"]
              if (path + "/").startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"session_log {path} is on no volume"
    claim = volumes[max(mounts, key=lambda m: len(m["mountPath"]))["name"]].get("persistentVolumeClaim")
    assert claim, f"session_log {path} is not on a PersistentVolumeClaim"
    one(docs, "PersistentVolumeClaim", claim["claimName"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ray_token_auth_is_on(rendered, overlay):
    """KubeRay >= 1.5.1 makes a token Secret per cluster and gives it to every Ray container, its own
    dashboard client and the job submitter (RAY_AUTH_MODE=token); rayVersion must be >= 2.52."""
    for doc in (one(rendered[overlay], "RayService"), one(rendered[overlay], "RayJob")):
        cluster = cluster_of(doc)
        assert cluster.get("authOptions") == {"mode": "token"}, doc["kind"]
        assert tuple(int(x) for x in cluster["rayVersion"].split(".")[:2]) >= (2, 52)


# ---------------------------------------------------------------------------------------------- negative

def edit(docs: list[Doc], kind: str, path: tuple, value: Any) -> list[Doc]:
    """A copy of ``docs`` with one field of the one ``kind`` document set (``None`` deletes it)."""
    docs = copy.deepcopy(docs)
    node = next(d for d in docs if d["kind"] == kind)
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return docs


POD = ("spec", "template", "spec")
WORKER = ("spec", "rayClusterConfig", "workerGroupSpecs", 0, "template", "spec")


@pytest.mark.parametrize("kind, path, value, error", [
    ("Deployment", POD + ("securityContext",), None, "runAsNonRoot"),
    ("Deployment", POD + ("containers", 0, "securityContext", "capabilities"), {"drop": ["NET_RAW"]}, "drop ALL"),
    ("RayService", WORKER + ("containers", 0, "securityContext", "allowPrivilegeEscalation"), True, "Escalation"),
    ("RayService", WORKER + ("containers", 0, "securityContext", "readOnlyRootFilesystem"), False, "writable"),
    ("RayService", WORKER + ("securityContext", "runAsUser"), 0, "root"),
    ("RayService", ("spec", "rayClusterConfig", "autoscalerOptions", "securityContext"), None, "autoscaler"),
    ("RayJob", ("spec", "submitterPodTemplate"), None, "submitter"),
])
def test_a_loosened_security_context_is_caught(rendered, kind, path, value, error):
    docs = rendered["gpu-prod"]
    assert security_problems(docs) == {}
    assert error in str(security_problems(edit(docs, kind, path, value)))


def test_a_secret_given_to_a_pod_that_does_not_use_it_is_caught(rendered):
    docs = rendered["gpu-prod"]
    assert secret_problems(docs) == []
    leak = {"name": "SPECAGENT_API_KEYS",
            "valueFrom": {"secretKeyRef": {"name": "specagent-api-keys", "key": "api-keys"}}}
    verifier = WORKER + ("containers", 0, "env")
    env = groups(one(docs, "RayService"))["verifier"]["template"]["spec"]["containers"][0]["env"]
    assert "RayService/specagent/verifier reads secret specagent-api-keys/api-keys" in \
        str(secret_problems(edit(docs, "RayService", verifier, [*env, leak])))
    whole = edit(docs, "RayJob", ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers", 0,
                                  "envFrom"), [{"secretRef": {"name": "specagent-api-keys"}}])
    assert "specagent-loadtest/head reads secret specagent-api-keys," in str(secret_problems(whole))


def test_an_unpinned_gateway_is_caught(rendered):
    docs = copy.deepcopy(rendered["gpu-prod"])
    service = next(d for d in docs if d["kind"] == "RayService")
    config = yaml.safe_load(service["spec"]["serveConfigV2"])
    app = next(a for a in config["applications"] if a["import_path"] == OURS)
    app["deployments"] = [d for d in app.get("deployments", []) if d["name"] != "Gateway"]
    service["spec"]["serveConfigV2"] = yaml.safe_dump(config)
    with pytest.raises(AssertionError, match="Gateway reads the api-keys but may run on any group"):
        test_deployments_that_need_a_secret_or_the_log_run_only_where_it_is({"gpu-prod": docs}, "gpu-prod")
