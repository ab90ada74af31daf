"""Checkpoints in S3: one trial's checkpoints under ``s3://bucket/prefix/``.

A :class:`~spotwise.checkpoint.blobstore.BlobCheckpointStore` over an
:class:`~spotwise.providers.s3_blobs.S3Blobs` folder: a ``PutObject`` is atomic (readers see the
old object or the new one, never a part), which is all the manifest logic asks; only the objects
directly under the prefix are the store's (the trial channel's ``events-*.jsonl`` and
``agent-*.json`` may sit beside them). The S3 client comes from
:func:`spotwise.providers.aws.s3_client`, so boto3 is imported only inside
``spotwise/providers`` and only when the store first talks to S3.

One ``PutObject`` holds at most 5 GB, so an object larger than :data:`MULTIPART_THRESHOLD`
goes up as a multipart upload (parts of :data:`PART_SIZE`, a few at a time): S3 shows it only
once the upload is completed, replacing the old object at once, so the write is as atomic as a
single ``PutObject``; an upload that fails is aborted (its parts are not left to be billed).

Register the scheme with the checkpoint registry (done by :func:`register`)::

    register_scheme("s3", open_s3_store)
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from spotwise.checkpoint.base import DEFAULT_KEEP, CheckpointStore
from spotwise.checkpoint.blobstore import BlobCheckpointStore
from spotwise.errors import CheckpointError, ProviderError
from spotwise.providers.s3_blobs import S3Blobs

MIB = 1024 * 1024
MULTIPART_THRESHOLD = 256 * MIB  # larger objects go up in parts (one PutObject: 5 GB at most)
PART_SIZE = 64 * MIB  # S3: at least 5 MiB (but the last), at most 10,000 parts
MAX_PARTS = 10_000
UPLOAD_THREADS = 4  # parts in flight at once (each one a copy of PART_SIZE bytes)


class S3CheckpointStore(BlobCheckpointStore):
    """One trial's checkpoints under ``s3://bucket/prefix``."""

    blobs: S3Blobs

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        region: str | None = None,
        keep: int = DEFAULT_KEEP,
    ) -> None:
        super().__init__(S3Blobs(bucket, prefix, client=client, region=region), keep)

    @classmethod
    def from_uri(cls, uri: str, keep: int = DEFAULT_KEEP) -> S3CheckpointStore:
        from spotwise.providers.aws import parse_s3_uri

        try:
            bucket, prefix = parse_s3_uri(uri)
        except ProviderError as e:
            raise CheckpointError(f"checkpoint location: {e.message}") from None
        return cls(bucket, prefix, keep=keep)

    def _write(self, key: str, data: bytes) -> None:
        if len(data) <= MULTIPART_THRESHOLD:
            super()._write(key, data)
            return
        try:
            self._upload_in_parts(key, data)
        except ProviderError as e:
            raise self._fail(e, f"writing {key}") from None

    def _upload_in_parts(self, key: str, data: bytes) -> None:
        """One multipart upload of ``data`` to ``key``: visible only once completed, aborted
        when a part fails. A botocore error becomes the same :class:`ProviderError` as a
        failed ``PutObject`` (:meth:`S3Blobs.put`)."""
        blobs, action = self.blobs, f"writing {key} to"
        client, where = blobs.client, {"Bucket": blobs.bucket, "Key": blobs._key(key)}
        try:
            upload = client.create_multipart_upload(
                **where, ContentType="application/octet-stream"
            )["UploadId"]
        except Exception as e:
            raise blobs._error(e, action) from None
        size = max(PART_SIZE, -(-len(data) // MAX_PARTS))
        view = memoryview(data)

        def part(number: int, start: int) -> dict[str, Any]:
            body = bytes(view[start : start + size])
            resp = client.upload_part(**where, UploadId=upload, PartNumber=number, Body=body)
            return {"PartNumber": number, "ETag": resp["ETag"]}

        pool = ThreadPoolExecutor(max_workers=UPLOAD_THREADS, thread_name_prefix="s3-part")
        try:
            futures: list[Future[dict[str, Any]]] = [
                pool.submit(part, n, start)
                for n, start in enumerate(range(0, len(data), size), start=1)
            ]
            parts = [f.result() for f in futures]  # the first failure raises here
            client.complete_multipart_upload(
                **where, UploadId=upload, MultipartUpload={"Parts": parts}
            )
        except BaseException as e:
            pool.shutdown(wait=True, cancel_futures=True)
            with contextlib.suppress(Exception):  # else S3 keeps (and bills) the parts
                client.abort_multipart_upload(**where, UploadId=upload)
            if isinstance(e, Exception):
                raise blobs._error(e, action) from None
            raise
        finally:
            pool.shutdown(wait=True)

    @property
    def bucket(self) -> str:
        return self.blobs.bucket

    @property
    def prefix(self) -> str:
        return self.blobs.prefix


def open_s3_store(uri: str) -> CheckpointStore:
    """The factory the checkpoint registry calls for ``s3://`` locations."""
    return S3CheckpointStore.from_uri(uri)


def register() -> None:
    """Register ``s3://`` with :mod:`spotwise.checkpoint.registry` (idempotent)."""
    from spotwise.checkpoint.registry import register_scheme

    register_scheme("s3", open_s3_store)
