"""The one way to override a Serve profile: a deep merge.

Mappings merge key by key, anything else (scalars, lists) replaces; ``applications`` is keyed by
application name. ``launch/deployment_profiles.py``'s ``load_profile`` merges a run's ``args`` into the SpecAgent
application with it, and ``k8s/serve_config.py`` applies an overlay's overrides with it.

Standard library only: ``k8s/serve_config.py`` loads this file before the project is installed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge(base: Any, extra: Any) -> Any:
    """``extra`` over ``base``: mappings merge recursively, anything else replaces. Neither is changed."""
    if not (isinstance(base, Mapping) and isinstance(extra, Mapping)):
        return copy.deepcopy(extra)
    out = copy.deepcopy(dict(base))
    for key, value in extra.items():
        out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
    return out


def apply_overrides(profile: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A profile dict with ``overrides`` merged in; ``overrides["applications"]`` maps an application's
    name to what is merged into it. ValueError names an application the profile does not have."""
    rest = {k: v for k, v in overrides.items() if k != "applications"}
    apps = overrides.get("applications") or {}
    out = merge(profile, rest)
    names = [a.get("name") for a in out.get("applications", [])]
    unknown = sorted(set(apps) - set(names))
    if unknown:
        raise ValueError(f"overrides name applications {unknown} that the profile does not have ({names})")
    out["applications"] = [merge(a, apps.get(a.get("name"), {})) for a in out.get("applications", [])]
    return out
