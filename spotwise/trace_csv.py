"""Read a SkyNomad CSV into a complete zones × ticks grid, refusing input that would be misread.

The rules (each bad case is refused with a :class:`SpecError` naming the line or the cell):

* ``timestamp`` is an ISO 8601 date-time; one without a UTC offset is UTC. Rows are grouped
  into ticks by the instant they name, not by their text: ``2023-02-15 22:08:16`` and
  ``2023-02-15T22:08:16+00:00`` are the same tick, and ticks are sorted by time.
* ``spot_available`` is ``1``/``0`` (also ``1.0``/``0.0``, ``true``/``false``, ``yes``/``no``,
  any case); anything else, an empty cell included, is refused.
* ``spot_price_usd_per_hour`` is a number > 0, or empty (or ``nan``) where unknown; unknown
  prices are carried forward from the zone's previous tick (back from its first known price),
  as before. A price <= 0 or infinite is refused rather than read.
* Every zone needs one row at every timestamp. A missing row is not "spot unavailable": it is
  unknown, and the file is refused (naming the zone, the first missing timestamp and the count)
  so that no revocation is invented. A file cut off in its last tick gets the same refusal,
  which says so.
* Ticks come at a steady pace: a step between two timestamps longer than :data:`HOLE` times
  the median step (every zone missing for a while) is refused, naming the two timestamps, not
  read as one long tick (the shipped trace's longest step is 280 s, 1.44 times its 195 s).
* Two rows for the same zone and instant must agree (exact duplicates are ignored); rows that
  disagree on availability or price are refused.
* A trace is one instance type's zones: rows naming a second ``instance_type`` are refused (they
  were merged into the first's zones). ``on_demand_price_usd_per_hour`` (its first value) must
  be > 0.
"""

from __future__ import annotations

import csv
import gzip
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from spotwise.errors import SpecError

if TYPE_CHECKING:
    import numpy as np

NEED = ("timestamp", "availability_zone", "spot_available")
PRICE = "spot_price_usd_per_hour"
ON_DEMAND = "on_demand_price_usd_per_hour"
_YES = frozenset({"1", "1.0", "true", "yes"})
_NO = frozenset({"0", "0.0", "false", "no"})
HOLE = 3.0  # a step longer than this many median steps is a hole in time (the shipped: 1.44)


@dataclass
class SkyGrid:
    """The cells of a SkyNomad CSV, every one known (prices may be NaN: unknown, not filled)."""

    zones: list[str]
    times: np.ndarray  # (T,) epoch seconds, increasing
    available: np.ndarray  # (Z, T) bool
    price: np.ndarray  # (Z, T) float, NaN where the file left it empty
    instance_type: str
    on_demand_price: float


def parse_time(s: str) -> float:
    """Epoch seconds of an ISO 8601 date-time; a time without a UTC offset is UTC."""
    dt = datetime.fromisoformat(s.strip())
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def read_skynomad_grid(path: Path, *, field: str = "--traces") -> SkyGrid:
    """Read and check ``path`` (``.csv`` or ``.csv.gz``); see the module docstring."""
    import numpy as np

    where = f"{field}: {path}"
    rows, lines = _read_rows(path, where)
    has_price = PRICE in rows[0]
    instant: dict[str, float] = {}  # timestamp text -> epoch seconds
    text_of: dict[float, str] = {}  # epoch seconds -> its first spelling in the file
    cells: dict[tuple[str, float], tuple[int, bool, float]] = {}  # -> (line, available, price)
    od = float("nan")
    kinds: dict[str, str] = {}  # "first": the instance type of the first row that names one
    for line, r in zip(lines, rows, strict=True):
        zone = r["availability_zone"]
        if not zone.strip():
            raise SpecError(f"{where} line {line}: availability_zone is empty")
        stamp = r["timestamp"]
        t = instant.get(stamp)
        if t is None:
            try:
                t = parse_time(stamp)
            except ValueError:
                raise SpecError(
                    f"{where} line {line}: timestamp {stamp!r} is not an ISO date-time "
                    "(e.g. 2023-02-15 22:08:16, read as UTC, or 2023-02-15T22:08:16+00:00)"
                ) from None
            instant[stamp] = t
            text_of.setdefault(t, stamp.strip())
        avail = _availability(r["spot_available"], where, line)
        price = _price(r.get(PRICE), where, line) if has_price else float("nan")
        if od != od and r.get(ON_DEMAND):
            od = _number(r[ON_DEMAND], ON_DEMAND, where, line)
            if not (math.isfinite(od) and od > 0):
                raise SpecError(f"{where} line {line}: {ON_DEMAND} is {od:g}; it must be > 0")
        kind = (r.get("instance_type") or "").strip()
        if kind and kind != kinds.setdefault("first", kind):
            raise SpecError(
                f"{where} line {line}: instance_type {kind} after {kinds['first']}; a trace is "
                "one instance type's zones: split the file by instance_type"
            )
        seen = cells.get((zone, t))
        if seen is None:
            cells[(zone, t)] = (line, avail, price)
        elif seen[1] != avail or not _same(seen[2], price):
            differ = [f"spot_available {int(seen[1])} vs {int(avail)}"] if seen[1] != avail else []
            if not _same(seen[2], price):
                differ.append(f"{PRICE} {_show(seen[2])} vs {_show(price)}")
            raise SpecError(
                f"{where} line {line}: zone {zone} at {text_of[t]} already has a row "
                f"(line {seen[0]}) with other values ({', '.join(differ)}); "
                "keep one row per zone and timestamp"
            )
    zones = sorted({z for z, _ in cells})
    stamps = sorted(text_of)
    times = np.array(stamps)
    z_index = {z: i for i, z in enumerate(zones)}
    t_index = {t: i for i, t in enumerate(stamps)}
    available = np.zeros((len(zones), len(times)), dtype=bool)
    known = np.zeros((len(zones), len(times)), dtype=bool)
    price_grid = np.full((len(zones), len(times)), np.nan)
    for (zone, t), (_, avail, price) in cells.items():
        zi, ti = z_index[zone], t_index[t]
        available[zi, ti], known[zi, ti], price_grid[zi, ti] = avail, True, price
    if not known.all():
        raise SpecError(_missing_message(where, zones, stamps, text_of, known))
    _check_steps(where, times, text_of)
    return SkyGrid(
        zones=zones,
        times=times,
        available=available,
        price=price_grid,
        instance_type=kinds.get("first", ""),
        on_demand_price=od,
    )


