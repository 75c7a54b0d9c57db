"""``LocalStore``: keys are files under a root directory. The default store."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
from pathlib import Path

from .base import AlreadyExists, NotFound, PreconditionFailed, check_key, check_prefix

# Files being written carry this prefix until os.replace gives them their key's name. Keys may not use it,
# so a temp file left by a crash (kill -9, power loss) is never mistaken for an object.
TMP_PREFIX = ".specagent-tmp-"
FILE_MODE, FOLDER_MODE = 0o600, 0o700  # owner only: objects hold customer data


class LocalStore:
    """Objects are files ``root/<key>``.

    Guarantees: ``put`` writes a temp file in the key's own directory, flushes and fsyncs it, then renames
    it over the key with ``os.replace`` (atomic on POSIX and Windows) and fsyncs the directory. A reader
    therefore sees the old file or the complete new one; after ``put`` returns the object survives a power
    loss. Temp files are never listed and never readable as keys.

    ``create`` links the complete, fsynced temp file to the key's name (``link`` fails if the name exists,
    as ``O_EXCL`` does, but a reader never sees a partial file). ``swap`` holds an exclusive ``flock`` on a
    per-key lock file while it compares and replaces; versions are the SHA-256 of the content (as S3's
    ETag is a digest of it). Both hold between processes on one host or on a POSIX shared file system.

    Objects hold customer data: every file the store writes is 0600 and every folder it makes is 0700,
    whatever the umask (a root that already exists keeps its mode; it belongs to whoever mounted it).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()

    def __str__(self) -> str:
        return self.root.as_uri()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        self._install(path, data, os.replace)

    def create(self, key: str, data: bytes) -> str:
        path = self._path(key)
        try:
            self._install(path, data, os.link)
        except FileExistsError:
            if _read(path) != data:
                raise AlreadyExists(f"{key!r} already exists in {self}") from None
        return _version(data)

    def read(self, key: str) -> tuple[bytes, str]:
        data = self.get(key)
        return data, _version(data)

    def swap(self, key: str, data: bytes, version: str) -> str:
        path = self._path(key)
        _make_folders(path.parent)
        lock_path = path.parent / f"{TMP_PREFIX}lock-{path.name}"
        with os.fdopen(os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = _read(path)
            if current is None or _version(current) != version:
                raise PreconditionFailed(f"{key!r} in {self} changed (or is gone) since version {version[:12]}")
            self._install(path, data, os.replace)
        return _version(data)

    def _install(self, path: Path, data: bytes, place) -> None:
        """Write ``data`` to a temp file, fsync it, then ``place(tmp, path)``: replace or link."""
        _make_folders(path.parent)
        tmp = path.parent / f"{TMP_PREFIX}{path.name}.{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            place(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if place is os.link:
            os.unlink(tmp)
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


def _make_folders(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each with ``FOLDER_MODE`` (a umask can only take bits
    away, and never the owner's); folders that exist are left as they are."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, FOLDER_MODE)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
