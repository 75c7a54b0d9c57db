"""``valid()``: a call is valid iff its tool is known and its arguments match the tool's JSON schema."""

from __future__ import annotations

from typing import Any, Mapping

import jsonschema

from ..protocol.types import ToolCall


class SchemaValidator:
    """Checks tool calls against JSON schemas compiled once per tool."""

    def __init__(self, schemas: Mapping[str, dict[str, Any]]):
        self._validators = {}
        for name, schema in schemas.items():
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            self._validators[name] = cls(schema)

    @property
    def names(self) -> list[str]:
        return sorted(self._validators)

    def check(self, call: ToolCall) -> str | None:
        """None if valid, else a one-line reason naming the tool and the offending argument."""
        validator = self._validators.get(call.name)
        if validator is None:
            return f"unknown tool {call.name!r}"
        if not isinstance(call.arguments, dict):
            return f"{call.name}: arguments must be an object, got {type(call.arguments).__name__}"
        error = jsonschema.exceptions.best_match(validator.iter_errors(call.arguments))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        return f"{call.name}: {where}: {error.message}"
