"""An in-memory tool adapter with JSON-schema validation, for tests and the throughput bench."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..protocol.types import Effect, Observation, ToolCall
from .schema import SchemaValidator


@dataclass
class ToolSpec:
    effect: Effect
    parameters: dict[str, Any]
    fn: Callable[..., Any] = lambda **kw: "ok"


@dataclass
class InMemoryTools:
    """Tools defined by ``ToolSpec``s. Unknown tools are WRITE. ``executed`` lists every call run."""

    specs: dict[str, ToolSpec]
    executed: list[ToolCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.validator = SchemaValidator({name: s.parameters for name, s in self.specs.items()})

    def classify(self, call: ToolCall) -> Effect:
        spec = self.specs.get(call.name)
        return spec.effect if spec is not None else Effect.WRITE

    def validate(self, call: ToolCall) -> str | None:
        return self.validator.check(call)

    async def execute(self, call: ToolCall) -> Observation:
        self.executed.append(call)
        return Observation(str(self.specs[call.name].fn(**call.arguments)))


def object_schema(**properties: str) -> dict[str, Any]:
    """A JSON schema for an object whose listed properties are all required, e.g. ``id="string"``."""
    return {
        "type": "object",
        "properties": {k: {"type": t} for k, t in properties.items()},
        "required": list(properties),
        "additionalProperties": False,
    }
