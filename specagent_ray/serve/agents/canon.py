"""The client-visible conversation, normalised: what a stateless client replays, in one vocabulary for every wire.

A canon item is a tuple of strings, its kind first:

- ``("system", text)``: the instructions (a wire joins every system/developer text with ``"\\n\\n"``, first);
- ``("user", text)``;
- ``("assistant", text)``: an agent message's text (a structured one's JSON text);
- ``("call", call_id, name, args)``: a tool call the client saw, ``args`` as canonical JSON;
- ``("result", call_id, text)``: the client's tool result.

The constructors normalise, so two renderings of one conversation give equal items. Tolerated:

- whitespace: every run of whitespace (``str.isspace``: spaces, tabs, newlines, NBSP...) becomes one space,
  and the ends are stripped, in every text (not in ids, names or argument values);
- content forms: a string, or a list of text parts (``text``, ``input_text``, ``output_text``), joined by a
  space (so a text split into parts at whitespace equals the whole text; split inside a word, it does not);
  any other part is named, ``[image]``, ``[file]``, ``[audio]`` or ``[<its type>]``, and not read;
- arguments: JSON key order, spacing and escapes (a JSON text equals the dict it encodes); a text that is not
  JSON is kept as it is;
- an empty assistant or system text (``canonical`` drops it): how Chat Completions spells a message that only
  calls tools, or a request without instructions.

Nothing else: a changed character, case, number (``1`` vs ``1.0``), id, name, argument value or order of
items gives another fingerprint. Content of any other shape is refused (``TypeError``), never guessed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Canon = tuple[str, ...]

TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
# Other parts are named by what they are, one name per thing across the wires' spellings.
PART_NAMES = {"image": "image", "image_url": "image", "input_image": "image",
              "file": "file", "input_file": "file", "document": "file",
              "audio": "audio", "input_audio": "audio"}

# The ids the coordinator mints (serve/sessions: shards.session_id, Session.intent, Session.read_call_id):
# a session id "<shard>-<16 hex>", and call ids "<sid>:w<n>" (writes) and "<sid>:r<k>.<j>-<8 hex>" (reads).
# Digits are ASCII only ("\d" would take any Unicode digit) and without leading zeros, as minted.
SID = re.compile(r"(?:0|[1-9][0-9]{0,2})-[0-9a-f]{16}")
NUMBER = r"(?:0|[1-9][0-9]*)"
MINTED = re.compile(rf"({SID.pattern}):(?:w{NUMBER}|r{NUMBER}\.{NUMBER}-[0-9a-f]{{8}})")

FINGERPRINT_DOMAIN = b"specagent-ray/canon/v1"


def squeeze(text: str) -> str:
    """``text`` with every whitespace run one space and no whitespace at the ends."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    return " ".join(text.split())


def _part(part: Any) -> str:
    if not isinstance(part, Mapping):
        raise TypeError(f"a content part must be an object with a type, not {type(part).__name__}")
    kind = part.get("type")
    if kind in TEXT_PARTS:
        text = part.get("text")
        if not isinstance(text, str):
            raise TypeError(f"a {kind} part's text must be a str, not {type(text).__name__}")
        return text
    if not isinstance(kind, str):
        raise TypeError("a content part must name its type")
    return f"[{PART_NAMES.get(kind, kind)}]"


def text_of(content: str | Iterable[Mapping[str, Any]] | None) -> str:
    """The normalised text of ``content``: a string, a list of parts, or None (no text)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return squeeze(content)
    if isinstance(content, (list, tuple)):
        return squeeze(" ".join(_part(p) for p in content))
    raise TypeError(f"content must be a str or a list of parts, not {type(content).__name__}")


def _id(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def arguments_of(arguments: str | Mapping[str, Any] | Any) -> str:
    """Canonical JSON of a call's arguments (sorted keys, no spaces, UTF-8 as is); a str that is not JSON stays
    as it is. The two never meet: a kept str is not JSON, a canonical one is."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def system(text: str) -> Canon:
    return ("system", squeeze(text))


def user(content: str | Iterable[Mapping[str, Any]] | None) -> Canon:
    return ("user", text_of(content))


def assistant(content: str | Iterable[Mapping[str, Any]] | None) -> Canon:
    return ("assistant", text_of(content))


def call(call_id: str, name: str, arguments: str | Mapping[str, Any]) -> Canon:
    return ("call", _id(call_id, "a call id"), _id(name, "a tool name"), arguments_of(arguments))


def result(call_id: str, content: str | Iterable[Mapping[str, Any]] | None) -> Canon:
    return ("result", _id(call_id, "a call id"), text_of(content))


def canonical(items: Iterable[Canon]) -> tuple[Canon, ...]:
    """``items`` without the empty assistant and system texts: what a fingerprint covers, and what two transcripts
    are compared as."""
    return tuple(item for item in items if not (len(item) == 2 and item[0] in ("assistant", "system") and not item[1]))


def _field(h: Any, data: bytes) -> None:
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)


def fingerprint(owner: str, items: Sequence[Canon]) -> bytes:
    """The SHA-256 of ``owner`` and ``canonical(items)``, encoded so that no other owner or item list encodes alike:
    a domain tag, then the owner, each item's field count and each field, every string length-prefixed (8 bytes,
    big-endian) in UTF-8 (lone surrogates, which JSON can carry, pass through). Equal for two renderings that the
    constructors normalise alike; a tenant's fingerprint never equals another's for any items."""
    h = hashlib.sha256(FINGERPRINT_DOMAIN)
    _field(h, _id(owner, "an owner").encode("utf-8", "surrogatepass"))
    kept = canonical(items)
    h.update(len(kept).to_bytes(8, "big"))
    for item in kept:
        h.update(len(item).to_bytes(8, "big"))
        for value in item:
            _field(h, _id(value, "a canon field").encode("utf-8", "surrogatepass"))
    return h.digest()


def sessions_named(items: Sequence[Canon]) -> list[str]:
    """The session ids that the call ids of ``items``' calls and results name, as this server mints them; latest
    first, each once. An id that only looks like one (another length, other text around it) names nothing; a
    named session is a lead to check, never a proof: anyone can write an id."""
    found: dict[str, None] = {}
    for item in reversed(items):
        if len(item) > 1 and item[0] in ("call", "result") and (m := MINTED.fullmatch(item[1])):
            found.setdefault(m.group(1))
    return list(found)
