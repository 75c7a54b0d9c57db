"""The client-visible conversation, normalised (``serve/agents/canon.py``).

What normalisation tolerates (a client re-rendering the same history) and what it does not (any other
change), the fingerprint's encoding (no two owners or item lists collide by concatenation), and which
session ids a replay's call ids name."""

from __future__ import annotations

import hashlib
import secrets

import pytest

from specagent_ray.serve.agents.canon import (
    assistant, call, canonical, fingerprint, result, sessions_named, system, user,
)
from specagent_ray.serve.sessions.shards import session_id

SID = "3-0123456789abcdef"
SID2 = "0-fedcba9876543210"
HEX8 = "89abcdef"


def parts(*texts: str, kind: str = "text") -> list[dict]:
    return [{"type": kind, "text": t} for t in texts]


# (left, right, same?): the left and right are two renderings a client might send.
TABLE = [
    # whitespace runs: collapsed and stripped, in every text
    ("ws-run", user("fix  the\tbug"), user("fix the bug"), True),
    ("ws-newlines", user("line one\n\n  line two\r\n"), user("line one line two"), True),
    ("ws-strip", system("  be terse \n"), system("be terse"), True),
    ("ws-result", result("c1", "ok\n"), result("c1", "ok"), True),
    ("ws-assistant", assistant(" done. "), assistant("done."), True),
    # content forms: a string, or a list of text parts of any of the three wires' part types
    ("parts-text", user("hello world"), user(parts("hello world")), True),
    ("parts-input", user("hello world"), user(parts("hello world", kind="input_text")), True),
    ("parts-output", assistant("hi"), assistant(parts("hi", kind="output_text")), True),
    ("parts-split-at-space", user("hello world"), user(parts("hello", "world")), True),
    ("parts-result", result("c1", "42"), result("c1", parts("42")), True),
    ("none-is-empty", assistant(None), assistant(""), True),
    # arguments: JSON key order, spacing and escapes, or a dict for a JSON string
    ("args-order", call("c1", "f", '{"a": 1, "b": [1, 2]}'), call("c1", "f", '{"b":[1,2],"a":1}'), True),
    ("args-dict", call("c1", "f", '{"a": 1}'), call("c1", "f", {"a": 1}), True),
    ("args-nested-order", call("c1", "f", {"o": {"y": 1, "x": 2}}), call("c1", "f", '{"o":{"x":2,"y":1}}'), True),
    ("args-escape", call("c1", "f", '{"s": "\\u00e9"}'), call("c1", "f", {"s": "é"}), True),
    # not tolerated: any other change of text, ids, names, arguments or kind
    ("text-case", user("Fix the bug"), user("fix the bug"), False),
    ("text-punct", user("fix the bug."), user("fix the bug"), False),
    ("text-split-mid-word", user("hello"), user(parts("hel", "lo")), False),
    ("text-no-space", user("a b"), user("ab"), False),
    ("text-nbsp-vs-none", user("a\u00a0b"), user("ab"), False),
    ("image-named", user([*parts("look"), {"type": "image_url", "image_url": {"url": "x"}}]), user("look"), False),
    ("kind", user("hi"), assistant("hi"), False),
    ("system-vs-user", system("hi"), user("hi"), False),
    ("call-id", call("c1", "f", {}), call("c2", "f", {}), False),
    ("call-name", call("c1", "f", {}), call("c1", "g", {}), False),
    ("args-value", call("c1", "f", {"a": 1}), call("c1", "f", {"a": 2}), False),
    ("args-int-float", call("c1", "f", {"a": 1}), call("c1", "f", {"a": 1.0}), False),
    ("args-string-ws", call("c1", "f", {"a": "x  y"}), call("c1", "f", {"a": "x y"}), False),
    ("args-list-order", call("c1", "f", {"a": [1, 2]}), call("c1", "f", {"a": [2, 1]}), False),
    ("args-empty-vs-object", call("c1", "f", ""), call("c1", "f", {}), False),
    ("args-invalid-kept", call("c1", "f", "{a:1}"), call("c1", "f", "{a: 1}"), False),
    ("result-id", result("c1", "ok"), result("c2", "ok"), False),
    ("result-text", result("c1", "ok"), result("c1", "OK"), False),
]


