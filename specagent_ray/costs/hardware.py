"""The deployment a cost estimate is made for: which model specs run each role, on which GPU profile and
how many GPUs. The bench takes it from its flags and a served application from its profile, so that a
resource report always names the hardware it was estimated for."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .deployment import RoleDeployment
from .specs import gpu_names, load_gpu, load_model, model_names


class Hardware(BaseModel):
    """Strong and weak model specs, and an optional mid verifier's (the three-tier chain), on a named GPU
    profile (names from ``costs/data``; an unknown name is refused with the known ones). The defaults are the
    paper's: Qwen3.5-397B-A17B on 16 H20, Qwen3-4B on 1, no mid verifier."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strong_model: str = Field("qwen3.5-397b-a17b", description="the verifier's model spec")
    weak_model: str = Field("qwen3-4b", description="the drafter's model spec")
    gpu: str = Field("h20", description="the GPU profile both roles run on")
    strong_gpus: int = Field(16, ge=1, le=4096, description="GPUs of one verifier replica")
    weak_gpus: int = Field(1, ge=1, le=4096, description="GPUs of one drafter replica")
    mid_model: str | None = Field(None, description="the mid verifier's model spec (e.g. qwen3-32b); None: no chain")
    mid_gpus: int = Field(2, ge=1, le=4096, description="GPUs of one mid-verifier replica")

    @field_validator("strong_model", "weak_model", "mid_model")
    @classmethod
    def _known_model(cls, name: str | None) -> str | None:
        if name is not None and name not in model_names():
            raise ValueError(f"unknown model spec {name!r}; known: {', '.join(model_names())}")
        return name

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, name: str) -> str:
        if name not in gpu_names():
            raise ValueError(f"unknown GPU profile {name!r}; known: {', '.join(gpu_names())}")
        return name

    def deployments(self) -> dict[str, RoleDeployment]:
        """Each role's model spec on its GPUs, as the resource report needs them; "mid" only with a mid model."""
        gpu = load_gpu(self.gpu)
        out = {"strong": RoleDeployment(spec=load_model(self.strong_model), gpu=gpu, n_gpus=self.strong_gpus),
               "weak": RoleDeployment(spec=load_model(self.weak_model), gpu=gpu, n_gpus=self.weak_gpus)}
        if self.mid_model is not None:
            out["mid"] = RoleDeployment(spec=load_model(self.mid_model), gpu=gpu, n_gpus=self.mid_gpus)
        return out
