"""The ``Store`` interface shared by the local directory and S3, its errors, and key rules.

A key is a relative, '/'-separated path such as ``tau2/tau2-airline-seed0.json``. The same key names the
same object in every store, so results move between a laptop and a bucket unchanged.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

KEY_RULES = "a key is a relative '/'-separated path: not empty, no leading '/', no empty, '.' or '..' segments"


class StoreError(RuntimeError):
    """A store operation failed; the message names the store location and the key (one line)."""


class PreconditionFailed(StoreError):
    """A conditional write found the key in another state than the caller required (``swap``)."""


class AlreadyExists(PreconditionFailed):
    """``create`` found the key already holding other bytes: another writer got there first."""


class NotFound(StoreError, KeyError):
    """No object under ``key``. A ``KeyError`` too, so ``except KeyError`` code keeps working."""

    def __init__(self, key: str, where: str = "") -> None:
        super().__init__(key)
        self.key = key
        self.where = where

    def __str__(self) -> str:
        return f"no object {self.key!r}" + (f" in {self.where}" if self.where else "")


@runtime_checkable
class Store(Protocol):
    """Bytes under keys.

    Guarantees every implementation gives:
    - ``put`` is atomic: a concurrent or later reader sees the old object (or nothing) or the complete new
      one, never a partial one, also when the writer crashes mid-put;
    - ``get`` returns exactly the bytes put, or raises ``NotFound`` carrying the key;
    - ``list`` returns sorted keys that start with ``prefix`` (a plain string prefix, as in S3);
    - ``delete`` is idempotent: deleting a missing key is not an error;
    - ``create`` never overwrites: of concurrent creators of one key exactly one gets its bytes stored,
      the others get ``AlreadyExists``; it returns the new object's version tag. A creator whose earlier attempt landed unseen (a retry after a lost
      response) finds its own bytes there and succeeds; so data that must tell writers apart carries a
      token of its writer;
    - ``read`` returns the bytes and a version tag; ``swap`` replaces the object only while its version is
      still that tag (compare and swap) and returns the new tag, else raises ``PreconditionFailed``.
    Bad keys raise ``ValueError`` before any I/O.
    """

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def delete(self, key: str) -> None: ...

    def create(self, key: str, data: bytes) -> str: ...

    def read(self, key: str) -> tuple[bytes, str]: ...

    def swap(self, key: str, data: bytes, version: str) -> str: ...


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid key, else raise ``ValueError`` saying why."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"invalid key {key!r}: {KEY_RULES}")
    if key.startswith("/") or "\\" in key or "\0" in key:
        raise ValueError(f"invalid key {key!r}: {KEY_RULES} (and no backslash or NUL)")
    if any(seg in ("", ".", "..") for seg in key.split("/")):
        raise ValueError(f"invalid key {key!r}: {KEY_RULES}")
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: empty, or a key that may end in '/' (a folder) or stop mid-name."""
    if prefix:
        check_key(prefix.removesuffix("/"))
    return prefix
