"""Checkpoints in S3: one trial's checkpoints under ``s3://bucket/prefix/``.

A :class:`~spotwise.checkpoint.blobstore.BlobCheckpointStore` over an
:class:`~spotwise.providers.s3_blobs.S3Blobs` folder: a ``PutObject`` is atomic (readers see the
old object or the new one, never a part), which is all the manifest logic asks; only the objects
directly under the prefix are the store's (the trial channel's ``events-*.jsonl`` and
``agent-*.json`` may sit beside them). Everything S3 is :class:`S3Blobs`'s: its client comes
from :func:`spotwise.providers.aws.s3_client`, so boto3 is imported only inside
``spotwise/providers`` and only when the store first talks to S3, and its
:meth:`~spotwise.providers.s3_blobs.S3Blobs.put` sends an object above 256 MiB as a multipart
upload (one ``PutObject`` holds at most 5 GB), as atomic as one ``PutObject``.

Register the scheme with the checkpoint registry (done by :func:`register`)::

    register_scheme("s3", open_s3_store)
"""

from __future__ import annotations

from typing import Any

from spotwise.checkpoint.base import DEFAULT_KEEP, CheckpointStore
from spotwise.checkpoint.blobstore import BlobCheckpointStore
from spotwise.errors import CheckpointError, ProviderError
from spotwise.providers.s3_blobs import S3Blobs


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
        try:
            blobs = S3Blobs.from_uri(uri)
        except ProviderError as e:
            raise CheckpointError(f"checkpoint location: {e.message}") from None
        return cls(blobs.bucket, blobs.prefix, keep=keep)

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
