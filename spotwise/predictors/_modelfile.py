"""Writing and reading a revocation model file safely: an atomic save, numbers checked on load.

Kept apart from :mod:`spotwise.predictors.revocation` so that module stays readable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def atomic_save(doc: dict[str, Any], path: Path) -> None:
    """``torch.save`` into a temporary file in ``path``'s folder, fsync it, then ``os.replace`` it
    over ``path``: a failed write (disk full, a file size limit) leaves any earlier file whole and
    no partial file behind. Like ``--out``, it never creates folders: a missing one is an
    ``OSError``."""
    import os
    import stat
    import tempfile

    import torch

    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot save {path.name}: folder {folder} does not exist")
    if path.is_file():  # the new file keeps the old one's permissions
        mode = stat.S_IMODE(path.stat().st_mode)
    else:  # those a plain open() would give (mkstemp makes it owner-only)
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            torch.save(doc, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def floats(values: Any) -> list[float]:
    """``values`` as floats; TypeError (a malformed model) for anything that is not a number."""
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise TypeError("not a list of numbers") from None
