"""Writing and reading a revocation model file safely: an atomic save, the archive read with
``weights_only=True`` (a foreign file refused in a few words), numbers checked on load.

Kept apart from :mod:`spotwise.predictors.revocation` so that module stays readable.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from spotwise.errors import PredictorError


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


def finite(values: Any, field: str, lo: float = -math.inf, hi: float = math.inf) -> list[float]:
    """``values`` as finite floats in [lo, hi]: ValueError naming ``field`` and the first bad
    one (a damaged or hand-edited model would otherwise answer 0.5 or 1.0 for every zone)."""
    out = floats(values)
    for i, v in enumerate(out):
        if not (math.isfinite(v) and lo <= v <= hi):
            where = f"{field}[{i}]" if len(out) > 1 else field
            want = f"in [{lo:g}, {hi:g}]" if math.isfinite(lo + hi) else "a finite number"
            raise ValueError(f"{where} is {v:g}, not {want}; retrain it")
    return out


def count(value: Any, field: str, most: int) -> int:
    """``value`` as a whole number in [1, ``most``] (a length, a width, a number of members):
    ``most`` keeps a damaged or hand-edited file from sizing a net too big to allocate."""
    try:
        n = int(value)
        whole = n == float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{field} is {value!r}, not a whole number; retrain it") from None
    if not whole or n < 1:
        raise ValueError(f"{field} is {value!r}, not a whole number ≥ 1; retrain it")
    if n > most:
        raise ValueError(f"{field} is {n}, more than the {most} this spotwise loads; retrain it")
    return n


class NotAModelFile(PredictorError):
    """A file that ``load`` refuses; ``reason`` says why in a few words (no torch advice)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(
            f"{path} is not a spotwise revocation model file ({reason})",
            hint="train one: spotwise predictor train --traces builtin:skynomad-v100-2023 "
            "--out model.pt",
        )
        self.path, self.reason = path, reason


def read_model_doc(p: Path, fmt: str) -> dict[str, Any]:
    """The document saved in ``p`` with header ``fmt``: PredictorError when there is no such
    file, :class:`NotAModelFile` when it is not a plain-tensor PyTorch archive with that header.
    The document's contents are the caller's to check."""
    import pickle
    import zipfile

    import torch

    if not p.is_file():
        raise PredictorError(
            f"model file {p} does not exist", hint="spotwise predictor train --out FILE"
        )
    # torch's own messages for a foreign file run to many lines and advise weights_only=False,
    # which would unpickle arbitrary code: say what is wrong in a few words instead
    if not zipfile.is_zipfile(p):
        raise NotAModelFile(p, "not a PyTorch archive: truncated, or a file of another format")
    try:
        doc = torch.load(str(p), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise NotAModelFile(p, "it holds pickled Python objects, not plain tensors") from None
    except Exception:  # torch raises many types for a damaged archive
        raise NotAModelFile(p, "a damaged or foreign PyTorch archive") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise NotAModelFile(p, f"no {fmt!r} header")
    return doc
