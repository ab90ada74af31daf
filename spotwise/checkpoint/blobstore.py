"""A checkpoint store over any :class:`~spotwise.providers.blobs.Blobs` folder.

Object stores replace an object atomically (a reader sees the old object or the new one, never
a part), which is all :class:`~spotwise.checkpoint.base.ManifestCheckpointStore` asks of a
backend; the data → manifest → ``LATEST`` order and the checksum verification live there. Only
the objects directly under the prefix are the store's: the trial channel's files
(``events-*.jsonl``, ``agent-*.json``, ...) may sit beside them and are ignored.

Provider errors become :class:`~spotwise.errors.CheckpointError` with the provider's one-line
message (which names the object, the action and the reason) and its hint.
"""

from __future__ import annotations

from spotwise.checkpoint.base import DEFAULT_KEEP, ManifestCheckpointStore
from spotwise.errors import CheckpointError, ProviderError
from spotwise.providers.blobs import Blobs


class BlobCheckpointStore(ManifestCheckpointStore):
    """One trial's checkpoints in an object-store folder."""

    def __init__(self, blobs: Blobs, keep: int = DEFAULT_KEEP) -> None:
        super().__init__(keep)
        self.blobs = blobs

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r}, keep={self.keep})"

    @property
    def uri(self) -> str:
        return self.blobs.uri

    def _location(self, key: str) -> str:
        return self.blobs.location(key)

    def _fail(self, e: ProviderError, action: str) -> CheckpointError:
        # the provider's message already names the location and the action
        return CheckpointError(f"checkpoint store: {e.message}", hint=e.hint)

    def _write(self, key: str, data: bytes) -> None:
        try:
            self.blobs.put(key, data)
        except ProviderError as e:
            raise self._fail(e, f"writing {key}") from None

    def _read(self, key: str) -> bytes | None:
        try:
            return self.blobs.get(key)[0]
        except ProviderError as e:
            raise self._fail(e, f"reading {key}") from None

    def _keys(self) -> list[str]:
        try:
            return self.blobs.names()
        except ProviderError as e:
            raise self._fail(e, "listing") from None

    def _remove(self, key: str) -> None:
        try:
            self.blobs.delete(key)
        except ProviderError as e:
            raise self._fail(e, f"deleting {key}") from None
