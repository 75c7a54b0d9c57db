"""LocalStore and the store helpers: round trip, atomic put under a crash, key rules, URI parsing."""

import os

import pytest

from specagent_ray.storage import LocalStore, NotFound, StoreError, get_json, open_store, put_json
from specagent_ray.storage import local as local_module
from specagent_ray.storage.base import Store
from specagent_ray.storage.local import TMP_PREFIX


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "root")


def files_on_disk(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_round_trip_list_exists_delete(store):
    assert isinstance(store, Store)
    assert store.list() == [] and not store.exists("a.json")
    store.put("tau2/b.json", b'{"x": 1}')
    store.put("tau2/a.png", b"\x89PNG\x00\xff")
    store.put("top.txt", b"")
    store.put("tau2/b.json", b'{"x": 2}')  # overwrite
    assert store.get("tau2/b.json") == b'{"x": 2}'
    assert store.get("tau2/a.png") == b"\x89PNG\x00\xff"
    assert store.get("top.txt") == b""
    assert store.list() == ["tau2/a.png", "tau2/b.json", "top.txt"]
    assert store.list("tau2/") == ["tau2/a.png", "tau2/b.json"]
    assert store.list("tau2/b") == ["tau2/b.json"]
    assert store.list("t") == ["tau2/a.png", "tau2/b.json", "top.txt"]
    assert store.list("nothing/") == []
    assert store.exists("tau2/a.png") and not store.exists("tau2")
    store.delete("tau2/a.png")
    store.delete("tau2/a.png")  # idempotent
    assert store.list() == ["tau2/b.json", "top.txt"]


def test_get_missing_raises_notfound_with_the_key(store):
    store.put("tau2/x.json", b"1")
    for key in ("missing.json", "tau2", "tau2/x.json/deeper"):
        with pytest.raises(NotFound) as info:
            store.get(key)
        assert info.value.key == key and key in str(info.value)
        assert isinstance(info.value, KeyError) and isinstance(info.value, StoreError)


def test_crash_in_rename_leaves_no_object_and_no_temp_file(store, monkeypatch):
    def crash(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(local_module.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        store.put("tau2/run.json", b"x" * 100_000)
    monkeypatch.undo()
    assert not store.exists("tau2/run.json")
    with pytest.raises(NotFound):
        store.get("tau2/run.json")
    assert store.list() == []
    assert files_on_disk(store.root) == []  # the temp file was removed, not just hidden


def test_crash_keeps_the_previous_version_whole(store, monkeypatch):
    store.put("run.json", b"old complete version")
    monkeypatch.setattr(local_module.os, "replace", lambda src, dst: (_ for _ in ()).throw(OSError("crash")))
    with pytest.raises(OSError):
        store.put("run.json", b"new version that never lands")
    monkeypatch.undo()
    assert store.get("run.json") == b"old complete version"
    assert store.list() == ["run.json"]


def test_temp_file_left_by_a_hard_crash_is_never_a_key(store, monkeypatch):
    # kill -9 between write and rename: the cleanup never runs, so the temp file stays on disk
    monkeypatch.setattr(local_module.os, "replace", lambda src, dst: (_ for _ in ()).throw(OSError("killed")))
    monkeypatch.setattr(local_module.os, "unlink", lambda path: None)
    with pytest.raises(OSError):
        store.put("tau2/run.json", b"partial?")
    monkeypatch.undo()
    left = files_on_disk(store.root)
    assert len(left) == 1 and os.path.basename(left[0]).startswith(TMP_PREFIX)
    assert store.list() == [] and store.list("tau2/") == []
    assert not store.exists("tau2/run.json")
    with pytest.raises(ValueError, match="reserved"):
        store.get(left[0])


@pytest.mark.parametrize("key", ["", "/abs/path", "a/../b", "..", "a/./b", "a//b", "a/", "a\\b", f"{TMP_PREFIX}x"])
def test_bad_keys_are_refused_before_any_io(store, key):
    with pytest.raises(ValueError, match="invalid key"):
        store.put(key, b"x")
    with pytest.raises(ValueError, match="invalid key"):
        store.get(key)
    assert files_on_disk(store.root.parent) == []


@pytest.mark.parametrize("prefix", ["/abs", "../up", "a/../../b"])
def test_bad_list_prefixes_are_refused(store, prefix):
    with pytest.raises(ValueError, match="invalid key"):
        store.list(prefix)


def test_json_helpers(store):
    put_json(store, "r/doc.json", {"pass_at_1": 86.0, "nan": float("nan"), "list": [1, 2]})
    doc = get_json(store, "r/doc.json")
    assert doc["pass_at_1"] == 86.0 and doc["list"] == [1, 2] and doc["nan"] != doc["nan"]
    store.put("r/bad.json", b"{not json")
    with pytest.raises(ValueError, match="'r/bad.json'.*not valid JSON"):
        get_json(store, "r/bad.json")
    with pytest.raises(NotFound):
        get_json(store, "r/none.json")


def test_open_store_local_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert open_store(str(tmp_path / "a")).root == tmp_path / "a"
    assert open_store(tmp_path / "a").root == tmp_path / "a"
    assert open_store("results").root == tmp_path / "results"
    assert open_store((tmp_path / "with space").as_uri()).root == tmp_path / "with space"
    assert open_store(f"file://localhost{tmp_path}").root == tmp_path


def test_open_store_s3_forms():
    s = open_store("s3://bench-results/team-a/runs/?endpoint=http://127.0.0.1:9000&region=eu-west-1&max_attempts=2")
    assert (s.bucket, s.prefix, s.endpoint_url, s.region) == ("bench-results", "team-a/runs/", "http://127.0.0.1:9000",
                                                              "eu-west-1")
    assert s.client.meta.region_name == "eu-west-1"
    plain = open_store("s3://bench-results")
    assert (plain.prefix, plain.endpoint_url, plain.region) == ("", None, "us-east-1")


def test_stores_share_parsed_service_models(monkeypatch):
    """S3's model is parsed once per process; a data path of its own gets a loader of its own."""
    a, b = open_store("s3://one"), open_store("s3://two?region=eu-west-1")
    assert a.client._loader is b.client._loader  # botocore has no public handle on a client's loader
    monkeypatch.setenv("AWS_DATA_PATH", "/nonexistent/models")
    assert open_store("s3://three").client._loader is not a.client._loader


@pytest.mark.parametrize("uri, message", [
    ("", "empty store URI"),
    ("ftp://host/x", "unsupported store URI.*file:///abs/path.*s3://bucket"),
    ("file://relative/path", "absolute path"),
    ("s3:///prefix-only", "no bucket"),
    ("s3://bucket?endpoint=http://h:1&colour=blue", "unknown option.*colour.*known: endpoint, region, max_attempts"),
    ("s3://bucket?endpoint=127.0.0.1:9000", "endpoint must be an http"),
    ("s3://bucket?max_attempts=many", "max_attempts must be an integer"),
    ("s3://bucket?max_attempts=0", "max_attempts must be >= 1"),
    ("s3://bucket/a/../b", "invalid key"),
])
def test_open_store_rejects_bad_uris_clearly(uri, message):
    with pytest.raises(ValueError, match=message):
        open_store(uri)
