"""Where session logs, trajectories and bench results live: a local directory by default, or S3.

    store = open_store("s3://bench-results/team-a?endpoint=http://127.0.0.1:9000")
    put_json(store, "tau2/run-1.json", doc)
    get_json(store, "tau2/run-1.json")

Every store keeps the guarantees of ``base.Store``: atomic put, ``NotFound`` on a miss, sorted listing.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from .base import AlreadyExists, NotFound, PreconditionFailed, Store, StoreError, check_key
from .local import LocalStore

if TYPE_CHECKING:
    from .s3 import S3Store

__all__ = ["AlreadyExists", "LocalStore", "NotFound", "PreconditionFailed", "S3Store", "Store", "StoreError",
           "check_key", "get_json", "open_store", "put_json"]

SUPPORTED = ("a plain path, file:///abs/path, "
             "s3://bucket[/prefix][?endpoint=URL&region=NAME&max_attempts=N]")
_S3_OPTIONS = ("endpoint", "region", "max_attempts")


def __getattr__(name: str) -> Any:
    # boto3 takes a while to import; only S3 users pay for it.
    if name == "S3Store":
        from .s3 import S3Store

        return S3Store
    raise AttributeError(name)


def open_store(uri: str | os.PathLike[str]) -> Store:
    """A store from a URI; see ``SUPPORTED``. Raises ``ValueError`` for anything else. Does no I/O."""
    text = os.fspath(uri)
    if not text:
        raise ValueError(f"empty store URI; use {SUPPORTED}")
    parts = urlsplit(text)
    if not parts.scheme:
        return LocalStore(text)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ValueError(f"store URI {text!r}: a file URI needs an absolute path, file:///abs/path")
        return LocalStore(unquote(parts.path))
    if parts.scheme == "s3":
        return _s3_store(text, parts)
    raise ValueError(f"unsupported store URI {text!r}: use {SUPPORTED}")


def _s3_store(text: str, parts) -> Store:
    from .s3 import S3Store

    if not parts.netloc:
        raise ValueError(f"store URI {text!r}: no bucket; use s3://bucket/prefix")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(_S3_OPTIONS))
    if unknown:
        raise ValueError(f"store URI {text!r}: unknown option(s) {', '.join(unknown)}; known: {', '.join(_S3_OPTIONS)}")
    opt = {k: v[-1] for k, v in query.items()}
    endpoint = opt.get("endpoint") or None
    if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
        raise ValueError(f"store URI {text!r}: endpoint must be an http(s) URL, got {endpoint!r}")
    try:
        attempts = int(opt.get("max_attempts", 5))
    except ValueError:
        raise ValueError(f"store URI {text!r}: max_attempts must be an integer") from None
    return S3Store(parts.netloc, prefix=unquote(parts.path), endpoint_url=endpoint,
                   region=opt.get("region") or "us-east-1", max_attempts=attempts)


def put_json(store: Store, key: str, obj: Any) -> None:
    """Store ``obj`` as indented UTF-8 JSON (NaN allowed, as ``bench`` writes it; other types via str)."""
    store.put(key, json.dumps(obj, indent=1, default=str).encode())


def get_json(store: Store, key: str) -> Any:
    """The JSON value under ``key``; ``NotFound`` on a miss, ``ValueError`` naming the key if it is not JSON."""
    data = store.get(key)
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{key!r} in {store} is not valid JSON: {exc}") from None
