"""Checkpoints in a local (or network-mounted) folder, one folder per trial.

Every object is written atomically: to a temporary file in the same folder, flushed and
fsynced, then ``os.replace``-d over its name, then the folder itself is fsynced so the rename
survives a power loss. A checkpoint file gets the mode a plain ``open()`` would give it
(``0o666`` less the umask), so a folder shared between users (NFS) stays readable by the other
side. The layout and the manifest logic are in :mod:`spotwise.checkpoint.base`.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from spotwise.checkpoint.base import DEFAULT_KEEP, ManifestCheckpointStore, UnusableCheckpointError
from spotwise.errors import CheckpointError
from spotwise.providers.file_blobs import create_temp

_TMP_PREFIX = ".tmp-"
_STALE_TMP_S = 600.0  # temp files older than this were left by a crash


class LocalCheckpointStore(ManifestCheckpointStore):
    """One trial's checkpoints in the folder ``root`` (created on the first write)."""

    def __init__(self, root: Path | str, keep: int = DEFAULT_KEEP) -> None:
        super().__init__(keep)
        self.root = Path(root).expanduser().absolute()
        if self.root.exists() and not self.root.is_dir():
            raise CheckpointError(f"checkpoint location {self.root} exists and is not a folder")

    def __repr__(self) -> str:
        return f"LocalCheckpointStore({str(self.root)!r}, keep={self.keep})"

    @property
    def uri(self) -> str:
        return str(self.root)

    def _location(self, key: str) -> str:
        return str(self.root / key)

    def _write(self, key: str, data: bytes) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = create_temp(self.root, f"{_TMP_PREFIX}{key}.")
        except OSError as e:
            raise CheckpointError(f"cannot write checkpoint {self.root / key}: {e}") from e
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.root / key)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise CheckpointError(f"cannot write checkpoint {self.root / key}: {e}") from e
        self._fsync_dir()

    def _fsync_dir(self) -> None:
        try:
            dfd = os.open(self.root, os.O_RDONLY)
        except OSError:  # some platforms / filesystems cannot open a folder; rename still atomic
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def _move(self, src: str, dst: str) -> None:
        try:
            os.rename(self.root / src, self.root / dst)
        except (FileNotFoundError, ValueError):  # ValueError: a NUL in a name names no file
            return
        except OSError as e:
            raise CheckpointError(f"cannot rename checkpoint {self.root / src}: {e}") from e
        self._fsync_dir()

    def _read(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:  # the file's fault, not the store's: unusable, never retried
            raise UnusableCheckpointError(
                f"checkpoint {self.root / key} is a folder, not a file"
            ) from None
        except ValueError:  # a name the OS refuses (a NUL byte): a manifest's fault (AT2)
            raise UnusableCheckpointError(
                f"checkpoint name {key!r} in {self.root} is not a file name"
            ) from None
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint {self.root / key}: {e}") from e

    def _keys(self) -> list[str]:
        try:
            return [p.name for p in self.root.iterdir() if not p.name.startswith(".")]
        except FileNotFoundError:
            return []
        except OSError as e:
            raise CheckpointError(f"cannot list checkpoints in {self.root}: {e}") from e

    def _remove(self, key: str) -> None:
        try:
            (self.root / key).unlink(missing_ok=True)
        except ValueError:  # a name the OS refuses (a NUL byte): no such file can exist
            return
        except OSError as e:
            raise CheckpointError(f"cannot delete checkpoint {self.root / key}: {e}") from e

    def _retain(self, keep: int, replaced: str | None) -> None:
        super()._retain(keep, replaced)
        self._remove_stale_temp_files()

    def _remove_stale_temp_files(self) -> None:
        """Temp files a crashed writer left behind (recent ones may belong to a live writer)."""
        cutoff = time.time() - _STALE_TMP_S
        try:
            entries = list(self.root.glob(f"{_TMP_PREFIX}*"))
        except OSError:
            return
        for p in entries:
            with contextlib.suppress(OSError):
                if p.stat().st_mtime < cutoff:
                    p.unlink()
