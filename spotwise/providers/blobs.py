"""Object storage as the few operations spotwise needs, the same for S3, GCS and Azure Blob.

A :class:`Blobs` is one *folder* in a bucket (or container): ``<root>/<name>`` objects, where a
name is a plain file name (no ``/``). The checkpoint stores
(:class:`~spotwise.checkpoint.blobstore.BlobCheckpointStore`) are built on it, and so can the
trial channel (a trial's progress, status, stop and control files), which needs the
conditional read: :meth:`Blobs.get` with the version token of the last read returns
``(None, token)`` while the object is unchanged, without transferring it.

Every implementation lives in ``spotwise/providers`` (the only place that imports cloud SDKs)
and imports its SDK inside functions. Failures are raised as
:class:`~spotwise.errors.ProviderError` (or :class:`~spotwise.errors.ProviderUnavailable` for a
missing SDK or credentials) with a one-line message that never contains credentials, and a
``hint`` where there is an obvious fix (create the bucket, grant a role).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Blobs(Protocol):
    """The objects directly under one bucket prefix."""

    @property
    def uri(self) -> str:
        """The folder's URI, e.g. ``gs://bucket/prefix`` (no trailing ``/``)."""
        ...

    def location(self, name: str) -> str:
        """The URI of one object: ``<uri>/<name>``."""
        ...

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Write one object atomically: readers see the old bytes or the new, never a part."""
        ...

    def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
        """``(bytes, version token)``; ``(None, token)`` when the object does not exist or,
        given the token of an earlier read, has not changed since."""
        ...

    def exists(self, name: str) -> bool:
        """Whether the object exists."""
        ...

    def names(self) -> list[str]:
        """The names of the objects directly under the folder (not in sub-folders), sorted."""
        ...

    def delete(self, name: str) -> None:
        """Delete one object; a missing one is not an error."""
        ...


def join_key(prefix: str, name: str) -> str:
    """``prefix/name``, or ``name`` for an empty prefix."""
    return f"{prefix}/{name}" if prefix else name


def check_name(name: str) -> str:
    """A plain object name: not empty, no ``/``, ``\\``, ``.`` or ``..``."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"object name must be a plain file name, got {name!r}")
    return name
