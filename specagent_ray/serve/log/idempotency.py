"""Durable idempotency records of staged writes: ``key -> (hash of the call, observation)``, in the store.

Two objects per key, each a conditional create (never overwritten):
- ``idem/<key>/claim.json`` ``{digest, host}``: stored *before* the write runs. Exactly one tool host ever
  claims a key, so a write runs at most once across tool host restarts, a change in the number of shards,
  and clusters that share the store.
- ``idem/<key>/result.json`` ``{digest, observation}``: stored after the write, before it is acknowledged.

A key that arrives again with the same call gets the stored observation, or, when its claim has no result
(the host died mid-write), an error observation saying the outcome is unknown: never a second run. A key
that arrives with a different call is refused (``KeyReused``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time

from ...protocol.types import Observation, ToolCall
from ...storage.base import AlreadyExists, NotFound, Store, StoreError
from .wire import observation_dict, observation_from

log = logging.getLogger(__name__)


class KeyReused(ValueError):
    """An idempotency key arrived with another call than the one it was first used for."""


class StaleEpoch(RuntimeError):
    """A write from a coordinator whose lease epoch is older than the newest this tool host has seen."""


def call_digest(call: ToolCall) -> str:
    text = json.dumps({"name": call.name, "arguments": call.arguments}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def unknown_outcome(key: str, why: str) -> Observation:
    return Observation(f"Error: write outcome unknown ({why}); key {key} is not run again", error=True)


class IdempotencyRecords:
    """Guarantees: ``claim`` lets exactly one caller (ever, per key and store) run the write; a claim or a
    result under the key for another call raises ``KeyReused``; ``finish`` stores the observation (with
    retries) before the caller acknowledges the write."""

    def __init__(self, store: Store, host: str | None = None, finish_attempts: int = 5):
        self.store = store
        self.host = host or secrets.token_hex(8)  # this tool host instance: its own claims are its own
        self.finish_attempts = finish_attempts

    @staticmethod
    def _key(key: str, what: str) -> str:
        return f"idem/{key.replace(':', '/')}/{what}.json"

    def claim(self, key: str, digest: str) -> Observation | None:
        """None: the caller owns the key and runs the write. Otherwise the answer for a spent key."""
        prior = self._result(key, digest)
        if prior is not None:
            return prior
        mine = json.dumps({"digest": digest, "host": self.host}, sort_keys=True).encode()
        try:
            self.store.create(self._key(key, "claim"), mine)
            return None
        except AlreadyExists:
            claim = json.loads(self.store.get(self._key(key, "claim")))
        if claim.get("digest") != digest:
            raise KeyReused(f"idempotency key {key} was first used for another call; refused")
        if claim.get("host") == self.host:
            return None  # our own claim whose answer we lost; this host never ran it (see ToolHost)
        return self._result(key, digest) or unknown_outcome(key, "an earlier tool host claimed it and left no result")

    def _result(self, key: str, digest: str) -> Observation | None:
        try:
            doc = json.loads(self.store.get(self._key(key, "result")))
        except NotFound:
            return None
        if doc.get("digest") != digest:
            raise KeyReused(f"idempotency key {key} was first used for another call; refused")
        return observation_from(doc["observation"])

    def finish(self, key: str, digest: str, observation: Observation) -> bool:
        """Store the write's observation. False (and a warning) if the store refused every attempt."""
        data = json.dumps({"digest": digest, "observation": observation_dict(observation)}, sort_keys=True).encode()
        for attempt in range(self.finish_attempts):
            try:
                self.store.create(self._key(key, "result"), data)
                return True
            except AlreadyExists:
                log.error("idempotency key %s already has another result; kept the first", key)
                return False
            except StoreError as exc:
                log.warning("could not store the result of %s (attempt %d): %s", key, attempt + 1, exc)
                time.sleep(0.1 * 2 ** attempt)
        return False
