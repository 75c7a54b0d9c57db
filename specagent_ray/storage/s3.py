"""``S3Store``: keys are objects under ``s3://bucket/prefix/`` (AWS S3, MinIO, Ceph, moto)."""

from __future__ import annotations

import functools
import io

import boto3
import botocore.loaders
import botocore.session
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from .base import AlreadyExists, NotFound, PreconditionFailed, StoreError, check_key, check_prefix

MiB = 1024 * 1024


class S3Store:
    """Objects under ``s3://bucket/prefix/<key>``, through boto3.

    Guarantees: S3 makes an object visible only when a PutObject or CompleteMultipartUpload succeeds, so a
    reader sees the old object (or nothing) or the complete new one. Objects of ``multipart_threshold`` bytes
    or more go up as a managed multipart upload in ``multipart_chunksize`` parts. Every request is retried
    by botocore's "standard" mode up to ``max_attempts`` times (connection errors, throttling, 5xx). When a
    put still fails, the store aborts the key's incomplete multipart uploads (they are invisible but billed)
    and raises ``StoreError`` naming bucket and key; if even the abort fails, the message says so.
    Credentials and proxies come from boto3's usual chain (environment, config files, instance role).

    ``create`` is one PutObject with ``If-None-Match: *`` and ``swap`` one with ``If-Match: <ETag>``
    (S3 conditional writes; MinIO and moto's server implement them too); S3 answers 412 when the
    condition fails. A 409 (a concurrent conditional write on the key) is a ``StoreError``: the outcome is
    unknown, and the caller may retry.
    """

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None, region: str = "us-east-1",
                 max_attempts: int = 5, multipart_threshold: int = 8 * MiB, multipart_chunksize: int = 8 * MiB) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"invalid bucket name {bucket!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        prefix = prefix.strip("/")
        self.bucket, self.prefix = bucket, (check_key(prefix) + "/" if prefix else "")
        self.endpoint_url, self.region = endpoint_url, region
        self.multipart_threshold = multipart_threshold
        config = Config(region_name=region, retries={"mode": "standard", "max_attempts": max_attempts},
                        s3={"addressing_style": "path"} if endpoint_url else None)
        self.client = _session().client("s3", endpoint_url=endpoint_url, config=config)
        self._transfer = TransferConfig(multipart_threshold=multipart_threshold,
                                        multipart_chunksize=multipart_chunksize, preferred_transfer_client="classic")

    def __str__(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}"
        return f"{where} at {self.endpoint_url}" if self.endpoint_url else where

    def __repr__(self) -> str:
        return f"S3Store({self.bucket!r}, prefix={self.prefix!r}, endpoint_url={self.endpoint_url!r})"

    def put(self, key: str, data: bytes) -> None:
        name = self._name(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"put {key!r}: data must be bytes, not {type(data).__name__}")
        try:
            self.client.upload_fileobj(io.BytesIO(data), self.bucket, name, Config=self._transfer)
        except Exception as exc:  # boto3, botocore and s3transfer each raise their own types
            note = self._abort_uploads(name) if len(data) >= self.multipart_threshold else ""
            raise StoreError(f"cannot put {self._where(name)} ({len(data)} bytes): {_reason(exc)}{note}") from exc

    def create(self, key: str, data: bytes) -> str:
        name = self._name(key)
        try:
            return self.client.put_object(Bucket=self.bucket, Key=name, Body=bytes(data), IfNoneMatch="*")["ETag"]
        except ClientError as exc:
            if _code(exc) not in ("PreconditionFailed", "412"):
                raise StoreError(f"cannot create {self._where(name)}: {_reason(exc)}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"cannot create {self._where(name)}: {_reason(exc)}") from exc
        try:  # a retry may find its own earlier attempt there
            data_now, version = self.read(key)
        except NotFound:
            data_now, version = None, ""
        if data_now != bytes(data):
            raise AlreadyExists(f"{self._where(name)} already exists")
        return version

    def read(self, key: str) -> tuple[bytes, str]:
        return self._get_object(key, "read")

    def swap(self, key: str, data: bytes, version: str) -> str:
        name = self._name(key)
        try:
            return self.client.put_object(Bucket=self.bucket, Key=name, Body=bytes(data), IfMatch=version)["ETag"]
        except ClientError as exc:
            if _code(exc) in ("PreconditionFailed", "412", "NoSuchKey", "404"):
                raise PreconditionFailed(f"{self._where(name)} changed (or is gone) since {version}") from None
            raise StoreError(f"cannot swap {self._where(name)}: {_reason(exc)}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"cannot swap {self._where(name)}: {_reason(exc)}") from exc

    def get(self, key: str) -> bytes:
        return self._get_object(key, "get")[0]

    def _get_object(self, key: str, verb: str) -> tuple[bytes, str]:
        """The object's bytes and ETag; ``NotFound`` on a miss, ``StoreError`` ("cannot <verb> ...") else."""
        name = self._name(key)
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=name)
            return obj["Body"].read(), obj["ETag"]
        except ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                raise NotFound(key, str(self)) from None
            raise StoreError(f"cannot {verb} {self._where(name)}: {_reason(exc)}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"cannot {verb} {self._where(name)}: {_reason(exc)}") from exc

    def exists(self, key: str) -> bool:
        name = self._name(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=name)
            return True
        except ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                return False
            raise StoreError(f"cannot check {self._where(name)}: {_reason(exc)}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"cannot check {self._where(name)}: {_reason(exc)}") from exc

    def list(self, prefix: str = "") -> list[str]:
        full = self.prefix + check_prefix(prefix)
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
            names = [obj["Key"] for page in pages for obj in page.get("Contents", ())]
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"cannot list {self._where(full + '*')}: {_reason(exc)}") from exc
        return sorted(n[len(self.prefix):] for n in names)

    def delete(self, key: str) -> None:
        name = self._name(key)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=name)
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"cannot delete {self._where(name)}: {_reason(exc)}") from exc

    def _abort_uploads(self, name: str) -> str:
        """Abort every incomplete multipart upload of ``name``; return '' or a note on what is left.

        s3transfer aborts its own upload too, but that call fails when the endpoint is down, and a
        CreateMultipartUpload whose response was lost leaves an upload nobody knows the id of. Listing by
        key finds both. It would also abort another writer's concurrent upload of the same key; that
        writer then fails cleanly (no partial object), and same-key writers race in S3 anyway.
        """
        try:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=name)
            ids = [u["UploadId"] for page in pages for u in page.get("Uploads", ()) if u["Key"] == name]
            for upload_id in ids:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=name, UploadId=upload_id)
        except (BotoCoreError, ClientError) as exc:  # the put's own error is the one to raise
            return (f"; could not look for an incomplete multipart upload to abort either ({_reason(exc)}); "
                    "one left behind is not visible as an object, and a bucket lifecycle rule "
                    "AbortIncompleteMultipartUpload removes it")
        return ""

    def _name(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _where(self, name: str) -> str:
        at = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{name}{at}"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _session() -> boto3.session.Session:
    """A session of its own (boto3's default session is shared process state) whose service models come
    from one loader per process: parsing S3's model costs about 0.2 s of CPU, once instead of per store."""
    core = botocore.session.Session()
    core.register_component("data_loader", _loader(core.get_config_variable("data_path")))
    return boto3.session.Session(botocore_session=core)


@functools.cache
def _loader(data_path: str | None) -> botocore.loaders.Loader:
    return botocore.loaders.create_loader(data_path)


def _reason(exc: BaseException) -> str:
    """One line: S3's error code and message, or the transport error."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        text = f"{err.get('Code', '?')}: {err.get('Message', '') or exc}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())
