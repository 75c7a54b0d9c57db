"""``valid()``: a call is valid iff its tool is known and its arguments match the tool's JSON schema.

``pattern`` is evaluated with RE2 (linear time, no backtracking), so a schema cannot make a check take
exponential time; a pattern RE2 cannot compile is an error for client schemas (``check_client_schema``)
and falls back to Python's ``re`` only for the server's own sources (tau2, configured MCP servers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import cache, lru_cache
from typing import Any

import jsonschema

from ..optional import Missing, require
from ..protocol.types import ToolCall

MAX_SCHEMA_BYTES = 16_384  # one client tool's schema, as JSON
MAX_SCHEMA_DEPTH = 16  # nesting of objects and lists in one client tool's schema
MEMO_KEY_CHARS = 1024  # arguments longer than this, as JSON, are checked every time (SchemaValidator)


@cache
def _re2() -> tuple[Any, Any]:
    """RE2 and its options; ``optional.Missing`` if google-re2 is not installed."""
    require("re2", "checking a pattern in a client tool's schema in linear time")
    import re2

    options = re2.Options()
    options.log_errors = False
    return re2, options


@lru_cache(maxsize=1024)
def compiled(pattern: str, trusted: bool = False) -> Any:
    """``pattern`` compiled by RE2; ``re.error`` if RE2 cannot (Python's ``re`` for trusted schemas).
    Without google-re2 a trusted schema's pattern uses ``re`` and a client's is refused (``re.error``
    naming the install command): a client never gets a backtracking matcher."""
    try:
        re2, options = _re2()
    except Missing as exc:
        if trusted:
            return re.compile(pattern)
        raise re.error(f"pattern {pattern!r} cannot be checked here: {exc}") from None
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        if trusted:
            return re.compile(pattern)
        raise re.error(f"pattern {pattern!r} is not supported (RE2 syntax: no backreferences or lookaround): "
                       f"{exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc}") from None


def check_client_schema(schema: Any) -> None:
    """Raise ``ValueError`` unless ``schema`` is a JSON Schema a client may declare: at most
    ``MAX_SCHEMA_DEPTH`` deep and ``MAX_SCHEMA_BYTES`` long, every ``pattern`` RE2-compilable, no
    ``patternProperties`` (the validation library matches those with Python's backtracking ``re``)."""
    _check_node(schema, 1)
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        raise ValueError(f"schema is {size} bytes as JSON, over the limit of {MAX_SCHEMA_BYTES}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from None


def _check_node(node: Any, depth: int) -> None:
    if depth > MAX_SCHEMA_DEPTH:
        raise ValueError(f"schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    if isinstance(node, list):
        for value in node:
            _check_node(value, depth + 1)
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "patternProperties":
            raise ValueError("patternProperties is not supported in client tool schemas")
        if key == "pattern" and isinstance(value, str):
            try:
                compiled(value)
            except re.error as exc:
                raise ValueError(str(exc)) from None
        _check_node(value, depth + 1)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not compiled(pattern, trusted=True).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


@cache
def _with_re2(cls: type) -> type:
    return jsonschema.validators.extend(cls, {"pattern": _pattern})


class SchemaValidator:
    """Checks tool calls against JSON schemas compiled once per tool (patterns by RE2).

    Answers are memoized per (tool, arguments as canonical JSON), at most ``memo_size`` of them, the oldest
    dropped first: each action is checked when drafted and again before it commits, and many sessions make
    the same calls. Guarantee: a memoized answer is the one a fresh check would give. Arguments that JSON
    cannot spell exactly (a date, a tuple, a non-string key), or longer than ``MEMO_KEY_CHARS`` as JSON,
    are checked every time, so the memo holds at most ``memo_size`` short entries whatever clients send."""

    def __init__(self, schemas: Mapping[str, dict[str, Any]], memo_size: int = 4096):
        self._memo: dict[tuple[str, str], tuple[Any, str | None]] = {}
        self._memo_size = memo_size
        self._validators = {}
        for name, schema in schemas.items():
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            self._validators[name] = _with_re2(cls)(schema)

    @property
    def names(self) -> list[str]:
        return sorted(self._validators)

    def check(self, call: ToolCall) -> str | None:
        """None if valid, else a one-line reason naming the tool and the offending argument."""
        try:
            key = (call.name, json.dumps(call.arguments, sort_keys=True))
        except (TypeError, ValueError):
            return self._check(call)  # not JSON: never memoized
        if len(key[1]) > MEMO_KEY_CHARS:
            return self._check(call)
        seen = self._memo.get(key)
        if seen is not None and seen[0] == call.arguments:
            return seen[1]
        answer, parsed = self._check(call), json.loads(key[1])
        if parsed == call.arguments:  # the JSON spells these arguments exactly: a later equal key means equal
            if len(self._memo) >= self._memo_size:
                del self._memo[next(iter(self._memo))]
            self._memo[key] = (parsed, answer)
        return answer

    def _check(self, call: ToolCall) -> str | None:
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


def re2_validator(schema: dict[str, Any]) -> Any:
    """A validator of ``schema``'s own draft whose ``pattern`` RE2 matches (in linear time)."""
    return _with_re2(jsonschema.validators.validator_for(schema))(schema)
