"""Checkpoints in Azure Blob Storage: one trial's checkpoints under ``az://account/container/prefix``.

A Put Blob (or a block list committed at once) replaces a blob atomically, which is all
:class:`~spotwise.checkpoint.base.ManifestCheckpointStore` asks of a backend; the rest lives in
:class:`~spotwise.checkpoint.blobstore.BlobCheckpointStore`. The blobs come from
:class:`spotwise.providers.azure_blobs.AzureBlobs`, so azure-storage-blob is imported only inside
``spotwise/providers`` and only when the store is first used.

Register the scheme with the checkpoint registry (done by :func:`register`)::

    register_scheme("az", open_azure_blob_store)
"""

from __future__ import annotations

from typing import Any

from spotwise.checkpoint.base import DEFAULT_KEEP, CheckpointStore
from spotwise.checkpoint.blobstore import BlobCheckpointStore
from spotwise.errors import CheckpointError, ProviderError
from spotwise.providers.azure_blobs import AzureBlobs, parse_az_uri


class AzureBlobCheckpointStore(BlobCheckpointStore):
    """One trial's checkpoints under ``az://<account>/<container>/<prefix>``."""

    blobs: AzureBlobs

    def __init__(
        self,
        account: str,
        container: str,
        prefix: str = "",
        *,
        client: Any = None,
        credential: Any = None,
        keep: int = DEFAULT_KEEP,
    ) -> None:
        blobs = AzureBlobs(account, container, prefix, client=client, credential=credential)
        super().__init__(blobs, keep)

    @classmethod
    def from_uri(cls, uri: str, keep: int = DEFAULT_KEEP) -> AzureBlobCheckpointStore:
        try:
            account, container, prefix = parse_az_uri(uri)
        except ProviderError as e:
            raise CheckpointError(f"checkpoint location: {e.message}", hint=e.hint) from None
        return cls(account, container, prefix, keep=keep)


def open_azure_blob_store(uri: str) -> CheckpointStore:
    """The factory the checkpoint registry calls for ``az://`` locations."""
    return AzureBlobCheckpointStore.from_uri(uri)


def register() -> None:
    """Register ``az://`` with :mod:`spotwise.checkpoint.registry` (idempotent)."""
    from spotwise.checkpoint.registry import register_scheme

    register_scheme("az", open_azure_blob_store)
