"""Session ids: ``"<shard>-<random hex>"``, the coordinator shard that owns the session first (an id without
a shard prefix, as written before shards existed, is shard 0's). Everything that routes or fences by shard
reads it here: the gateway's router (``sessions/shards.py``) and the tool host's lease-epoch check."""

from __future__ import annotations


def session_id(shard: int, token: str) -> str:
    return f"{shard}-{token}"


def shard_of(sid: str) -> int | None:
    """The shard a session id (or a conversation's, ``conv_<session id>``) names; None if it names none."""
    head, sep, rest = sid.removeprefix("conv_").partition("-")
    if not sep:
        return 0  # an id from before shards: shard 0's
    return int(head) if head.isdigit() and len(head) <= 3 and rest else None
