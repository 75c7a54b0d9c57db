"""Parse model output into an ``Action`` or a ``Verdict``, or say precisely why it cannot be done.

Guarantee: ``parse_action`` and ``parse_verdict`` return a well-formed value or raise
``MalformedOutput`` with a one-line reason. They never raise anything else, whatever the text (checked
by a fuzz test over random and mutated outputs). A returned tool action names a known tool and carries
a JSON object as arguments; a returned verdict has ``0 <= accepted_prefix <= n``. Whether the arguments
match the tool's schema is not checked here: that is the tool adapter's ``valid()``.

Extraction rule (for backends that ignore ``response_format``):

1. A leading ``<think>...</think>`` block is dropped (reasoning models served without a reasoning parser).
2. If the whole remaining text is one JSON value, that value is the output.
3. Otherwise, if the text holds exactly one ````` fenced block (```` ```json ```` or bare), its content
   must be the JSON value.
4. Otherwise the text is split into brace-balanced ``{...}`` spans at depth 0 (braces inside JSON
   strings do not count). The output is accepted only if exactly one span parses as JSON and no span
   is left open. Zero, several, or an unclosed one (a cut-off answer) is malformed: guessing which
   one was meant is how output that nobody asked for gets executed. An object nested inside a span
   is never a candidate, so a fragment of a broken answer (its arguments, a verdict's repair) is
   never taken for the answer.

Beyond that the JSON must be strict: no NaN/Infinity, no duplicate keys, an object at the top. Keys the
schema does not name are ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from ..protocol.interfaces import MalformedOutput
from ..protocol.types import MAX_CALLS, Action, ActionKind, ToolCall, Verdict
from .structured import compact

MAX_CHARS = 200_000  # longer output is refused before any parsing
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_KINDS = {k.value: k for k in ActionKind}


def parse_action(text: object, tool_names: Collection[str], finish_reason: str | None = None,
                 parallel: bool = False, structured: bool = False) -> Action:
    """The action in ``text``: ``{"kind": "tool", "name", "arguments"} | {"kind": "message", "text"}
    | {"kind": "stop"}``, and with ``parallel`` also ``{"kind": "tools", "calls": [{"name", "arguments"},
    ...]}`` (at least 2, at most ``MAX_CALLS``). ``structured``: a message's text is any JSON value (the
    session's output format), and the action's text is that value's compact JSON; whether the format accepts
    it is the tool adapter's check. Raises ``MalformedOutput`` (and nothing else) if there is none."""
    try:
        return action_from_json(load_object(text, finish_reason), tool_names, parallel, structured)
    except MalformedOutput:
        raise
    except Exception as exc:  # a bug here must still never let unparsed output through
        raise MalformedOutput(f"unparseable output ({type(exc).__name__})") from exc


def parse_verdict(text: object, n: int, tool_names: Collection[str], finish_reason: str | None = None,
                  parallel: bool = False, structured: bool = False) -> Verdict:
    """The verdict ``(j, r, ã)`` in ``text`` for a block of ``n`` steps:
    ``{"accepted_prefix": int, "reason": str, "repair": action | null}``. ``repair`` may be omitted and
    is dropped when the whole block is accepted. With ``parallel``, ``calls`` (a list of booleans, or
    null) answers the staged step's calls one by one, and the repair may be a parallel action (whether
    ``calls`` fits the staged step is ``Verdict.checked``'s to say); ``structured`` as ``parse_action``'s.
    Raises ``MalformedOutput`` (and nothing else)."""
    try:
        return verdict_from(load_object(text, finish_reason), n, tool_names, parallel, structured)
    except MalformedOutput:
        raise
    except Exception as exc:
        raise MalformedOutput(f"unparseable verdict ({type(exc).__name__})") from exc


