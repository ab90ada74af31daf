"""A cache of read SkyNomad grids, so that a large trace is parsed once, not by every command.

Reading the shipped 181,000-row trace strictly (:mod:`spotwise.trace_csv`) takes ~2 s of
Python (``bench/trace_cache.py``: 2.0 s, 7 ms from the cache); every ``spotwise`` command on
the local market used to pay it (``prices --provider local`` took 3.6 s, 1.5 s now). The
grid of a file that read cleanly is kept as an ``.npz`` in
``$SPOTWISE_HOME/cache/traces`` (else the user cache directory's ``traces/``), named by the
SHA-256 of the file's bytes and of the reader's own source, so that:

* a changed file, a changed reading rule, or a name that makes the reader open it another way
  (``.gz``), is a new name: an entry is never stale; a file that changed while it was read is
  not cached;
* only a file that read without error is cached (a refused file is read, and refused, again);
* an entry that cannot be read back (cut off, edited, another format) is ignored and rewritten;
* it loads with ``allow_pickle=False``: an entry holds arrays and one JSON string, nothing that
  runs code;
* a cache that cannot be written (read-only home, full disk) costs nothing but the speed-up.

Files under :data:`MIN_BYTES` are read directly (they parse in milliseconds) and at most
:data:`KEEP` entries are kept, the least recently used removed first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotwise.trace_csv import SkyGrid

log = logging.getLogger(__name__)

MIN_BYTES = 256 * 1024
KEEP = 16


def cache_dir() -> Path:
    home = os.environ.get("SPOTWISE_HOME")
    if home:
        return Path(home) / "cache" / "traces"
    import platformdirs

    return Path(platformdirs.user_cache_dir("spotwise")) / "traces"


def cached_grid(path: Path, read: Callable[[Path], SkyGrid]) -> SkyGrid:
    """``read(path)``, or the grid it returned for a file of the same bytes before. Any
    trouble with the cache itself (a folder one may not enter, a name too long, a bad entry)
    is a miss: only ``read`` may fail the caller."""
    try:
        small = path.stat().st_size < MIN_BYTES
        entry = cache_dir() / f"{_key(path)}.npz" if not small else path
        grid = _load(entry) if not small else None
    except Exception as e:  # a missing file included: the reader says what is wrong with it
        log.debug("trace cache not used for %s (%s)", path, e)
        small = True
    if small:
        return read(path)
    if grid is not None:
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used
        return grid
    grid = read(path)
    try:
        if _key(path) == entry.stem:  # the file did not change while it was read
            _store(entry, grid)
    except Exception as e:
        log.debug("trace cache not written for %s (%s)", path, e)
    return grid


def _key(path: Path) -> str:
    """SHA-256 over the reader's source, how the reader opens the file (``.gz``: gzip, by its
    name) and the file's bytes, each hashed apart so that no two inputs can run together."""
    import spotwise.trace_csv as reader

    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    parts = (
        hashlib.sha256(Path(reader.__file__).read_bytes()).digest(),
        b"gzip" if path.suffix == ".gz" else b"text",
        h.digest(),
    )
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def _load(entry: Path) -> SkyGrid | None:
    import numpy as np

    from spotwise.trace_csv import SkyGrid

    try:
        if not entry.is_file():
            return None
        with np.load(entry, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            times, available, price = z["times"], z["available"], z["price"]
        zones = [str(v) for v in meta["zones"]]
        shape = (len(zones), len(times))
        if (
            times.ndim != 1
            or available.shape != shape
            or price.shape != shape
            or (times.dtype, available.dtype, price.dtype) != (np.float64, np.bool_, np.float64)
        ):
            raise ValueError(f"arrays {times.shape}, {available.shape}, {price.shape} for {shape}")
        return SkyGrid(
            zones=zones,
            times=times,
            available=available,
            price=price,
            instance_type=str(meta["instance_type"]),
            on_demand_price=float(meta["on_demand_price"]),
        )
    except Exception as e:  # any unreadable entry is only a cache miss
        log.debug("trace cache entry %s unreadable (%s); reading the trace", entry, e)
        return None


def _store(entry: Path, grid: SkyGrid) -> None:
    import numpy as np

    meta = json.dumps(
        {
            "zones": grid.zones,
            "instance_type": grid.instance_type,
            "on_demand_price": grid.on_demand_price,
        }
    )
    tmp: str | None = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".part-", suffix=".npz")
        with os.fdopen(fd, "wb") as fh:
            np.savez(
                fh,
                meta=np.array(meta),
                times=grid.times,
                available=grid.available,
                price=grid.price,
            )
        os.replace(tmp, entry)
        tmp = None
        _prune(entry.parent)
    except OSError as e:
        log.debug("trace cache not written (%s)", e)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _prune(folder: Path) -> None:
    def used(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    import time

    entries = sorted(folder.glob("[!.]*.npz"), key=used, reverse=True)
    stale = [p for p in folder.glob(".part-*") if used(p) < time.time() - 3600]  # a crash's
    for old in entries[KEEP:] + stale:
        with contextlib.suppress(OSError):
            old.unlink()
