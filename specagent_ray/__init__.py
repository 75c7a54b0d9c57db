"""specagent-ray: trajectory-level speculation with semantic verification (SpecAgent), served on Ray.

The public surface:

- the protocol (pure, no Ray): ``run_specagent``, ``METHODS`` (SpecAgent and the paper's baselines by
  name), ``Parts`` (the models, tools, user and ledger a run uses) and ``SpecConfig``;
- the served application: ``AppConfig`` (the one config shape of a profile's ``args``), ``build_app``
  (what a Serve config's ``import_path`` names) and ``GatewayClient`` (the HTTP API's client).

The serving names load on first use, so ``import specagent_ray`` costs neither Ray nor an HTTP stack.
"""

from .protocol import METHODS, Parts, SpecConfig, run_specagent

__all__ = ["METHODS", "AppConfig", "GatewayClient", "Parts", "SpecConfig", "build_app", "run_specagent"]


def __getattr__(name: str):
    if name == "AppConfig":
        from .serve.core.config import AppConfig

        return AppConfig
    if name == "build_app":
        from .serve.app import build_app

        return build_app
    if name == "GatewayClient":
        from .launch.client import GatewayClient

        return GatewayClient
    raise AttributeError(f"module 'specagent_ray' has no attribute {name!r}")
