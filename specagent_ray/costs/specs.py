"""Model specs and GPU profiles for the ESTIMATED cost model, read from the package's YAML data.

``data/models.yaml`` and ``data/gpus.yaml`` hold the numbers and, for each entry, a ``source`` that says
where they come from. Guarantees: every loaded spec passes the checks below (positive sizes, active <=
total, kv_layers <= layers, kv_heads <= n_heads); unknown keys and duplicate names are rejected; an unknown
name raises ValueError listing the known ones.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelSpec(BaseModel):
    """The shape of one language model, as the cost model needs it.

    ``active_params`` is what one token touches (MoE: routed + shared experts + dense parts; dense models:
    equal to ``total_params``). ``kv_layers`` counts only layers that keep a KV cache (for hybrid
    linear-attention models, the full-attention layers).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    total_params: int = Field(gt=0)
    active_params: int = Field(gt=0)
    layers: int = Field(gt=0)
    kv_layers: int = Field(ge=0)
    n_heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    bytes_per_param: float = Field(gt=0)
    kv_bytes: float = Field(gt=0)
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.active_params > self.total_params:
            raise ValueError(f"{self.name}: active_params {self.active_params} > total_params {self.total_params}")
        if self.kv_layers > self.layers:
            raise ValueError(f"{self.name}: kv_layers {self.kv_layers} > layers {self.layers}")
        if self.kv_heads > self.n_heads:
            raise ValueError(f"{self.name}: kv_heads {self.kv_heads} > n_heads {self.n_heads}")
        return self

    @property
    def is_moe(self) -> bool:
        return self.active_params < self.total_params

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of K and V one token adds to the cache: 2 * kv_layers * kv_heads * head_dim * kv_bytes."""
        return 2 * self.kv_layers * self.kv_heads * self.head_dim * self.kv_bytes


class GpuProfile(BaseModel):
    """Peak figures of one GPU: HBM bandwidth (bytes/s), dense BF16 FLOP/s, memory (bytes), and the
    latency of one small collective within a node and across nodes (tensor/expert parallelism)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    hbm_bytes_per_s: float = Field(gt=0)
    peak_flops: float = Field(gt=0)
    memory_bytes: float = Field(gt=0)
    gpus_per_node: int = Field(default=8, gt=0)
    collective_latency_s: float = Field(default=0.0, ge=0)
    internode_collective_latency_s: float = Field(default=0.0, ge=0)
    source: str = Field(min_length=1)

    def collective_s(self, n_gpus: int) -> float:
        """Latency of one small collective (all-reduce / all-to-all) across ``n_gpus``; 0 on one GPU."""
        if n_gpus <= 1:
            return 0.0
        return self.collective_latency_s if n_gpus <= self.gpus_per_node else self.internode_collective_latency_s


def yaml_entries(text: str, key: str) -> list[Any]:
    """The list under the single top-level ``key`` of a YAML document; ValueError otherwise."""
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or set(doc) != {key} or not isinstance(doc[key], list):
        raise ValueError(f"expected a YAML mapping with the single key {key!r} holding a list")
    return doc[key]


def by_name(items: list[Any]) -> dict[str, Any]:
    """Items keyed by their ``name``; ValueError on a duplicate."""
    out: dict[str, Any] = {}
    for item in items:
        if item.name in out:
            raise ValueError(f"duplicate name {item.name!r}")
        out[item.name] = item
    return out


def parse_models(text: str) -> dict[str, ModelSpec]:
    """Parse a models YAML document (``models: [...]``) into specs keyed by name."""
    return by_name([ModelSpec.model_validate(e) for e in yaml_entries(text, "models")])


def parse_gpus(text: str) -> dict[str, GpuProfile]:
    """Parse a GPU YAML document (``gpus: [...]``) into profiles keyed by name."""
    return by_name([GpuProfile.model_validate(e) for e in yaml_entries(text, "gpus")])


def _read(filename: str) -> str:
    return resources.files("specagent_ray.costs").joinpath("data", filename).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _models() -> dict[str, ModelSpec]:
    return parse_models(_read("models.yaml"))


@lru_cache(maxsize=1)
def _gpus() -> dict[str, GpuProfile]:
    return parse_gpus(_read("gpus.yaml"))


def model_names() -> list[str]:
    """Names of the shipped model specs, sorted."""
    return sorted(_models())


def gpu_names() -> list[str]:
    """Names of the shipped GPU profiles, sorted."""
    return sorted(_gpus())


def load_model(name: str) -> ModelSpec:
    """The shipped spec called ``name``; ValueError listing the known names if there is none."""
    try:
        return _models()[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(model_names())}") from None


def load_gpu(name: str) -> GpuProfile:
    """The shipped GPU profile called ``name``; ValueError listing the known names if there is none."""
    try:
        return _gpus()[name]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(gpu_names())}") from None
