"""Load real spot traces into one aligned shape: zones × ticks of availability and price.

Two formats are read:

* the SkyNomad CSV (``.csv`` or ``.csv.gz``, or a folder holding one; a folder holding several
  is refused with their list, side files named ``*summary*``/``*index*`` aside):
  ``timestamp, availability_zone, instance_type, spot_available, spot_price_usd_per_hour,
  on_demand_price_usd_per_hour``. It is read strictly (:mod:`spotwise.trace_csv`): ticks are
  the instants the timestamps name (no UTC offset means UTC), ``spot_available`` is 1/0
  (true/false, yes/no), every zone needs a row at every tick (a missing row is refused, never
  read as "unavailable"; so is a file cut off in its last tick), rows of one zone and tick must
  agree, and a price is > 0 or empty; empty prices are carried forward (back-filled before a
  zone's first price);
* a folder of Can't Be Late JSON files ``<zone>_<key>.json`` holding
  ``{"metadata": {"gap_seconds": N}, "data": [counts...]}`` (no timestamps, no prices: ticks
  start at the set's ``start_date`` in a ``trace_index.csv`` beside or above the folder when
  there is one, else at :data:`CBL_EPOCH`; prices are NaN unless the caller supplies them).
  A count is a number >= 0 (NaN, a negative, a string are refused, never read as
  "unavailable"), ``gap_seconds`` a number > 0, and the files of a set have one gap and one
  length (a shorter file is refused, not cut to: nothing says where it lies in time).

Everything downstream (replay market, revocation predictor, simulator) uses :class:`TraceSet`.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from spotwise.errors import SpecError

if TYPE_CHECKING:
    import numpy as np

CBL_EPOCH = 1676498896.0  # 2023-02-15 22:08:16 UTC, first tick of the matching SkyNomad trace
# How many folder levels below a --traces folder its JSON files are looked for: the Can't Be
# Late root holds them 3 down (availability/1-node/aws-02-15-2023/*.json). Deeper files are not
# looked at, so a folder such as /tmp or ~ is refused quickly instead of walked whole.
CBL_DEPTH = 3
_WHAT = "pass a SkyNomad CSV (file or folder) or a folder of Can't Be Late JSON files"


@dataclass
class TraceSet:
    """Aligned availability/price traces of one instance type over several zones."""

    zones: list[str]
    times: np.ndarray  # (T,) epoch seconds, increasing
    available: np.ndarray  # (Z, T) bool: spot obtainable in zone z at tick t
    price: np.ndarray  # (Z, T) float USD/h; NaN where unknown
    instance_type: str = ""
    on_demand_price: float = float("nan")
    gap_seconds: float = 0.0
    source: str = ""
    counts: np.ndarray | None = field(default=None)  # (Z, T) raw instance counts (CBL files)

    def __post_init__(self) -> None:
        z, t = self.available.shape
        if z != len(self.zones) or t != len(self.times) or self.price.shape != (z, t):
            raise ValueError(
                f"trace arrays disagree: {len(self.zones)} zones, {len(self.times)} ticks, "
                f"available {self.available.shape}, price {self.price.shape}"
            )

    @property
    def n_ticks(self) -> int:
        return len(self.times)

    @property
    def duration_s(self) -> float:
        return float(self.times[-1] - self.times[0]) + self.gap_seconds

    def tick_at(self, t: float) -> int:
        """Index of the tick in force at epoch time ``t`` (clamped to the trace)."""
        import numpy as np

        i = int(np.searchsorted(self.times, t, side="right")) - 1
        return min(max(i, 0), self.n_ticks - 1)

    def slice(self, start: int, stop: int) -> TraceSet:
        return TraceSet(
            zones=list(self.zones),
            times=self.times[start:stop],
            available=self.available[:, start:stop],
            price=self.price[:, start:stop],
            instance_type=self.instance_type,
            on_demand_price=self.on_demand_price,
            gap_seconds=self.gap_seconds,
            source=self.source,
            counts=None if self.counts is None else self.counts[:, start:stop],
        )


def load_traces(path: str | Path, *, field: str = "--traces") -> TraceSet:
    """Load a SkyNomad CSV (file or folder) or a folder of Can't Be Late JSON files.

    ``field`` is the option or spec field that named ``path``; every error message starts with
    it (``--traces``, ``--train-on``, ...).
    """
    if not str(path).strip():
        raise SpecError(f"{field} is empty; {_WHAT}")
    p = Path(path).expanduser()
    if not p.exists():
        raise SpecError(f"{field}: {path} does not exist; {_WHAT}")
    if p.is_dir():
        csvs = sorted([*p.glob("*.csv.gz"), *p.glob("*.csv")])
        # side files (a price summary, a data set's trace_index.csv) are not traces
        csvs = [c for c in csvs if "summary" not in c.name and "index" not in c.name]
        if len(csvs) > 1:
            shown = ", ".join(c.name for c in csvs[:6])
            more = f" and {len(csvs) - 6} more" if len(csvs) > 6 else ""
            raise SpecError(
                f"{field}: {p} holds {len(csvs)} CSV files ({shown}{more}); pass the one trace "
                f"CSV, e.g. {csvs[0]} (join the parts of one trace into one file first)"
            )
        if csvs:
            return load_skynomad_csv(csvs[0], field=field)
        files = find_json(p)
        if files:
            return _load_cbl_sets(p, files, field=field)
        raise SpecError(
            f"{field}: {p} holds no .csv(.gz) or .json trace files "
            f"(looked {CBL_DEPTH} folder levels down)"
        )
    if p.suffix == ".json":
        return load_cbl_files([p], field=field)
    return load_skynomad_csv(p, field=field)


def _parse_ts(s: str) -> float:
    from spotwise.trace_csv import parse_time

    return parse_time(s)


def load_skynomad_csv(path: Path, *, field: str = "--traces") -> TraceSet:
    """Load one SkyNomad CSV; the input rules are in :mod:`spotwise.trace_csv`."""
    import numpy as np

    from spotwise.trace_cache import cached_grid
    from spotwise.trace_csv import read_skynomad_grid

    grid = cached_grid(path, lambda p: read_skynomad_grid(p, field=field))
    times = grid.times
    gap = float(np.median(np.diff(times))) if len(times) > 1 else 0.0
    return TraceSet(
        zones=grid.zones,
        times=times,
        available=grid.available,
        price=_ffill(grid.price),
        instance_type=grid.instance_type,
        on_demand_price=grid.on_demand_price,
        gap_seconds=gap,
        source=str(path),
    )


def load_cbl_folder(folder: Path, pattern: str = "*.json", *, field: str = "--traces") -> TraceSet:
    """The JSON traces of one set: the folder itself or the single folder under it holding them.

    A folder whose JSON files sit in several sub-folders (the Can't Be Late root holds sets of
    other dates, gaps and lengths) is refused with the list of sets, so a command never picks one
    silently.
    """
    files = find_json(folder, pattern)
    if not files:
        raise SpecError(
            f"{field}: no JSON files under {folder} (looked {CBL_DEPTH} folder levels down)"
        )
    return _load_cbl_sets(folder, files, field=field)


def find_json(folder: Path, pattern: str = "*.json", depth: int = CBL_DEPTH) -> list[Path]:
    """The files matching ``pattern`` in ``folder`` and up to ``depth`` folder levels below it,
    sorted; symbolic links to folders are not followed (as ``Path.rglob``). A bounded walk: a
    large tree with no trace in its top levels costs only those levels."""
    import os
    from fnmatch import fnmatchcase

    found: list[Path] = []
    top = len(folder.parts)
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        found += [here / n for n in names if fnmatchcase(n, pattern)]
        if len(here.parts) - top >= depth:
            dirs.clear()  # deep enough: do not descend further
    return sorted(found)


def _load_cbl_sets(folder: Path, files: list[Path], *, field: str) -> TraceSet:
    """Load ``files`` (found under ``folder``) when they form one set, else refuse with the
    list of sets."""
    sets = sorted({f.parent for f in files})
    if len(sets) > 1:
        shown = ", ".join(str(s.relative_to(folder)) for s in sets[:6])
        more = f" and {len(sets) - 6} more" if len(sets) > 6 else ""
        raise SpecError(
            f"{field}: {folder} holds {len(sets)} trace sets ({shown}{more}); "
            f"pass one of those folders, e.g. {sets[0]}"
        )
    return load_cbl_files(files, field=field)


def load_cbl_files(files: list[Path], *, field: str = "--traces") -> TraceSet:
    """The files of one Can't Be Late set, read as they are or refused (see :func:`_cbl_read`):
    one gap and one length for all, since the files carry no timestamps to align them by."""
    import numpy as np

    series = [_cbl_read(f, field) for f in files]
    gaps = sorted({s[2] for s in series})
    if len(gaps) > 1:
        raise SpecError(
            f"{field}: {files[0].parent} mixes tick gaps {gaps} s; pass files of one set"
        )
    lengths = sorted({len(s[1]) for s in series})
    if len(lengths) > 1:
        raise SpecError(_lengths_message(files, [len(s[1]) for s in series], field))
    gap0, n0 = gaps[0], lengths[0]
    counts = np.array([s[1] for s in series])
    return TraceSet(
        zones=[s[0] for s in series],
        times=_cbl_start(files) + gap0 * np.arange(n0),
        available=counts > 0,
        price=np.full(counts.shape, np.nan),
        instance_type=_cbl_key(series[0][0]),
        gap_seconds=gap0,
        source=str(files[0].parent),
        counts=counts,
    )


def _cbl_read(f: Path, field: str) -> tuple[str, list[float], float]:
    """``(zone stem, counts, gap)`` of one file. A count must be a number >= 0 (the instances
    obtainable at that tick): NaN or a negative is unknown, not "unavailable", and is refused
    (naming the index) rather than read as a revocation; ``gap_seconds`` must be a number > 0;
    an empty ``data`` is refused by name."""
    try:
        doc = json.loads(f.read_text())
        gap, raw = doc["metadata"]["gap_seconds"], doc["data"]
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
        raise SpecError(
            f"{field}: {f} is not a Can't Be Late trace "
            f'({{"metadata": {{"gap_seconds": N}}, "data": [...]}}): {e}'
        ) from None
    where = f"{field}: {f}"
    step = _number(gap)
    if not step > 0:
        raise SpecError(
            f"{where}: metadata.gap_seconds is {json.dumps(gap)}; it must be a number of "
            "seconds > 0 (the time between two values of data)"
        )
    if not isinstance(raw, list):
        raise SpecError(f"{where}: data is {type(raw).__name__}, not a list of counts")
    if not raw:
        raise SpecError(f"{where}: data is empty (no tick); remove the file or fill it")
    counts = [_number(x) for x in raw]
    bad = [i for i, c in enumerate(counts) if not c >= 0]  # NaN (not a number) included
    if bad:
        more = f" (and {len(bad) - 1} more such values)" if len(bad) > 1 else ""
        raise SpecError(
            f"{where}: data[{bad[0]}] is {json.dumps(raw[bad[0]])}{more}; a count must be a "
            "number >= 0 (the instances obtainable at that tick, 0 = none): a missing or "
            "negative count is unknown, not 'unavailable'; fix those values or cut the file "
            "before them"
        )
    return f.stem, counts, step


def _number(x: object) -> float:
    """A finite JSON number as a float, else NaN (true/false, "1", null, NaN, an overflow)."""
    if type(x) is float:
        return x if math.isfinite(x) else math.nan
    if type(x) is int:
        return float(x) if abs(x) < 1 << 1000 else math.nan
    return math.nan


def _lengths_message(files: list[Path], lengths: list[int], field: str) -> str:
    by_length: dict[int, list[str]] = {}
    for f, n in zip(files, lengths, strict=True):
        by_length.setdefault(n, []).append(f.name)
    shown = "; ".join(
        f"{', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''}: {n}"
        for n, names in sorted(by_length.items())
    )
    short = min(lengths)
    return (
        f"{field}: {files[0].parent} holds files of different lengths (values: {shown}); the "
        "files carry no timestamps, so the ticks one file lacks are unknown and a set is read "
        "only when its files have one length: pass a folder without the shorter file(s), or "
        f"copy the set and cut every file to its first {short} values (if they start together)"
    )


def _cbl_start(files: list[Path]) -> float:
    """The set's start time from a ``trace_index.csv`` beside it or up to 3 folders above
    (``path``, ``start_date`` columns, as in ../shared/data), else :data:`CBL_EPOCH`.

    The JSON files carry no timestamps; without an index the day of week is synthetic.
    """
    for folder in [files[0].parent, *list(files[0].parent.parents)[:3]]:
        index = folder / "trace_index.csv"
        if not index.is_file():
            continue
        try:
            with index.open(newline="") as fh:
                starts = {
                    (folder / row["path"]).resolve(): row["start_date"]
                    for row in csv.DictReader(fh)
                    if row.get("path") and row.get("start_date")
                }
            found = {starts.get(f.resolve()) for f in files}
            if len(found) == 1 and None not in found:
                return _parse_ts(str(found.pop()))
        except (OSError, KeyError, ValueError, csv.Error):
            pass  # an index that does not describe these files: keep the default
        break
    return CBL_EPOCH


def _cbl_key(stem: str) -> str:
    parts = stem.split("_", 1)
    return parts[1] if len(parts) == 2 else stem


def _ffill(a: np.ndarray) -> np.ndarray:
    """Forward-fill NaN along the tick axis, then back-fill the leading NaN."""
    import numpy as np

    out = a.copy()
    for z in range(out.shape[0]):
        row = out[z]
        mask = np.isnan(row)
        if mask.all():
            continue
        idx = np.where(~mask, np.arange(len(row)), 0)
        np.maximum.accumulate(idx, out=idx)
        row[:] = row[idx]
        first = int(np.argmax(~mask))
        row[:first] = row[first]
    return out
