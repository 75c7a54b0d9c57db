"""Structured outputs: the agent's messages in a form the client chose, a JSON value that a JSON Schema accepts.

- ``check_output_schema`` says whether a client's schema can be served, or raises ``ValueError`` saying why
  not: at most 16 KiB and 16 levels deep with RE2 patterns (as a client tool's schema), valid under JSON
  Schema 2020-12, every ``$ref`` local and resolvable, OpenAI's strict rules when ``strict``, and compiled by
  xgrammar (vLLM's grammar backend) where xgrammar is installed.
- ``MessageFormat`` is one session's form: ``check(text)`` says why a message does not follow it (None if it
  does), ``example()`` writes one that does, ``embedded()`` is the schema placed in the action schema's message
  ``text``, so that an engine's grammar writes the client's value there.
- ``instance(schema)`` builds a value that a schema of OpenAI's strict subset accepts: objects (required
  properties), arrays (``items``, ``minItems``), strings (``enum``, ``const``, lengths; ``format`` and
  ``pattern`` are not honoured), numbers and integers (bounds, ``multipleOf``), booleans, null, ``anyOf`` and
  local ``$ref``. Pure functions: no I/O.

A message's text is the value's compact JSON (``compact``), whoever wrote it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

import jsonschema

from ..tools.schema import check_client_schema, re2_validator

JSON_OBJECT: dict[str, Any] = {"type": "object"}  # ``json_object``: any object
OUTPUT = "output"  # the client's schema's name among the action schema's $defs
MAX_HOPS = 64  # subschemas followed from the root before a value is given up as infinite
_SUBSCHEMA = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames")
_SUBSCHEMAS = ("anyOf", "allOf", "oneOf", "prefixItems")
_NAMED = ("properties", "$defs", "definitions", "dependentSchemas", "patternProperties")


def parse_json(text: str) -> Any:
    """The JSON value ``text`` holds; ``ValueError`` if none (NaN and Infinity are no JSON)."""
    return json.loads(text, parse_constant=_no_constant)


def compact(value: Any) -> str:
    """A JSON value as the text of a message: compact, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class MessageFormat:
    """The form of a session's messages to the user: JSON text whose value ``schema`` accepts."""

    schema: Mapping[str, Any] = field(default_factory=lambda: dict(JSON_OBJECT))
    name: str = OUTPUT

    @classmethod
    def of(cls, output_format: Any) -> MessageFormat | None:
        """The form an API ``OutputFormat`` (``type``, ``name``, ``schema_``) asks for; None for none."""
        if output_format is None:
            return None
        if output_format.type == "json_object":
            return cls(dict(JSON_OBJECT), "json_object")
        return cls(output_format.schema_, output_format.name or OUTPUT)

    @cached_property
    def _validator(self) -> Any:
        return re2_validator(dict(self.schema))

    def check(self, text: str) -> str | None:
        """None if ``text`` is JSON that the schema accepts, else a one-line reason naming the form."""
        try:
            value = parse_json(text)
        except (ValueError, RecursionError):
            return f"the message is not JSON, and output_format {self.name!r} asks for a JSON value"
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "the value"
        return f"the message does not follow output_format {self.name!r}: {where}: {_short(error.message)}"

    def example(self) -> str:
        """A message the schema accepts (``instance``), as JSON text."""
        return compact(instance(dict(self.schema)))

    def embedded(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(slot, defs): the schema as it sits in another one, ``{"$ref": "#/$defs/output"}``, and the
        ``$defs`` to add at that one's root: the schema as ``output`` and its own definitions as
        ``output__NAME``, every local ``$ref`` rewritten to match."""
        own = {**dict(self.schema.get("definitions") or {}), **dict(self.schema.get("$defs") or {})}
        body = {k: v for k, v in self.schema.items() if k not in ("$defs", "definitions", "$schema", "$id")}
        defs = {OUTPUT: _rebase(body), **{f"{OUTPUT}__{k}": _rebase(v) for k, v in own.items()}}
        return {"$ref": f"#/$defs/{OUTPUT}"}, defs


def _rebase(node: Any) -> Any:
    """``node`` with every local ``$ref`` pointing into the embedded copy."""
    if isinstance(node, list):
        return [_rebase(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _rebase(v) for k, v in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        m = re.match(r"^#/(?:\$defs|definitions)/([^/]+)(.*)$", ref)
        out["$ref"] = f"#/$defs/{OUTPUT}__{m[1]}{m[2]}" if m else f"#/$defs/{OUTPUT}{ref[1:]}"
    return out


# -- which schemas a session may ask for ---------------------------------------------------------------------

def check_output_schema(schema: Any, strict: bool | None) -> None:
    """Raise ``ValueError`` saying why ``schema`` cannot be an output format here (see the module's doc)."""
    if not isinstance(schema, dict):
        raise ValueError("schema must be a JSON Schema object")
    check_client_schema(schema)
    for ref in _refs(schema):
        _resolve(schema, ref)
    if strict:
        _check_strict(schema)
    instance(schema)  # a schema with no finite value would keep a grammar writing forever
    why = _grammar_error(json.dumps(schema, sort_keys=True))
    if why is not None:
        raise ValueError(f"the grammar backend cannot enforce this schema: {why}")


def _check_strict(schema: dict[str, Any]) -> None:
    """OpenAI's strict structured outputs: the root is an object (no ``anyOf`` at the root), and every object
    sets ``additionalProperties: false`` and lists every property in ``required``."""
    if schema.get("type") != "object" or "anyOf" in schema:
        raise ValueError(f'strict: the schema must be of type: "object" without anyOf at its root, got '
                         f'type: {json.dumps(schema.get("type"))}')
    for where, node in _subschemas(schema, ()):
        types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        if "object" not in types and "properties" not in node:
            continue
        context = "/".join(where) or "root"
        if node.get("additionalProperties") is not False:
            raise ValueError(f"strict: at {context}, additionalProperties is required to be supplied and to be false")
        missing = [k for k in node.get("properties") or {} if k not in (node.get("required") or [])]
        if missing:
            raise ValueError(f"strict: at {context}, required must list every property; missing {missing[0]!r}")


def _subschemas(node: Any, where: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every schema in ``node`` (itself included), with its path; values (``const``, ``enum``) are none."""
    if not isinstance(node, dict):
        return
    yield where, node
    for key, value in node.items():
        if key in _SUBSCHEMA:
            yield from _subschemas(value, (*where, key))
        elif key in _SUBSCHEMAS and isinstance(value, list):
            for i, item in enumerate(value):
                yield from _subschemas(item, (*where, key, str(i)))
        elif key in _NAMED and isinstance(value, dict):
            for name, item in value.items():
                yield from _subschemas(item, (*where, key, name))


def _refs(node: Any) -> Iterator[str]:
    for _, sub in _subschemas(node, ()):
        if "$ref" in sub:
            yield sub["$ref"]


def _resolve(root: dict[str, Any], ref: Any) -> dict[str, Any]:
    """The schema a local ``$ref`` (``#`` or ``#/a/b``) points to; ``ValueError`` for any other."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise ValueError(f"$ref {str(ref)[:80]!r}: only local references (#/$defs/...) are supported")
    node: Any = root
    for part in filter(None, ref[1:].split("/")):
        key = part.replace("~1", "/").replace("~0", "~")
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            raise ValueError(f"$ref {ref[:80]!r} points to nothing")
    if not isinstance(node, dict):
        raise ValueError(f"$ref {ref[:80]!r} does not point to a schema")
    return node


@cache
def _xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError:
        return None
    return xgrammar


def _grammar_error(text: str) -> str | None:
    """Why xgrammar (vLLM's grammar backend) cannot compile the schema; None if it can or is not installed."""
    xgrammar = _xgrammar()
    if xgrammar is None:
        return None
    try:
        xgrammar.Grammar.from_json_schema(text)
    except Exception as exc:  # noqa: BLE001 - the compiler's RuntimeError carries its reason
        return _short(re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", str(exc).strip()))
    return None


# -- an instance of a schema ---------------------------------------------------------------------------------

def instance(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None, depth: int = 0) -> Any:
    """A value ``schema`` accepts (see the module's doc for the subset); a recursive schema stops at its
    null or empty branches past a few levels. ``ValueError`` for a schema that has no finite value (a
    required property that refers back to its own object, with no way out)."""
    root = schema if root is None else root
    if depth > MAX_HOPS:
        raise ValueError("the schema has no finite value: a required property refers back to itself")
    if "$ref" in schema:
        return instance(_resolve(dict(root), schema["$ref"]), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        plain = [b for b in branches if b.get("type") != "null"]
        pick = (plain or branches)[0] if depth < 6 else next((b for b in branches if b.get("type") == "null"),
                                                               branches[0])
        return instance(pick, root, depth + 1)
    kind = _kind(schema)
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: instance(props.get(k) or {}, root, depth + 1) for k in schema.get("required") or []}
    if kind == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return [instance(items, root, depth + 1) for _ in range(schema.get("minItems") or 0)]
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind in ("boolean", "null"):
        return {"boolean": True, "null": None}[kind]
    low, high = schema.get("minLength") or 0, schema.get("maxLength")
    n = max(low, min(7, high if high is not None else 7))
    return ("example" + "x" * n)[:n]


def _kind(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        return "object" if "properties" in schema else "array" if "items" in schema else "string"
    return kind


def _number(schema: Mapping[str, Any], integer: bool) -> int | float:
    """1 if the schema's bounds allow it, else a value inside them (an integer one if ``integer``)."""
    lo, xlo = schema.get("minimum"), schema.get("exclusiveMinimum")
    hi, xhi = schema.get("maximum"), schema.get("exclusiveMaximum")
    if integer:
        v = max([1, *([math.ceil(lo)] if lo is not None else []), *([math.floor(xlo) + 1] if xlo is not None else [])])
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            v = math.ceil(v / step) * step
        return min([v, *([math.floor(hi)] if hi is not None else []), *([math.ceil(xhi) - 1] if xhi is not None else [])])
    low = max((b for b in (lo, xlo) if b is not None), default=None)
    high = min((b for b in (hi, xhi) if b is not None), default=None)
    inside = ((lo is None or 1 >= lo) and (xlo is None or 1 > xlo) and (hi is None or 1 <= hi)
              and (xhi is None or 1 < xhi))
    if inside:
        return 1
    if low is not None and high is not None:
        return (low + high) / 2
    return low + 1 if low is not None else high - 1  # type: ignore[operator]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _short(text: str, limit: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