def _read_rows(path: Path, where: str) -> tuple[list[dict[str, str]], list[int]]:
    """The rows of the file and the line each ends on; refuses a file without the columns,
    without rows, or with a row shorter than the header."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows: list[dict[str, str]] = []
    lines: list[int] = []
    try:
        with opener(path, "rt", newline="") as fh:  # type: ignore[operator]
            reader = csv.DictReader(fh)
            if not reader.fieldnames or not set(NEED) <= set(reader.fieldnames):
                raise SpecError(
                    f"{where} lacks columns "
                    f"{sorted(set(NEED) - set(reader.fieldnames or []))}; expected the SkyNomad "
                    "CSV (timestamp, availability_zone, spot_available, ...)"
                )
            for r in reader:
                rows.append(r)
                lines.append(reader.line_num)
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as e:  # not gzip, not text, ...
        raise SpecError(f"{where} cannot be read as a SkyNomad CSV: {e}") from None
    if not rows:
        raise SpecError(f"{where} has no rows")
    for line, r in zip(lines, rows, strict=True):  # short rows come back with None in the gaps
        if any(r.get(k) is None for k in NEED):
            raise SpecError(f"{where} line {line} has fewer fields than its header")
    return rows, lines


def _availability(text: str, where: str, line: int) -> bool:
    v = text.strip().lower()
    if v in _YES:
        return True
    if v in _NO:
        return False
    raise SpecError(
        f"{where} line {line}: spot_available is {text!r}; use 1 or 0 (or true/false, yes/no)"
    )


def _price(text: str | None, where: str, line: int) -> float:
    """A spot price, NaN where the cell is empty or ``nan`` (unknown, carried forward later)."""
    if text is None or not text.strip():
        return float("nan")
    p = _number(text, PRICE, where, line)
    if p != p:
        return p
    if not math.isfinite(p) or p <= 0:
        raise SpecError(
            f"{where} line {line}: {PRICE} is {text.strip()}; a price must be a number > 0 "
            "(leave the cell empty where it is unknown)"
        )
    return p


def _number(text: str, column: str, where: str, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise SpecError(f"{where} line {line}: {column} {text!r} is not a number") from None


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _show(p: float) -> str:
    return "empty" if p != p else f"{p:g}"


def _check_steps(where: str, times: np.ndarray, text_of: dict[float, str]) -> None:
    """Refuse a step between two ticks longer than :data:`HOLE` times the median step: every
    zone is unknown there (the replay would hold the last state across it and the features
    would count its two sides as adjacent ticks)."""
    import numpy as np

    if len(times) < 3:
        return
    steps = np.diff(times)
    median = float(np.median(steps))
    holes = np.flatnonzero(steps > HOLE * median)
    if not len(holes):
        return
    i = int(holes[0])
    more = f" (and {len(holes) - 1} more such holes)" if len(holes) > 1 else ""
    raise SpecError(
        f"{where}: no row between {text_of[float(times[i])]} and "
        f"{text_of[float(times[i + 1])]} ({_span(float(steps[i]))}, the median step is "
        f"{median:g} s){more}: a hole in time is unknown for every zone, not one long tick; "
        "split the file at the hole or add the missing rows"
    )


def _span(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:g} s"


def _missing_message(
    where: str, zones: list[str], times: list[float], text_of: dict[float, str], known: np.ndarray
) -> str:
    import numpy as np

    gaps = ~known
    n = int(gaps.sum())
    ti = int(np.argmax(gaps.any(axis=0)))  # the first tick with a gap, then its first zone
    zone, stamp = zones[int(np.argmax(gaps[:, ti]))], text_of[times[ti]]
    n_zones = int(gaps.any(axis=1).sum())
    count = f"{n} zone/timestamp row{'s' if n > 1 else ''} missing"
    if n_zones > 1:
        count += f" in {n_zones} zones"
    last = len(times) - 1
    if len(times) > 1 and not gaps[:, :last].any():
        have = len(zones) - n
        fix = (
            f"the file looks cut off: its last timestamp {stamp} has rows for {have} of "
            f"{len(zones)} zones; delete the rows at {stamp} or add the missing ones"
        )
    else:
        fix = (
            "every zone needs a row at every timestamp (a missing row is not read as "
            "unavailable): add the missing rows or remove the zone"
        )
    return f"{where} has no row for zone {zone} at {stamp} ({count}); {fix}"
