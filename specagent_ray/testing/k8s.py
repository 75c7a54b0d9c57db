"""The k8s/ manifests as tests see them: every overlay rendered fresh by ``k8s/render.sh``, and the pod
templates inside them, including those that KubeRay's RayService and RayJob embed.

Shared by tests/unit/test_k8s.py (offline validation) and tests/security/ (hardening checks, Checkov).
Needs kubectl (its built-in kustomize) and PyYAML; without kubectl ``render`` raises, it never skips.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
OVERLAYS = ("cpu-dev", "gpu-prod", "gpu-chain")
PROFILE = {"cpu-dev": "sim", "gpu-prod": "gpu-tp16", "gpu-chain": "gpu-tp16-chain"}
RAY_KINDS = ("RayService", "RayJob")
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet")
KUBECTL_MISSING = ("kubectl not found on PATH: k8s/render.sh needs kubectl >= 1.27 (built-in kustomize v5) to "
                   "render the overlays. Install it; these checks fail rather than skip without it.")

Doc = dict[str, Any]


def render(out_dir: Path, overlays: tuple[str, ...] = OVERLAYS) -> dict[str, list[Doc]]:
    """Render ``overlays`` into ``out_dir`` with k8s/render.sh; each overlay's documents, in order."""
    if shutil.which("kubectl") is None:
        raise RuntimeError(KUBECTL_MISSING)
    env = {**os.environ, "RENDER_DIR": str(out_dir), "PYTHON": sys.executable}
    done = subprocess.run([str(K8S / "render.sh"), *overlays], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"k8s/render.sh failed:\n{done.stderr}")
    return {o: [d for d in yaml.safe_load_all((out_dir / f"{o}.yaml").read_text()) if d] for o in overlays}


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    """A deep copy of the one document of ``kind`` (and ``name``); AssertionError unless exactly one."""
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return copy.deepcopy(found[0])


def cluster_of(doc: Doc) -> Doc:
    return doc["spec"]["rayClusterConfig"] if doc["kind"] == "RayService" else doc["spec"]["rayClusterSpec"]


def groups(doc: Doc) -> dict[str, Doc]:
    """A Ray CRD's node groups by name: ``head`` and each worker group."""
    cluster = cluster_of(doc)
    return {"head": cluster["headGroupSpec"], **{g["groupName"]: g for g in cluster.get("workerGroupSpecs", [])}}


def ray_containers(doc: Doc) -> Iterator[tuple[str, Doc, Doc]]:
    """(group name, group, its Ray container) for each node group of a RayService or RayJob."""
    for name, group in groups(doc).items():
        yield name, group, group["template"]["spec"]["containers"][0]


def serve_config(docs: list[Doc]) -> Doc:
    return yaml.safe_load(one(docs, "RayService")["spec"]["serveConfigV2"])


def pod_templates(doc: Doc) -> Iterator[tuple[str, Doc]]:
    """(name, PodTemplateSpec) of every pod a document makes: each Ray node group and a RayJob's submitter,
    or a workload's ``spec.template``. Nothing for kinds that make no pods."""
    if doc["kind"] in RAY_KINDS:
        for name, group in groups(doc).items():
            yield name, group["template"]
        if doc["kind"] == "RayJob" and "submitterPodTemplate" in doc["spec"]:
            yield "submitter", doc["spec"]["submitterPodTemplate"]
    elif doc["kind"] in WORKLOAD_KINDS:
        yield "pod", doc["spec"]["template"]


def all_pod_templates(docs: list[Doc]) -> Iterator[tuple[str, Doc, Doc]]:
    """(``Kind/name/group``, the document, its PodTemplateSpec) for every pod of a rendered overlay."""
    for doc in docs:
        for name, template in pod_templates(doc):
            yield f"{doc['kind']}/{doc['metadata']['name']}/{name}", doc, template


def as_pod(doc: Doc, name: str, template: Doc) -> Doc:
    """A pod template written out as the plain v1 Pod it becomes (for scanners that read built-in kinds)."""
    meta = template.get("metadata", {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{doc['metadata']['name']}-{name}", "namespace": doc["metadata"].get("namespace"),
                         "labels": dict(meta.get("labels", {})), "annotations": dict(meta.get("annotations", {}))},
            "spec": copy.deepcopy(template["spec"])}