def parse_review(text: object, n: int, tool_names: Collection[str], finish_reason: str | None = None,
                 parallel: bool = False, structured: bool = False) -> tuple[Verdict, float | None]:
    """``parse_verdict``'s verdict and the reviewer's ``confidence``: a number in 0..1, else None (missing,
    a bool, a string, out of range: a mid verifier then escalates; the verdict itself stays usable)."""
    try:
        obj = load_object(text, finish_reason)
        verdict = verdict_from(obj, n, tool_names, parallel, structured)
    except MalformedOutput:
        raise
    except Exception as exc:
        raise MalformedOutput(f"unparseable verdict ({type(exc).__name__})") from exc
    sure = obj.get("confidence")
    ok = isinstance(sure, (int, float)) and not isinstance(sure, bool) and 0.0 <= sure <= 1.0
    return verdict, float(sure) if ok else None


# -- from text to one JSON object ------------------------------------------------------------------

def load_object(text: object, finish_reason: str | None = None) -> dict[str, Any]:
    """The one JSON object in ``text`` under the extraction rule above."""
    if not isinstance(text, str):
        raise MalformedOutput(f"output is {type(text).__name__}, not text")
    if len(text) > MAX_CHARS:
        raise MalformedOutput(f"output too long ({len(text)} chars > {MAX_CHARS})")
    body = _THINK.sub("", text, count=1).strip()
    if body.startswith("<think>"):
        raise MalformedOutput("truncated output: unterminated <think> block")
    if not body:
        raise MalformedOutput("truncated output: empty" if finish_reason == "length" else "empty output")
    try:
        value = _loads(body)
    except ValueError as exc:
        value = _extract(body, exc, finish_reason)
    if not isinstance(value, dict):
        raise MalformedOutput(f"expected a JSON object, got {_kind(value)}")
    return value


def _extract(body: str, error: ValueError, finish_reason: str | None) -> Any:
    fences = _FENCE.findall(body)
    if len(fences) == 1:
        try:
            return _loads(fences[0].strip())
        except ValueError as exc:
            raise MalformedOutput(f"fenced block: {_describe(exc, fences[0].strip(), finish_reason)}") from None
    if len(fences) > 1:
        raise MalformedOutput(f"ambiguous output: {len(fences)} fenced blocks")
    spans, open_at = _top_level_spans(body)
    if open_at is not None:  # an object that never closes: the output was cut off
        raise MalformedOutput(_describe(_error_at(body, open_at) or error, body, finish_reason))
    found, errors = [], []
    for a, b in spans:
        try:
            found.append(_loads(body[a:b]))
        except ValueError:
            errors.append(_error_at(body[:b], a))
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise MalformedOutput(f"ambiguous output: {len(found)} JSON objects in the text")
    raise MalformedOutput(_describe(next((e for e in errors if e is not None), error), body, finish_reason))


def _error_at(body: str, start: int) -> ValueError | None:
    """Why ``body[start:]`` is not JSON, with positions counted in ``body``."""
    try:
        _loads(body[start:])
    except json.JSONDecodeError as exc:
        return json.JSONDecodeError(exc.msg, body, start + exc.pos)
    except ValueError as exc:
        return exc
    return None


def _top_level_spans(body: str) -> tuple[list[tuple[int, int]], int | None]:
    """The ``{...}`` spans at brace depth 0 (braces inside JSON strings do not count), and where an
    unclosed one starts, if any. Objects nested in a span are never candidates of their own."""
    spans: list[tuple[int, int]] = []
    depth, start, in_string, escaped = 0, 0, False, False
    for i, c in enumerate(body):
        if depth == 0:
            if c == "{":
                depth, start = 1, i
            continue
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans, (start if depth > 0 else None)


def _describe(exc: ValueError, body: str, finish_reason: str | None) -> str:
    """One line: truncated (by the token limit or mid-JSON) or invalid JSON, with the position."""
    if finish_reason == "length":
        return f"truncated output (finish_reason=length) after {len(body)} chars"
    if isinstance(exc, json.JSONDecodeError):
        if exc.msg.startswith("Unterminated") or exc.pos >= len(body.rstrip()):
            return f"truncated output: unterminated JSON at char {exc.pos}"
        return f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (char {exc.pos})"
    return f"invalid JSON: {str(exc)[:120]}"


