"""Where a model role runs and what it costs: the deployment types that the cost model prices and
that telemetry's resource reports carry (telemetry imports them from here, never the other way)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .specs import GpuProfile, ModelSpec


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Pricing(_Frozen):
    """A cloud backend's list prices in dollars per million tokens; ``prompt_per_mtok`` applies to uncached
    prompt tokens, ``cached_per_mtok`` to cached ones."""

    prompt_per_mtok: float = Field(ge=0)
    cached_per_mtok: float = Field(ge=0)
    decode_per_mtok: float = Field(ge=0)


class RoleDeployment(_Frozen):
    """Where one model role runs: the spec and GPU profile the estimates use, the GPUs per call (for
    GPU-seconds), and list prices if it is a cloud backend."""

    spec: ModelSpec
    gpu: GpuProfile
    n_gpus: int = Field(ge=1)
    pricing: Pricing | None = None
