"""``LocalStore``: keys are files under a root directory. The default store."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from .base import NotFound, check_key, check_prefix

# Files being written carry this prefix until os.replace gives them their key's name. Keys may not use it,
# so a temp file left by a crash (kill -9, power loss) is never mistaken for an object.
TMP_PREFIX = ".specagent-tmp-"


class LocalStore:
    """Objects are files ``root/<key>``.

    Guarantees: ``put`` writes a temp file in the key's own directory, flushes and fsyncs it, then renames
    it over the key with ``os.replace`` (atomic on POSIX and Windows) and fsyncs the directory. A reader
    therefore sees the old file or the complete new one; after ``put`` returns the object survives a power
    loss. Temp files are never listed and never readable as keys.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()

    def __str__(self) -> str:
        return self.root.as_uri()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f"{TMP_PREFIX}{path.name}.{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies, as for plain files
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(path.parent)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFound(key, str(self)) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        start = self.root / prefix.rpartition("/")[0]  # walk only the folder the prefix points into
        keys = []
        for folder, _, names in os.walk(start):
            rel = Path(folder).relative_to(self.root).as_posix()
            for name in names:
                key = name if rel == "." else f"{rel}/{name}"
                if not name.startswith(TMP_PREFIX) and key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        path = self._path(key)
        if path.is_file():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _path(self, key: str) -> Path:
        check_key(key)
        if any(seg.startswith(TMP_PREFIX) for seg in key.split("/")):
            raise ValueError(f"invalid key {key!r}: names starting with {TMP_PREFIX!r} are reserved for temp files")
        return self.root / key


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