def _loads(body: str) -> Any:
    try:
        return _decoder().decode(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _decoder() -> json.JSONDecoder:
    return json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:40]!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _kind(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


# -- from a JSON object to protocol values ---------------------------------------------------------

def action_from_json(obj: Mapping[str, Any], tool_names: Collection[str], parallel: bool = False,
                     structured: bool = False) -> Action:
    kind = obj.get("kind")
    if "kind" not in obj:
        raise MalformedOutput("missing field 'kind'")
    if kind == "tools":
        if not parallel:
            raise MalformedOutput("several tool calls in one action, and this session takes one at a time")
        return _parallel_action(obj, tool_names)
    if not isinstance(kind, str) or kind not in _KINDS:
        raise MalformedOutput(f"kind must be one of tool, message, stop, got {_short(kind)}")
    if _KINDS[kind] is ActionKind.STOP:
        return Action.stop()
    if _KINDS[kind] is ActionKind.MESSAGE and structured:
        if "text" not in obj:
            raise MalformedOutput("message: missing field 'text'")
        return Action.message(compact(obj["text"]))
    if _KINDS[kind] is ActionKind.MESSAGE:
        text = _field(obj, "text", str, "message")
        return Action.message(text)
    return Action(ActionKind.TOOL, _call(obj, tool_names, "tool action"))


def _call(obj: Mapping[str, Any], tool_names: Collection[str], what: str) -> ToolCall:
    name = _field(obj, "name", str, what)
    if name not in tool_names:
        raise MalformedOutput(f"unknown tool {name[:80]!r}")
    return ToolCall(name, _field(obj, "arguments", dict, what))


def _parallel_action(obj: Mapping[str, Any], tool_names: Collection[str]) -> Action:
    calls = obj.get("calls")
    if not isinstance(calls, list) or not 2 <= len(calls) <= MAX_CALLS:
        raise MalformedOutput(f"tools action: calls must be a list of 2 to {MAX_CALLS} calls, got "
                              f"{_kind(calls) if not isinstance(calls, list) else len(calls)}")
    if not all(isinstance(c, dict) for c in calls):
        raise MalformedOutput("tools action: every call must be an object")
    return Action.parallel([_call(c, tool_names, f"tools action, call {i}") for i, c in enumerate(calls)])


def verdict_from(obj: Mapping[str, Any], n: int, tool_names: Collection[str], parallel: bool = False,
                 structured: bool = False) -> Verdict:
    j = _field(obj, "accepted_prefix", int, "verdict")
    if not 0 <= j <= n:
        raise MalformedOutput(f"accepted_prefix {_short(j)} outside 0..{n}")
    reason = _field(obj, "reason", str, "verdict")
    calls = _per_call(obj.get("calls")) if parallel and j == n else None
    raw = obj.get("repair")
    if raw is None or (j == n and (calls is None or all(calls))):
        return Verdict(j, reason, None, calls)
    if not isinstance(raw, dict):
        raise MalformedOutput(f"repair malformed: expected an object or null, got {_kind(raw)}")
    try:
        repair = action_from_json(raw, tool_names, parallel, structured)
    except MalformedOutput as exc:
        raise MalformedOutput(f"repair malformed: {exc}") from None
    return Verdict(j, reason, repair, calls)


def _per_call(raw: object) -> tuple[bool, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_CALLS or not all(isinstance(c, bool) for c in raw):
        raise MalformedOutput(f"verdict: calls must be null or a list of 1 to {MAX_CALLS} true/false, got "
                              f"{_short(raw)}")
    return tuple(raw)


def _field(obj: Mapping[str, Any], key: str, typ: type, what: str) -> Any:
    if key not in obj:
        raise MalformedOutput(f"{what}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        expected = {str: "string", int: "integer", dict: "object"}[typ]
        raise MalformedOutput(f"{what}: {key} must be {expected}, got {_kind(value)}")
    return value


def _short(value: object) -> str:
    try:
        text = repr(value)
    except ValueError:  # an integer too long to print
        return "<huge number>"
    return text if len(text) <= 40 else text[:37] + "..."
