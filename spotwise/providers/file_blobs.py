"""A :class:`~spotwise.providers.blobs.Blobs` folder on a file system: ``file:///abs/path``.

For a folder every machine of a job mounts at the same path (NFS, EFS, Filestore, Azure Files),
so it can carry a trial's checkpoints and its channel (events, status, stop, control) without an
object store; tests use it the same way on one machine.

* ``put`` is atomic: the bytes go to a temporary file in the same folder (``.tmp-<name>.*``),
  are flushed and fsynced, then ``os.replace``-d over the name, so a reader sees the old file
  or the new one, never a part. The file gets the mode a plain ``open()`` would give it
  (``0o666`` less the umask, and the folder's default ACL), not ``mkstemp``'s ``0o600``: a
  folder shared between users or machines (NFS) stays readable by the other side.
* The version token of ``get`` is ``<mtime_ns>-<size>-<inode>`` of the file that was read
  (``fstat`` of the open file, so token and bytes belong together). Every ``put`` replaces the
  file with a new inode, so the token changes on every write.
* ``names`` lists plain files directly in the folder and skips dot files (temporaries).

OS errors become a one-line :class:`~spotwise.errors.ProviderError`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from urllib.parse import unquote, urlsplit

from spotwise.errors import ProviderError
from spotwise.providers.blobs import check_name

_TMP_PREFIX = ".tmp-"
_TMP_TRIES = 100


def create_temp(folder: Path, prefix: str) -> tuple[int, str]:
    """A new, empty file ``<folder>/<prefix><random>`` opened for writing: ``(fd, path)``.

    Like :func:`tempfile.mkstemp` (created exclusively, never follows a link, not inherited by
    child processes) but with the mode a plain ``open()`` gives a new file — ``0o666`` less the
    process umask, which the kernel applies — instead of ``0o600``, so the file renamed over a
    checkpoint or channel name is as readable as any other file the user writes there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(_TMP_TRIES):
        path = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}")
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name {prefix}* in {folder}")


def path_of(uri: str) -> Path:
    """``file:///abs/path``, ``file://localhost/abs/path`` or ``/abs/path`` → the absolute
    path; anything else (a relative path, another host) → ProviderError."""
    if uri.startswith("file:"):
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ProviderError(
                f"{uri!r} is not a file URI of an absolute folder; expected file:///abs/path"
            )
        path = unquote(parts.path)
    else:
        path = uri
    if not path.startswith("/"):
        raise ProviderError(f"{uri!r} is not an absolute folder; expected file:///abs/path")
    return Path(os.path.normpath(path))


class FileBlobs:
    """The files directly in one folder (created on the first write)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        if not self.root.is_absolute():
            raise ProviderError(f"{str(root)!r} is not an absolute folder")

    @classmethod
    def from_uri(cls, uri: str) -> FileBlobs:
        return cls(path_of(uri))

    def __repr__(self) -> str:
        return f"FileBlobs({self.uri!r})"

    @property
    def uri(self) -> str:
        return self.root.as_uri()

    def location(self, name: str) -> str:
        return (self.root / check_name(name)).as_uri()

    def _fail(self, e: OSError, action: str) -> ProviderError:
        return ProviderError(f"{action} {self.root} failed: {e.strerror or e}")

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        target = self.root / check_name(name)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = create_temp(self.root, f"{_TMP_PREFIX}{name}.")
        except OSError as e:
            raise self._fail(e, f"writing {name} to") from None
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._fail(e, f"writing {name} to") from None

    def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
        try:
            with open(self.root / check_name(name), "rb") as fh:
                st = os.fstat(fh.fileno())
                now = f"{st.st_mtime_ns}-{st.st_size}-{st.st_ino}"
                if token and now == token:
                    return None, token
                return fh.read(), now
        except (FileNotFoundError, NotADirectoryError):
            return None, token
        except OSError as e:
            raise self._fail(e, f"reading {name} from") from None

    def exists(self, name: str) -> bool:
        return (self.root / check_name(name)).is_file()

    def names(self) -> list[str]:
        try:
            entries = list(os.scandir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise self._fail(e, "listing") from None
        return sorted(e.name for e in entries if not e.name.startswith(".") and e.is_file())

    def delete(self, name: str) -> None:
        try:
            (self.root / check_name(name)).unlink(missing_ok=True)
        except OSError as e:
            raise self._fail(e, f"deleting {name} from") from None
