"""S3Store against a real S3 HTTP server (moto, on 127.0.0.1): round trips, multipart, and server restarts.

Outages are injected through boto3's public event hooks, which stop and start the server process-side;
nothing in boto3 is patched.
"""

import random
import threading
import uuid

import pytest

from specagent_ray.storage import NotFound, StoreError, open_store
from specagent_ray.storage.s3 import MiB, S3Store
from specagent_ray.storage.testing import LocalS3, free_port, isolated_aws_env


@pytest.fixture(scope="module")
def aws_env(tmp_path_factory):
    with isolated_aws_env(tmp_path_factory.mktemp("aws")):
        yield


@pytest.fixture(scope="module")
def s3(aws_env):
    with LocalS3() as server:
        yield server


def new_bucket(server: LocalS3) -> str:
    name = f"bench-{uuid.uuid4().hex[:12]}"
    S3Store(name, endpoint_url=server.endpoint).client.create_bucket(Bucket=name)
    return name


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def open_uploads(store: S3Store, key: str) -> list[str]:
    name = store.prefix + key
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=name).get("Uploads", [])
    return [u["UploadId"] for u in uploads if u["Key"] == name]


def test_round_trip_small_and_multipart(s3):
    bucket = new_bucket(s3)
    store = open_store(f"s3://{bucket}/team-a?endpoint={s3.endpoint}")
    small, large = b'{"pass_at_1": 86.0}', payload(20 * MiB)
    store.put("tau2/small.json", small)
    store.put("tau2/large.bin", large)
    assert store.get("tau2/small.json") == small
    assert store.get("tau2/large.bin") == large
    head = store.client.head_object(Bucket=bucket, Key="team-a/tau2/large.bin")
    assert head["ETag"].strip('"').endswith("-3")  # 20 MiB in 8 MiB parts: a 3-part multipart upload
    assert "-" not in store.client.head_object(Bucket=bucket, Key="team-a/tau2/small.json")["ETag"]
    assert open_uploads(store, "tau2/large.bin") == []


def test_list_exists_delete_and_prefix_isolation(s3):
    bucket = new_bucket(s3)
    store, other = (open_store(f"s3://{bucket}/{p}?endpoint={s3.endpoint}") for p in ("team-a", "team-b"))
    for key in ("tau2/b.json", "tau2/a.png", "top.txt"):
        store.put(key, key.encode())
    other.put("tau2/not-mine.json", b"{}")
    assert store.list() == ["tau2/a.png", "tau2/b.json", "top.txt"]
    assert store.list("tau2/") == ["tau2/a.png", "tau2/b.json"]
    assert other.list() == ["tau2/not-mine.json"]
    assert store.exists("top.txt") and not store.exists("tau2/not-mine.json") and not store.exists("tau2")
    store.delete("top.txt")
    store.delete("top.txt")  # idempotent
    assert not store.exists("top.txt") and store.list("t") == ["tau2/a.png", "tau2/b.json"]
    with pytest.raises(NotFound) as info:
        store.get("top.txt")
    assert info.value.key == "top.txt" and bucket in str(info.value)


def test_missing_bucket_and_unreachable_endpoint_name_bucket_and_key(s3):
    store = open_store(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}?endpoint={s3.endpoint}")
    with pytest.raises(StoreError, match="NoSuchBucket"):
        store.list()
    dead = open_store(f"s3://bench-results/p?endpoint=http://127.0.0.1:{free_port()}&max_attempts=1")
    for call in (lambda: dead.get("k.json"), lambda: dead.put("k.json", b"1"), lambda: dead.exists("k.json")):
        with pytest.raises(StoreError, match=r"s3://bench-results/p/k\.json at http://127\.0\.0\.1:\d+\b.*"
                                             r"EndpointConnectionError"):
            call()


class Outage:
    """Stops the server as the first UploadPart is about to be sent; starts it again on ``restart_on``.

    Every UploadPart attempt between the two meets a closed port, so at least one attempt fails.
    """

    def __init__(self, store: S3Store, server: LocalS3, restart_on: str | None) -> None:
        self.server, self.failures = server, []
        self.stopped = self.restarted = False
        self._lock = threading.Lock()
        events = store.client.meta.events
        events.register("before-send.s3.UploadPart", self._stop)
        events.register("needs-retry.s3.UploadPart", self._record)
        if restart_on:
            events.register(restart_on, self._restart)

    def _stop(self, **_):
        with self._lock:
            if not self.stopped:
                self.server.stop()
                self.stopped = True

    def _record(self, caught_exception=None, **_):
        if caught_exception is not None:
            self.failures.append(type(caught_exception).__name__)

    def _restart(self, caught_exception=None, **kw):
        # on needs-retry: only once a failed attempt has been seen; on before-send: at once
        if "attempts" in kw and caught_exception is None:
            return
        with self._lock:
            if self.stopped and not self.restarted:
                self.server.start()
                self.restarted = True


@pytest.fixture
def restartable(aws_env):
    server = LocalS3()
    server.start()
    yield server
    server.stop()


def test_outage_shorter_than_the_retries_completes_the_upload(restartable):
    bucket, data = new_bucket(restartable), payload(20 * MiB, seed=1)
    store = S3Store(bucket, endpoint_url=restartable.endpoint, max_attempts=5)
    outage = Outage(store, restartable, restart_on="needs-retry.s3.UploadPart")
    store.put("tau2/run.json", data)
    assert outage.stopped and outage.restarted
    assert "EndpointConnectionError" in outage.failures  # it really went through retries
    assert store.get("tau2/run.json") == data
    assert store.client.head_object(Bucket=bucket, Key="tau2/run.json")["ETag"].strip('"').endswith("-3")
    assert open_uploads(store, "tau2/run.json") == []


def test_outage_longer_than_the_retries_fails_clearly_and_aborts_the_upload(restartable):
    bucket = new_bucket(restartable)
    store = S3Store(bucket, endpoint_url=restartable.endpoint, max_attempts=2)
    store.put("tau2/run.json", b"previous complete version")
    # the server is back by the time the store looks for the upload to abort
    outage = Outage(store, restartable, restart_on="before-send.s3.ListMultipartUploads")
    with pytest.raises(StoreError) as info:
        store.put("tau2/run.json", payload(20 * MiB, seed=2))
    message = str(info.value)
    assert f"s3://{bucket}/tau2/run.json" in message and "EndpointConnectionError" in message
    assert "could not" not in message and "\n" not in message
    assert outage.failures and outage.restarted
    assert store.get("tau2/run.json") == b"previous complete version"
    assert open_uploads(store, "tau2/run.json") == []  # aborted, nothing left to bill


def test_outage_outlasting_the_put_leaves_no_visible_object(restartable):
    bucket = new_bucket(restartable)
    store = S3Store(bucket, endpoint_url=restartable.endpoint, max_attempts=2)
    outage = Outage(store, restartable, restart_on=None)
    with pytest.raises(StoreError) as info:
        store.put("tau2/run.json", payload(20 * MiB, seed=3))
    message = str(info.value)
    assert f"s3://{bucket}/tau2/run.json" in message and "AbortIncompleteMultipartUpload" in message
    assert outage.failures and not outage.restarted
    restartable.start()  # the endpoint returns; what did readers get?
    with pytest.raises(NotFound):
        store.get("tau2/run.json")
    assert not store.exists("tau2/run.json") and store.list() == []
    left = open_uploads(store, "tau2/run.json")
    assert len(left) == 1  # the incomplete upload exists but was never an object
    store.client.abort_multipart_upload(Bucket=bucket, Key="tau2/run.json", UploadId=left[0])
