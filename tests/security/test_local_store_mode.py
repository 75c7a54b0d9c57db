"""LocalStore keeps customer data (trajectories, tool results) private to the serving user: every file it
writes is 0600 and every folder it makes is 0700, whatever the process umask is."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from specagent_ray.storage import LocalStore

pytestmark = pytest.mark.security


@pytest.fixture
def open_umask():
    """The most permissive umask: whatever mode the store asks for is what the file gets."""
    old = os.umask(0)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_and_folders_are_private_to_the_owner(tmp_path, open_umask):
    root = tmp_path / "log" / "root"
    store = LocalStore(root)
    store.put("sessions/a/created", b"customer data")
    version = store.create("sessions/a/intent-1", b"staged write")
    store.swap("sessions/a/intent-1", b"executed", version)
    store.create("snapshot", b"state")

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    folders = [p for p in tmp_path.rglob("*") if p.is_dir()]
    assert len(files) >= 4 and {root, root / "sessions", root / "sessions" / "a"} <= set(folders)
    assert {str(p.relative_to(tmp_path)): oct(mode(p)) for p in files if mode(p) != 0o600} == {}
    assert {str(p.relative_to(tmp_path)): oct(mode(p)) for p in folders if mode(p) != 0o700} == {}


def test_an_existing_root_keeps_the_operators_mode(tmp_path, open_umask):
    """A mounted volume's root belongs to the operator; only what the store makes below it is 0700."""
    tmp_path.chmod(0o750)
    LocalStore(tmp_path).put("a/b", b"x")
    assert mode(tmp_path) == 0o750
    assert mode(tmp_path / "a") == 0o700 and mode(tmp_path / "a" / "b") == 0o600
