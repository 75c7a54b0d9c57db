"""Deployment profiles (``deployments/*.yaml``): Serve configs validated by Ray's own schemas.

``load_profile`` parses a profile through ``ray.serve.schema.ServeDeploySchema``, each SpecAgent
application's args through ``AppConfig`` and each Ray Serve LLM application's ``llm_configs`` through
``ray.serve.llm.LLMConfig``, so a broken field fails here with its path. ``run_profile`` deploys every
application of a profile on the connected Ray cluster, as ``serve deploy`` would.
"""

from __future__ import annotations

import importlib
import os
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..overrides import merge

PROFILES = ("local-cpu", "sim", "gpu-tp16", "gpu-tp16-chain", "edge-cloud", "scripted")
ROLES = ("drafter", "verifier", "mid")  # our app's engines that a profile's own llm_configs may serve
OURS = "specagent_ray.serve.app:build_app"
RAY_LLM = "ray.serve.llm:build_openai_app"
# deployments/ of the checkout, reached through the package's link to it (specagent_ray/profiles), which a
# wheel carries as a folder of copies: an installed package finds its profiles the same way.
FOLDER = Path(__file__).parents[1] / "profiles"


def profile_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A profile name (``sim``) or a YAML path; raises ValueError listing the profiles."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise ValueError(f"no profile file {path}")
        return path
    if str(name_or_path) not in PROFILES:
        raise ValueError(f"unknown profile {name_or_path!r}; choose from {', '.join(PROFILES)} or give a YAML path")
    return FOLDER / f"{name_or_path}.yaml"


def load_profile(name_or_path: str | os.PathLike[str], args: Mapping[str, Any] | None = None,
                 port: int | None = None) -> Any:
    """The profile as a validated ``ServeDeploySchema``. ``args`` are merged into the SpecAgent
    application's args (``overrides.merge``: mappings merge, anything else replaces), e.g.
    ``{"session_log": "/tmp/log"}``. ``port`` moves the HTTP
    port, and the loopback engine URLs with it. Relative local paths (model folders, the session log)
    are made absolute here, because replicas do not share the caller's working directory."""
    from ray.serve.schema import ServeDeploySchema

    raw = yaml.safe_load(profile_path(name_or_path).read_text())
    old_port = (raw.get("http_options") or {}).get("port", 8000)
    if port is not None:
        raw.setdefault("http_options", {})["port"] = port
    for app in raw.get("applications", []):
        app_args = app.get("args") or {}
        if app.get("import_path") == OURS:
            if args:
                app_args = merge(app_args, args)
            if port is not None:
                for role in (*ROLES, "user"):
                    e = (app_args.get("engines") or {}).get(role)
                    if e:
                        e["url"] = moved(e["url"], old_port, port)
            if "://" not in app_args.get("session_log", "://"):
                app_args["session_log"] = str(Path(app_args["session_log"]).absolute())
        for cfg in app_args.get("llm_configs", []):
            source = cfg.get("model_loading_config", {}).get("model_source", "")
            if source.startswith("."):
                cfg["model_loading_config"]["model_source"] = str(Path(source).absolute())
        app["args"] = app_args
    schema = ServeDeploySchema.model_validate(raw) if hasattr(ServeDeploySchema, "model_validate") \
        else ServeDeploySchema.parse_obj(raw)
    for app in schema.applications:
        validate_args(app.import_path, app.args or {})
    check_engines(schema.applications)
    return schema


def validate_args(import_path: str, args: Mapping[str, Any]) -> None:
    """Raise ValueError naming the bad field if ``args`` do not fit the application's builder."""
    if import_path == OURS:
        from ..serve.core.config import AppConfig

        AppConfig.model_validate(args)
    elif import_path == RAY_LLM:
        from ray.serve.llm import LLMConfig

        configs = args.get("llm_configs") or []
        if not configs:
            raise ValueError(f"{RAY_LLM} needs llm_configs")
        for cfg in configs:
            LLMConfig.model_validate(cfg)
    else:
        raise ValueError(f"unknown application builder {import_path!r}; profiles use {OURS} and {RAY_LLM}")


def check_engines(apps: Iterable[Any]) -> None:
    """Raise ValueError where our app asks an engine of the same config for what it does not do: priorities
    (``send_priority``) of one without vLLM's priority scheduler, which then refuses every request; a
    prefill ahead (``prefill_ahead``) of a verifier without prefix caching, which would compute H twice."""
    engines = {c["model_loading_config"]["model_id"]: c.get("engine_kwargs") or {}
               for a in apps if a.import_path == RAY_LLM for c in (a.args or {}).get("llm_configs", [])}
    for app in apps:
        if app.import_path != OURS:
            continue
        cfg = (app.args or {}).get("engines") or {}
        for role in ROLES:
            e = cfg.get(role) or {}
            kw = engines.get(e.get("model"))
            if kw is None:
                continue  # not served by this config (a cloud API)
            if e.get("send_priority") and kw.get("scheduling_policy", "fcfs") != "priority":
                raise ValueError(f"engines.{role}.send_priority is on, but engine {e['model']!r} runs "
                                 f"scheduling_policy {kw.get('scheduling_policy', 'fcfs')!r}: set its engine_kwargs' "
                                 "scheduling_policy to priority, or send_priority to false")
            if role == "verifier" and cfg.get("prefill_ahead") and not kw.get("enable_prefix_caching"):
                raise ValueError(f"engines.prefill_ahead is on, but engine {e['model']!r} has no "
                                 "enable_prefix_caching: turn it on, or prefill_ahead off")


def moved(url: str, old_port: int, port: int) -> str:
    """``url`` on ``port`` if it points at this cluster's own HTTP proxy (loopback, ``old_port``), else as is."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost") or parts.port != old_port:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.hostname}:{port}"))


def build(import_path: str, args: Mapping[str, Any]) -> Any:
    module, _, attr = import_path.partition(":")
    return getattr(importlib.import_module(module), attr)(dict(args))


def run_profile(schema: Any, port: int | None = None, proxy_location: str | None = None,
                say: Callable[[str], None] = lambda line: None) -> str:
    """Deploy every application of a validated profile on the connected Ray cluster, without waiting
    for them to run (``workload.wait_ready`` waits, and reports a deployment that cannot start);
    returns the base URL. The caller owns ``ray.init`` and ``serve.shutdown``.
    ``proxy_location="HeadOnly"`` where several nodes share one host and so cannot each bind the port."""
    from .startup import start_serve

    http = schema.http_options
    host, port = (getattr(http, "host", None) or "127.0.0.1"), port or getattr(http, "port", 8000)
    start_serve({"host": host, "port": port}, say, **({"proxy_location": proxy_location} if proxy_location else {}))
    deploy((a.name, a.route_prefix, a) for a in schema.applications)
    return f"http://{host}:{port}"


def deploy(apps: Iterable[tuple[str, str, Any]]) -> None:
    """Deploy each ``(name, route_prefix, application schema)`` on the running Serve instance and
    return at once: Serve's own wait would end in a bare "failed to update the deployments" error."""
    from ray import serve

    serve.run_many([serve.RunTarget(build(spec.import_path, spec.args or {}), name=name, route_prefix=route)
                    for name, route, spec in apps],
                   wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
