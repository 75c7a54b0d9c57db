#!/usr/bin/env python3
"""Place an engine's placement group on a running Ray cluster and report where its bundles landed.

    python cluster/pg_probe.py --address 127.0.0.1:26379 --profile gpu-tp16 --model verifier \
        [--also '[{"GPU": 8}, {"GPU": 8}, {"GPU": 8}]'] [--timeout 60] [--pending-timeout 5]

The bundles and strategy are the ones Ray Serve LLM itself would request for that ``LLMConfig``
(``LLMServer.get_deployment_options``: the profile's ``placement_group_config`` with the accelerator hint
added and the replica actor's CPU merged into the first bundle), so the probe answers "would this
profile's engine fit on this cluster, and how would it be spread?" without a GPU or a model. ``--also``
adds a second placement group, tried after the first is removed, that is expected *not* to fit: it is
given ``--pending-timeout`` seconds. Both groups are removed before the probe exits.

Prints one JSON object: the alive nodes (id, resources, head or not) and, per group, strategy, bundles,
ready, state and the node of every bundle (from ``ray.util.placement_group_table``). Works on the local
multi-node cluster (``cluster/local_multinode.py``) and on a real one (run it on the head).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def engine_placement(profile: str, model_id: str) -> tuple[list[dict[str, float]], str]:
    """(bundles, strategy) that ``ray.serve.llm`` derives for ``model_id``'s LLMConfig in ``profile``.
    Needs a connected Ray driver (Serve LLM reads the job's runtime context)."""
    import yaml
    from ray.llm._internal.serve.core.server.llm_server import LLMServer
    from ray.serve.llm import LLMConfig

    sys.path.insert(0, str(REPO))
    from specagent_ray.launch.deployment_profiles import RAY_LLM, profile_path

    raw = yaml.safe_load(profile_path(profile).read_text())
    for app in raw.get("applications", []):
        if app.get("import_path") != RAY_LLM:
            continue
        for cfg in app["args"]["llm_configs"]:
            if cfg["model_loading_config"]["model_id"] == model_id:
                opts = LLMServer.get_deployment_options(LLMConfig.model_validate(cfg))
                return opts["placement_group_bundles"], opts["placement_group_strategy"]
    raise ValueError(f"no LLMConfig with model_id {model_id!r} in {profile}")


def place(bundles: list[dict[str, float]], strategy: str, timeout_s: float) -> dict[str, Any]:
    """Create the group, wait up to ``timeout_s`` for it, read the table, remove it."""
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    pg = placement_group(bundles, strategy=strategy)
    try:
        ready = pg.wait(timeout_seconds=timeout_s)
        table = placement_group_table(pg)
        by_bundle = table.get("bundles_to_node_id", {})
        return {"strategy": strategy, "bundles": bundles, "ready": bool(ready), "state": table.get("state"),
                "bundle_nodes": [by_bundle.get(i) for i in range(len(bundles))]}
    finally:
        remove_placement_group(pg)


def probe(profile: str, model_id: str, also: list[dict[str, float]] | None = None, also_strategy: str = "PACK",
          timeout_s: float = 60.0, pending_timeout_s: float = 5.0) -> dict[str, Any]:
    import ray

    nodes = [{"node_id": n["NodeID"], "head": "node:__internal_head__" in n["Resources"],
              "resources": n["Resources"]} for n in ray.nodes() if n["Alive"]]
    bundles, strategy = engine_placement(profile, model_id)
    report: dict[str, Any] = {"profile": profile, "model_id": model_id, "nodes": nodes,
                              "engine": place(bundles, strategy, timeout_s)}
    if also:
        report["also"] = place(also, also_strategy, pending_timeout_s)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", default="auto")
    ap.add_argument("--profile", default="gpu-tp16", help="profile name or YAML path")
    ap.add_argument("--model", default="verifier", help="model_id of the LLMConfig")
    ap.add_argument("--also", type=json.loads, default=None, help="JSON list of bundles expected not to fit")
    ap.add_argument("--also-strategy", default="PACK")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--pending-timeout", type=float, default=5.0)
    a = ap.parse_args(argv)
    import ray

    ray.init(address=a.address, log_to_driver=False, logging_level="WARNING")
    try:
        report = probe(a.profile, a.model, a.also, a.also_strategy, a.timeout, a.pending_timeout)
    finally:
        ray.shutdown()
    print(json.dumps(report))
    return 0 if report["engine"]["ready"] else 1


if __name__ == "__main__":
    sys.exit(main())
