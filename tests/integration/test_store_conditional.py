"""Conditional writes (``create``, ``read``/``swap``) on both stores: the local folder and a real S3 HTTP
server (moto's, on 127.0.0.1). The session log's never-overwrite rule and the coordinator's lease are
built on exactly these guarantees, so each one is played against a second writer here."""

import threading
import uuid

import pytest

from specagent_ray.storage import AlreadyExists, LocalStore, PreconditionFailed, StoreError
from specagent_ray.storage.s3 import S3Store
from specagent_ray.storage.testing import LocalS3, isolated_aws_env


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with isolated_aws_env(tmp_path_factory.mktemp("aws")), LocalS3() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "root")
    server = request.getfixturevalue("s3")
    bucket = f"cond-{uuid.uuid4().hex[:12]}"
    s3_store = S3Store(bucket, prefix="log", endpoint_url=server.endpoint, max_attempts=2)
    s3_store.client.create_bucket(Bucket=bucket)
    return s3_store


def test_create_never_overwrites_another_writers_bytes(store):
    store.create("log/1/000000000001.jsonl", b"first\n")
    with pytest.raises(AlreadyExists):
        store.create("log/1/000000000001.jsonl", b"second\n")
    assert store.get("log/1/000000000001.jsonl") == b"first\n"
    store.create("log/1/000000000001.jsonl", b"first\n")  # a retry that finds its own bytes succeeds
    assert isinstance(AlreadyExists("x"), PreconditionFailed) and isinstance(AlreadyExists("x"), StoreError)


def test_of_many_concurrent_creators_exactly_one_wins(store):
    won, lost = [], []

    def creator(i: int) -> None:
        try:
            store.create("lease/claim", f"writer {i}".encode())
            won.append(i)
        except AlreadyExists:
            lost.append(i)

    threads = [threading.Thread(target=creator, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7
    assert store.get("lease/claim") == f"writer {won[0]}".encode()


def test_swap_is_compare_and_swap(store):
    store.create("lease.json", b'{"epoch": 1}')
    data, version = store.read("lease.json")
    assert data == b'{"epoch": 1}'
    newer = store.swap("lease.json", b'{"epoch": 2}', version)
    assert store.read("lease.json") == (b'{"epoch": 2}', newer)
    with pytest.raises(PreconditionFailed):  # a second writer still holding the old version loses
        store.swap("lease.json", b'{"epoch": 99}', version)
    assert store.get("lease.json") == b'{"epoch": 2}'
    with pytest.raises(PreconditionFailed):  # a key that is not there cannot be swapped
        store.swap("missing.json", b"x", version)
    assert not store.exists("missing.json")


def test_of_concurrent_swaps_from_one_version_exactly_one_wins(store):
    store.create("lease.json", b"0")
    _, version = store.read("lease.json")
    won = []

    def swapper(i: int) -> None:
        try:
            store.swap("lease.json", str(i).encode(), version)
            won.append(i)
        except PreconditionFailed:
            pass
        except StoreError as exc:  # S3 may answer 409 to racing conditional writes: outcome unknown
            assert "409" in str(exc) or "Conflict" in str(exc)

    threads = [threading.Thread(target=swapper, args=(i,)) for i in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1  # (a 409 may turn a winner into "unknown", but never makes two winners)
    assert store.get("lease.json") == str(won[0]).encode()