@pytest.mark.parametrize("left,right,same", [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_normalisation_tolerates_re_renderings_and_nothing_else(left, right, same):
    assert (left == right) is same
    assert (fingerprint("t", [left]) == fingerprint("t", [right])) is same


def test_items_have_the_documented_shapes():
    assert system("s") == ("system", "s")
    assert user("u") == ("user", "u")
    assert assistant("a") == ("assistant", "a")
    assert call("c", "n", {"b": 1, "a": 2}) == ("call", "c", "n", '{"a":2,"b":1}')
    assert result("c", "r") == ("result", "c", "r")
    assert user([{"type": "input_image", "image_url": "x"}]) == ("user", "[image]")


def test_empty_assistant_text_beside_calls_is_dropped_but_order_is_not_tolerated():
    with_empty = [user("go"), assistant(""), call("c1", "f", {}), result("c1", "ok")]
    without = [user("go"), call("c1", "f", {}), result("c1", "ok")]
    assert canonical(with_empty) == tuple(without)
    assert fingerprint("t", with_empty) == fingerprint("t", without)
    swapped = [user("go"), result("c1", "ok"), call("c1", "f", {})]
    assert fingerprint("t", swapped) != fingerprint("t", without)
    # a non-empty assistant text beside the call is content, not a rendering
    assert fingerprint("t", [user("go"), assistant("ok"), *without[1:]]) != fingerprint("t", without)


@pytest.mark.parametrize("bad", [42, {"text": "x"}, [{"type": "text", "text": 3}], ["plain string part"]])
def test_content_of_another_shape_is_refused_not_guessed(bad):
    with pytest.raises(TypeError):
        user(bad)


def test_call_refuses_non_string_ids_and_names():
    with pytest.raises(TypeError):
        call(1, "f", {})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        call("c", None, {})  # type: ignore[arg-type]


# -- the fingerprint's encoding ------------------------------------------------------------------------

COLLISIONS = [
    ("field-boundary", ("t", [("user", "a"), ("user", "bc")]), ("t", [("user", "ab"), ("user", "c")])),
    ("item-boundary", ("t", [("a", "b"), ("c",)]), ("t", [("a",), ("b", "c")])),
    ("field-vs-item", ("t", [("user", "ab")]), ("t", [("user", "a"), ("b",)])),
    ("call-fields", ("t", [("call", "a", "bc", "{}")]), ("t", [("call", "ab", "c", "{}")])),
    ("owner-into-items", ("x", [("user", "y")]), ("", [("xuser", "y")])),
    ("owner-eats-kind", ("xuser", [("", "y")]), ("x", [("user", "y")])),
    ("owner-vs-first-item", ("x", [("a",)]), ("", [("x",), ("a",)])),
    ("empty-list-vs-empty-item", ("t", []), ("t", [()])),
    ("nul-separator", ("t", [("user", "a\x00b")]), ("t", [("user", "a"), ("b",)])),
    ("length-digits", ("t", [("user", "1" * 10)]), ("t", [("user", "1"), ("1" * 9,)])),
]


@pytest.mark.parametrize("left,right", [c[1:] for c in COLLISIONS], ids=[c[0] for c in COLLISIONS])
def test_no_two_owners_or_item_lists_collide_by_concatenation(left, right):
    assert fingerprint(*left) != fingerprint(*right)


def test_fingerprint_is_a_stable_sha256_and_tenant_salted():
    items = [system("be brief"), user("hi")]
    fp = fingerprint("alice", items)
    assert isinstance(fp, bytes) and len(fp) == 32
    assert fingerprint("alice", list(items)) == fp
    assert fingerprint("bob", items) != fp


def test_fingerprint_survives_a_lone_surrogate_from_json():
    # json.loads('"\\ud800"') yields a lone surrogate; a client can send one, the server must not crash on it
    assert fingerprint("t", [user("\ud800")]) != fingerprint("t", [user("\ud801")])


# -- ids the server minted -----------------------------------------------------------------------------

@pytest.mark.parametrize("call_id,named", [
    (f"{SID}:w0", SID),
    (f"{SID}:w12", SID),
    (f"{SID}:r3.1-{HEX8}", SID),
    (f"{SID2}:r0.10-{HEX8}", SID2),
    ("999-0123456789abcdef:w1", "999-0123456789abcdef"),
    # only look similar: no session named
    (f"{SID}:w", None),
    (f"{SID}:wx", None),
    (f"{SID}:w1 ", None),
    (f" {SID}:w1", None),
    (f"{SID}:w1\n", None),
    (f"{SID}:w1extra", None),
    ("3-0123456789abcde:w1", None),         # 15 hex digits
    ("3-0123456789abcdef0:w1", None),       # 17 hex digits
    ("3-0123456789ABCDEF:w1", None),        # upper case: never minted
    ("1234-0123456789abcdef:w1", None),     # a 4-digit shard
    (f"{SID}:r3.1-{HEX8}0", None),          # 9 hex digits of hash
    (f"{SID}:r3.1-89abcde", None),          # 7
    (f"{SID}:r3-{HEX8}", None),             # no read number
    ("\u0663-0123456789abcdef:w1", None),   # an Arabic-Indic digit is not a shard
    (f"call_{SID}:w1", None),
    ("call_abc123", None),
    (f"toolu_{SID}", None),
])
def test_sessions_named_reads_only_ids_this_server_mints(call_id, named):
    assert sessions_named([call("x", "f", {}), call(call_id, "f", {})]) == ([named] if named else [])
    assert sessions_named([result(call_id, "ok")]) == ([named] if named else [])


def test_sessions_named_latest_first_and_unique():
    items = [
        user(f"{SID}:w9 in text names nothing"),
        call(f"{SID}:w0", "f", {}), result(f"{SID}:w0", "ok"),
        call(f"{SID2}:r1.1-{HEX8}", "g", {}), result(f"{SID2}:r1.1-{HEX8}", "ok"),
        call(f"{SID}:w1", "f", {}), result(f"{SID}:w1", "ok"),
        assistant("done"),
    ]
    assert sessions_named(items) == [SID, SID2]
    assert sessions_named(items[:5]) == [SID2, SID]
    assert sessions_named([user("hi")]) == []


def test_every_session_id_the_coordinator_mints_is_named():
    # the sessions mint ids with shards.session_id(shard, secrets.token_hex(8)) and call ids
    # "<sid>:w<n>" / "<sid>:r<k>.<j>-<sha256[:8]>" (session.py); the agents package may not import them
    for shard in (0, 7, 10, 99, 100, 999):
        sid = session_id(shard, secrets.token_hex(8))
        digest = hashlib.sha256(b"call").hexdigest()[:8]
        assert sessions_named([call(f"{sid}:w{shard}", "f", {}), result(f"{sid}:r{shard}.1-{digest}", "ok")]) == [sid]
