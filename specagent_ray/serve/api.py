"""The HTTP API's bodies. Unknown fields are refused, and every limit says what it is."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..protocol.baselines import METHODS
from ..tools.schema import check_client_schema

UserKind = Literal["client", "simulated", "tau2"]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClientTool(Body):
    """A tool the client runs itself. ``read_only`` is a hint, trusted only for trusted client sources."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = Field("", max_length=2000)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}},
                                       description="a JSON Schema: at most 16 KiB and 16 levels deep, patterns in "
                                       "RE2 syntax, no patternProperties")
    read_only: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _safe_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        check_client_schema(v)
        return v


class CreateSession(Body):
    """A new agent session. ``tool_source`` names a source configured on the server; the client can
    never make the server start a command or reach a URL of its choosing."""

    tool_source: str = Field(min_length=1, max_length=64)
    task_id: str | None = Field(None, max_length=256, description="a tau2 task id (tau2 sources; telecom's run "
                                "to 215 characters)")
    message: str | None = Field(None, max_length=20000, description="the user's opening message")
    user: UserKind = Field("client", description="client: the client posts user messages; simulated: the "
                           "scripted tau2 customer (sim engines); tau2: tau2's own LLM user simulator")
    method: str | None = Field(None, description=f"one of {', '.join(METHODS)}; the profile's default if omitted")
    k: int | None = Field(None, ge=1, le=64, description="most steps drafted per block")
    max_steps: int | None = Field(None, ge=1, le=1000)
    review_messages: bool = False
    trial: int = Field(0, ge=0, le=1_000_000, description="seed of simulated engines")
    client_tools: list[ClientTool] = Field(default_factory=list, max_length=128)

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str | None) -> str | None:
        if v is not None and v not in METHODS:
            raise ValueError(f"unknown method {v!r}; choose from {', '.join(METHODS)}")
        return v


class UserMessage(Body):
    text: str = Field(min_length=1, max_length=20000)
    stop: bool = Field(False, description="the user ends the conversation with this message")


class ToolResult(Body):
    call_id: str = Field(min_length=1, max_length=200)
    content: str = Field(max_length=100_000)
    error: bool = False
