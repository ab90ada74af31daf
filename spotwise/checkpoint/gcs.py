"""Checkpoints in Google Cloud Storage: one trial's checkpoints under ``gs://bucket/prefix/``.

A :class:`~spotwise.checkpoint.blobstore.BlobCheckpointStore` over a
:class:`~spotwise.providers.gcs_blobs.GcsBlobs` folder: an upload is atomic, which is all the
manifest logic asks; only the objects directly under the prefix are the store's.
``google-cloud-storage`` loads only when a store first talks to GCS.

Register the scheme with the checkpoint registry (done by :func:`register`)::

    register_scheme("gs", open_gcs_store)
"""

from __future__ import annotations

from typing import Any

from spotwise.checkpoint.base import DEFAULT_KEEP, CheckpointStore
from spotwise.checkpoint.blobstore import BlobCheckpointStore
from spotwise.errors import CheckpointError, ProviderError
from spotwise.providers.gcs_blobs import GcsBlobs, parse_gs_uri


class GcsCheckpointStore(BlobCheckpointStore):
    """One trial's checkpoints under ``gs://bucket/prefix``."""

    blobs: GcsBlobs

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        project: str | None = None,
        retry_s: float | None = None,
        keep: int = DEFAULT_KEEP,
    ) -> None:
        blobs = GcsBlobs(bucket, prefix, client=client, project=project, retry_s=retry_s)
        super().__init__(blobs, keep)

    @classmethod
    def from_uri(cls, uri: str, keep: int = DEFAULT_KEEP) -> GcsCheckpointStore:
        try:
            bucket, prefix = parse_gs_uri(uri)
        except ProviderError as e:
            raise CheckpointError(f"checkpoint location: {e.message}", hint=e.hint) from None
        return cls(bucket, prefix, keep=keep)

    @property
    def bucket(self) -> str:
        return self.blobs.bucket

    @property
    def prefix(self) -> str:
        return self.blobs.prefix


def open_gcs_store(uri: str) -> CheckpointStore:
    """The factory the checkpoint registry calls for ``gs://`` locations."""
    return GcsCheckpointStore.from_uri(uri)


def register() -> None:
    """Register ``gs://`` with :mod:`spotwise.checkpoint.registry` (idempotent)."""
    from spotwise.checkpoint.registry import register_scheme

    register_scheme("gs", open_gcs_store)
