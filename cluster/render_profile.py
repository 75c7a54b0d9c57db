#!/usr/bin/env python3
"""Fit a Serve profile's engines to the node types of a cluster: accelerator types and role pinning.

    python cluster/render_profile.py deployments/gpu-tp16.yaml \
        --accelerator verifier=H100 --accelerator drafter=L40S \
        --pin verifier=verifier_node --pin drafter=drafter_node -o /tmp/gpu-tp16.aws.yaml

Why: ``deployments/gpu-tp16.yaml`` is the paper's setup on H20 GPUs, and Ray Serve LLM turns
``accelerator_type: H20`` into a placement-group resource ``accelerator_type:H20``. Ray detects the GPU
model of every node and advertises that resource, so on a cluster of H100s the engine would wait forever.
``--accelerator MODEL=TYPE`` rewrites the type of one engine (by ``model_id``). ``--pin MODEL=RESOURCE``
adds ``RESOURCE: 0.001`` to every bundle of that engine's placement group, so the verifier only lands on
verifier nodes and the drafters only on drafter nodes even if both have the same GPU model (the node
types in ``cluster/aws-gpu.yaml`` advertise ``verifier_node`` / ``drafter_node``). An engine without a
``placement_group_config`` gets ``bundle_per_worker: {GPU: 1, RESOURCE: 0.001}``, which Serve LLM
replicates tensor_parallel_size x pipeline_parallel_size times, as its default would.

Everything else is unchanged, and the output is validated as a profile (``ServeDeploySchema``,
``LLMConfig``, ``AppConfig``) before it is written.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
PIN_AMOUNT = 0.001


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{flag} wants MODEL=VALUE, got {item!r}")
        out[key] = value
    return out


def render(raw: dict[str, Any], accelerators: dict[str, str] | None = None,
           pins: dict[str, str] | None = None) -> dict[str, Any]:
    """A copy of the profile dict with accelerator types replaced and role resources pinned. Raises
    ValueError when a named model_id is not in the profile."""
    out = copy.deepcopy(raw)
    accelerators, pins = dict(accelerators or {}), dict(pins or {})
    seen: set[str] = set()
    for app in out.get("applications", []):
        for cfg in (app.get("args") or {}).get("llm_configs", []):
            model = cfg["model_loading_config"]["model_id"]
            seen.add(model)
            if model in accelerators:
                cfg["accelerator_type"] = accelerators[model]
            if model in pins:
                res = pins[model]
                pgc = cfg.setdefault("placement_group_config", {})
                if pgc.get("bundles"):
                    for b in pgc["bundles"]:
                        b.setdefault(res, PIN_AMOUNT)
                elif pgc.get("bundle_per_worker"):
                    pgc["bundle_per_worker"].setdefault(res, PIN_AMOUNT)
                else:
                    pgc["bundle_per_worker"] = {"GPU": 1, res: PIN_AMOUNT}
    missing = (set(accelerators) | set(pins)) - seen
    if missing:
        raise ValueError(f"no LLMConfig with model_id {sorted(missing)}; the profile has {sorted(seen)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", help="profile YAML (or name: gpu-tp16, ...)")
    ap.add_argument("--accelerator", action="append", metavar="MODEL=TYPE", help="e.g. verifier=H100")
    ap.add_argument("--pin", action="append", metavar="MODEL=RESOURCE", help="e.g. verifier=verifier_node")
    ap.add_argument("-o", "--output", required=True, type=Path)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from specagent_ray.launch.deployment_profiles import load_profile, profile_path

    raw = yaml.safe_load(profile_path(a.profile).read_text())
    out = render(raw, _pairs(a.accelerator, "--accelerator"), _pairs(a.pin, "--pin"))
    a.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.output.with_name(a.output.name + ".tmp.yaml")
    tmp.write_text(f"# Rendered by cluster/render_profile.py from {a.profile}; do not edit.\n"
                   + yaml.safe_dump(out, sort_keys=False))
    try:
        load_profile(tmp)  # Ray's own schemas: a bad accelerator type or field fails here, not on the cluster
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(a.output)
    print(a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
