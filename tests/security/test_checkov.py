"""Checkov, a third-party scanner of infrastructure code, on the rendered cpu-dev and gpu-prod overlays.

Checkov reads only built-in kinds, so the pods inside RayService and RayJob (each node group and the
job's submitter) are scanned too, written out as the plain Pods they become, next to the overlay's
NetworkPolicies (its graph check wants a policy selecting every pod). A failed check fails the test
unless ``SKIPS`` names it for that resource with the reason; a skip that matches nothing fails as well.

Checkov pins older boto3, botocore, packaging and networkx than this project, so it lives in a venv of
its own (``.venv-checkov/``, git-ignored), made with pip on first use and reused while it holds ``CHECKOV``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from specagent_ray.testing.k8s import OVERLAYS, RAY_KINDS, REPO, as_pod, pod_templates

pytestmark = [pytest.mark.security, pytest.mark.slow]  # 12 s of CPU and its own venv: the full suite runs it

CHECKOV = "checkov==3.3.30"  # the version verified here; the newest 3.3.x on 2026-12-01
VENV = REPO / ".venv-checkov"
RAY_POD = r"Pod\.[^.]+\.specagent-"
# check id -> (the resources it may fail on, as a regex over Checkov's resource name; why it is skipped)
SKIPS: dict[str, tuple[str, str]] = {
    # Images are pinned by tag through kustomize `images:` and pulled with imagePullPolicy Always; digests
    # are set at release time (`kustomize edit set image name@sha256:...`), which needs the registry.
    "CKV_K8S_43": (r".*", "image digests are pinned at release, tags here"),
    # The readers take keys from the environment and cannot read files: the gateway (GatewayConfig's
    # api_keys_env), the load generator (--api-key-env), boto3 and pyarrow (AWS_*). Each Secret is in
    # those pods only (test_k8s_pods.py); use IRSA / workload identity for S3 in production.
    "CKV_K8S_35": (RAY_POD + r"(cpu|verifier|drafter|mid|loadtest-head)$", "keys are read from env vars"),
    # rayproject/ray images run as `ray`, uid 1000, which owns /home/ray and its conda environment; a
    # uid >= 10000 has no passwd entry there (Ray calls getpass.getuser()). runAsNonRoot still holds.
    "CKV_K8S_40": (RAY_POD + r"(head|verifier|drafter|mid|cpu|loadtest-head|loadtest-submitter)$",
                   "the Ray image's user is uid 1000"),
    # KubeRay's in-tree autoscaler is a sidecar of the RayService head and calls the Kubernetes API with
    # the pod's service account; every other pod sets automountServiceAccountToken: false.
    "CKV_K8S_38": (RAY_POD + r"head$", "the autoscaler sidecar needs the service account token"),
    # The RayJob's submitter runs `ray job submit` once and exits (a Job's pod); there is nothing to
    # probe, and KubeRay's own default submitter has no probes either.
    "CKV_K8S_8": (RAY_POD + r"loadtest-submitter$", "a run-to-completion submitter has nothing to probe"),
    "CKV_K8S_9": (RAY_POD + r"loadtest-submitter$", "a run-to-completion submitter has nothing to probe"),
}


@pytest.fixture(scope="session")
def checkov() -> Path:
    """Checkov's CLI, installed into ``.venv-checkov/`` on first use (pip; about a minute, needs PyPI)."""
    exe, marker = VENV / "bin" / "checkov", VENV / ".installed"
    if not (exe.exists() and marker.exists() and marker.read_text() == CHECKOV):
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "--quiet", CHECKOV], check=True, timeout=1200)
        marker.write_text(CHECKOV)
    return exe


def scan_files(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What Checkov reads: the overlay as rendered, and the Ray CRDs' pod templates as Pods."""
    pods = [as_pod(doc, name, t) for doc in docs if doc["kind"] in RAY_KINDS for name, t in pod_templates(doc)]
    return {"manifests.yaml": docs, "ray-pods.yaml": pods}


def run_checkov(exe: Path, folder: Path, files: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One Checkov run (Kubernetes framework, offline) over ``files`` written to ``folder``; its report."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, docs in files.items():
        (folder / name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    done = subprocess.run([str(exe), "-d", str(folder), "--framework", "kubernetes", "-o", "json",
                           "--skip-download"], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "BC_SKIP_MAPPING": "TRUE"})
    assert done.returncode in (0, 1), f"checkov failed to run ({done.returncode}):\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout)
    (report,) = report if isinstance(report, list) else [report]
    return report


def unskipped(report: dict[str, Any]) -> list[str]:
    out = []
    for f in report["results"]["failed_checks"]:
        pattern, _ = SKIPS.get(f["check_id"], ("(?!)", ""))
        if not re.fullmatch(pattern, f["resource"]):
            out.append(f"{f['check_id']} {f['resource']}: {f['check_name']}")
    return out


@pytest.fixture(scope="session")
def reports(checkov, rendered, tmp_path_factory) -> dict[str, dict[str, Any]]:
    return {o: run_checkov(checkov, tmp_path_factory.mktemp(f"checkov-{o}"), scan_files(rendered[o])) for o in OVERLAYS}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_checkov_passes_with_only_the_justified_skips(reports, rendered, overlay):
    report = reports[overlay]
    assert report["summary"]["parsing_errors"] == 0 and report["summary"]["checkov_version"] == CHECKOV.split("==")[1]
    scanned = {r["resource"] for kind in ("passed_checks", "failed_checks") for r in report["results"][kind]}
    pods = [p["metadata"]["name"] for p in scan_files(rendered[overlay])["ray-pods.yaml"]]
    for name in [*pods, "specagent-gateway", "specagent-otel-collector"]:
        assert any(r.split(".")[-1] == name for r in scanned), f"Checkov did not scan {name}"
    assert report["summary"]["passed"] > 500
    assert unskipped(report) == []


def test_every_skip_is_still_needed(reports):
    used = {f["check_id"] for r in reports.values() for f in r["results"]["failed_checks"]}
    assert set(SKIPS) - used == set(), "skips that match no failure any more: remove them"


def test_a_collector_without_its_security_context_fails_checkov(checkov, rendered, tmp_path):
    """The collector as it was before hardening: Checkov fails it, and no skip hides that."""
    docs = copy.deepcopy(rendered["gpu-prod"])
    pod = next(d for d in docs if d["metadata"]["name"] == "specagent-otel-collector"
               and d["kind"] == "Deployment")["spec"]["template"]["spec"]
    del pod["securityContext"], pod["containers"][0]["securityContext"]
    failed = unskipped(run_checkov(checkov, tmp_path, {"manifests.yaml": docs}))
    ids = {f.split()[0] for f in failed}
    assert {"CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_37"} <= ids, failed
