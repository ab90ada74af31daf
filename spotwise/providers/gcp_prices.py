"""GCP list prices as data: a small shipped catalog, and a way to refresh it.

Google has no spot *price history* API and its Cloud Billing Catalog API needs credentials and
a SKU-to-machine-type join, so prices come from a CSV catalog::

    instance_type,region,zone,vcpus,memory_gb,gpus,gpu_name,on_demand,spot,as_of,source

* one row per machine type and region (``zone`` empty: every zone of the region) or per zone;
* ``on_demand`` / ``spot`` are USD per hour for the *whole* VM, bundled GPUs included;
* ``as_of`` is the ISO date the numbers were taken, ``source`` a short key explained in the
  catalog folder's ``SOURCE.md``.

The same CSV format (and this module's loader) serves Azure: see
:mod:`spotwise.providers.azure_prices`. The shipped GCP copy lives in
``spotwise/data/gcp-prices/prices.csv`` (its SOURCE.md says where every number comes from and
how old it is). :func:`refresh` rebuilds a catalog from the
public SkyPilot catalog CSV (``vms.csv``, schema v7), which SkyPilot regenerates every few
hours from Google's Cloud Billing Catalog; pass a local path to refresh offline.
SkyPilot's file prices the GPUs of an accelerator-optimized family (a2, a3, a4, g2, g4, ...) on
rows of their own, its machine rows carry the host part only: a machine type of such a family
whose GPUs have no price row is dropped (never written at the host price), and :func:`refresh`
logs what it dropped.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from spotwise.errors import ConfigError, ProviderError
from spotwise.providers.base import Market

log = logging.getLogger(__name__)
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "gcp-prices" / "prices.csv"
SKYPILOT_GCP_URL = (
    "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v7/gcp/vms.csv"
)
COLUMNS = (
    "instance_type",
    "region",
    "zone",
    "vcpus",
    "memory_gb",
    "gpus",
    "gpu_name",
    "on_demand",
    "spot",
    "as_of",
    "source",
)

# Machine families whose GPUs are bundled: (pattern, SkyPilot accelerator name, GPU count).
# SkyPilot prices the machine part and the GPUs on separate rows; we store their sum.
_BUNDLED: tuple[tuple[re.Pattern[str], str, int | None], ...] = (
    (re.compile(r"^g2-standard-(4|8|12|16|32)$"), "L4", 1),
    (re.compile(r"^g2-standard-24$"), "L4", 2),
    (re.compile(r"^g2-standard-48$"), "L4", 4),
    (re.compile(r"^g2-standard-96$"), "L4", 8),
    (re.compile(r"^a2-highgpu-(\d+)g$"), "A100", None),
    (re.compile(r"^a2-megagpu-(\d+)g$"), "A100", None),
    (re.compile(r"^a2-ultragpu-(\d+)g$"), "A100-80GB", None),
    (re.compile(r"^a3-highgpu-(\d+)g$"), "H100", None),
)
# Accelerator-optimized families (a2, a3, a4, a4x, g2, g4, ... and any later one): their GPUs
# come with the machine type, and SkyPilot's machine row is the host part only. A type of such a
# family that _BUNDLED does not join with a GPU row is dropped. g1 (g1-small) is a legacy
# shared-core type without a GPU.
_ACCELERATOR_FAMILY = re.compile(r"^(?:a\d+|g(?:[2-9]|\d{2,}))[a-z]*-")


@dataclass(frozen=True)
class PriceRow:
    instance_type: str
    region: str
    zone: str  # "" = every zone of the region
    vcpus: int
    memory_gb: float
    gpus: int
    gpu_name: str
    on_demand: float
    spot: float | None
    as_of: str  # ISO date
    source: str

    @property
    def as_of_epoch(self) -> float:
        d = date.fromisoformat(self.as_of)
        return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()

    def price(self, market: Market) -> float | None:
        return self.spot if market is Market.SPOT else self.on_demand


class PriceTable:
    """Rows of a price catalog with zone-then-region lookup."""

    def __init__(self, rows: Iterable[PriceRow]) -> None:
        self.rows = list(rows)
        self._by_key: dict[tuple[str, str, str], PriceRow] = {
            (r.instance_type, r.region, r.zone): r for r in self.rows
        }

    def regions(self) -> list[str]:
        return sorted({r.region for r in self.rows})

    def lookup(self, instance_type: str, region: str, zone: str = "") -> PriceRow | None:
        if zone:
            hit = self._by_key.get((instance_type, region, zone))
            if hit is not None:
                return hit
        return self._by_key.get((instance_type, region, ""))

    def for_region(self, region: str | None) -> list[PriceRow]:
        return [r for r in self.rows if region is None or r.region == region]


def load(path: str | Path | None = None, *, default: Path = SHIPPED) -> PriceTable:
    """Load a catalog CSV (default: the shipped GCP one)."""
    p = Path(path) if path else default
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(
            f"cannot read price catalog {p}: {e.strerror}",
            hint="set providers[].options.prices to a CSV written by a `refresh` of "
            "spotwise.providers.gcp_prices or azure_prices",
        ) from None
    return PriceTable(parse(text, str(p)))


def parse(text: str, where: str = "<csv>") -> list[PriceRow]:
    """The rows of a catalog CSV. A price must be a positive, finite number of USD/h (``spot``
    may be empty: no spot price): a row priced 0, negative or NaN would be offered first and
    billed at that price, past any budget, so it is refused with its file, line and column."""
    reader = csv.DictReader(io.StringIO(text))
    missing = set(COLUMNS) - set(reader.fieldnames or ())
    if missing:
        raise ConfigError(f"price catalog {where} lacks columns {sorted(missing)}")
    rows = []
    for n, rec in enumerate(reader, start=2):
        try:
            on_demand = _usd(rec["on_demand"], where, n, "on_demand")
            spot = _usd(rec["spot"], where, n, "spot") if rec["spot"] else None
            rows.append(
                PriceRow(
                    instance_type=rec["instance_type"],
                    region=rec["region"],
                    zone=rec["zone"] or "",
                    vcpus=int(float(rec["vcpus"] or 0)),
                    memory_gb=float(rec["memory_gb"] or 0),
                    gpus=int(float(rec["gpus"] or 0)),
                    gpu_name=rec["gpu_name"] or "",
                    on_demand=on_demand,
                    spot=spot,
                    as_of=date.fromisoformat(rec["as_of"]).isoformat(),
                    source=rec["source"],
                )
            )
        except (KeyError, ValueError, TypeError) as e:
            raise ConfigError(f"price catalog {where} line {n} is invalid: {e}") from None
    return rows


def _usd(raw: str | None, where: str, line: int, column: str) -> float:
    """A catalog cell that must be a price: a positive, finite number, else ConfigError."""
    value = _positive(raw)
    if value is None:
        empty = column == "spot"
        raise ConfigError(
            f"price catalog {where} line {line}: column {column} must be a positive number of "
            f"USD/h, got {(raw or '').strip()!r}",
            hint=f"correct or remove that row of {where}"
            + ("; leave spot empty for a type sold without spot" if empty else ""),
        )
    return value


def write(rows: Sequence[PriceRow], path: str | Path) -> Path:
    """Write rows atomically (temp file + rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in sorted(rows, key=lambda r: (r.instance_type, r.region, r.zone)):
        spot = "" if r.spot is None else f"{r.spot:.5f}"
        w.writerow(
            [
                r.instance_type,
                r.region,
                r.zone,
                r.vcpus,
                f"{r.memory_gb:g}",
                r.gpus,
                r.gpu_name,
                f"{r.on_demand:.5f}",
                spot,
                r.as_of,
                r.source,
            ]
        )
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(buf.getvalue(), encoding="utf-8")
    tmp.replace(p)
    return p


def from_skypilot_csv(
    text: str,
    *,
    regions: Sequence[str] | None = None,
    instance_types: Sequence[str] | None = None,
    as_of: str | None = None,
    source: str = "skypilot-catalog-v7",
    dropped: list[str] | None = None,
    unpriced: list[str] | None = None,
) -> list[PriceRow]:
    """Turn a SkyPilot v7 GCP ``vms.csv`` into region-level rows, GPUs of bundled families added.

    Machine types whose bundled GPU has no price row are dropped rather than under-priced, and
    so is every machine type of an accelerator-optimized family (a2/a3/a4/g2/g4..., see
    ``_ACCELERATOR_FAMILY``) that ``_BUNDLED`` cannot join with its GPUs' row: its machine row
    is the host part only (an 8-GPU a3-edgegpu-8g at ~1/9 of its price). ``dropped``, when
    given, receives ``"<type> in <region>"`` for each one. A price that is not a positive,
    finite number (0, negative, NaN) is never written: such an on-demand price drops the row,
    such a spot price leaves the row without spot (a GPU row's likewise); ``unpriced``, when
    given, receives ``"<type> in <region>"`` (``" (spot)"`` added when only spot was dropped).
    """
    day = as_of or datetime.fromtimestamp(time.time(), UTC).date().isoformat()
    machines: dict[tuple[str, str], dict[str, str]] = {}
    gpus: dict[tuple[str, int, str], dict[str, str]] = {}
    for rec in csv.DictReader(io.StringIO(text)):
        region = rec.get("Region") or ""
        if regions and region not in regions:
            continue
        itype = rec.get("InstanceType") or ""
        if itype:
            if instance_types and itype not in instance_types:
                continue
            machines.setdefault((itype, region), rec)  # one row per region (zones share a price)
        elif rec.get("AcceleratorName"):
            count = int(float(rec.get("AcceleratorCount") or 0))
            gpus.setdefault((rec["AcceleratorName"], count, region), rec)
    out: list[PriceRow] = []
    for (itype, region), rec in machines.items():
        od, spot = _positive(rec.get("Price")), _positive(rec.get("SpotPrice"))
        if od is None:
            if _bad(rec.get("Price")):
                _note(unpriced, f"{itype} in {region}")  # 0, negative, NaN: never offered
            continue
        spot_bad = spot is None and _bad(rec.get("SpotPrice"))
        gpu_name, gpu_count = "", 0
        bundled = _bundled_gpu(itype)
        if bundled is None and _ACCELERATOR_FAMILY.match(itype):
            if dropped is not None:
                dropped.append(f"{itype} in {region}")  # GPUs of a family we cannot price
            continue
        if bundled is not None:
            gpu_name, gpu_count = bundled
            g = gpus.get((gpu_name, gpu_count, region))
            g_od = _positive(g.get("Price")) if g else None
            if g is None or g_od is None:
                if dropped is not None:
                    dropped.append(f"{itype} in {region}")
                continue
            g_spot = _positive(g.get("SpotPrice"))
            spot_bad = spot_bad or (
                spot is not None and g_spot is None and _bad(g.get("SpotPrice"))
            )
            od += g_od
            spot = None if spot is None or g_spot is None else spot + g_spot
        od, spot = round(od, 5), None if spot is None else round(spot, 5)  # as written
        if od <= 0:  # below 0.000005 USD/h: written as 0, which no catalog may hold
            _note(unpriced, f"{itype} in {region}")
            continue
        if spot is not None and spot <= 0:
            spot, spot_bad = None, True
        if spot_bad:
            _note(unpriced, f"{itype} in {region} (spot)")
        out.append(
            PriceRow(
                instance_type=itype,
                region=region,
                zone="",
                vcpus=int(float(rec.get("vCPUs") or 0)),
                memory_gb=float(rec.get("MemoryGiB") or 0),
                gpus=gpu_count,
                gpu_name=gpu_name,
                on_demand=od,
                spot=spot,
                as_of=day,
                source=source,
            )
        )
    return out


def refresh(
    dest: str | Path,
    *,
    source: str = SKYPILOT_GCP_URL,
    regions: Sequence[str] | None = None,
    instance_types: Sequence[str] | None = None,
    timeout_s: float = 60.0,
) -> Path:
    """Fetch the public catalog (a URL or a local path), keep what was asked, write ``dest``."""
    if re.match(r"^https?://", source):
        import requests

        try:
            resp = requests.get(source, timeout=timeout_s)
            resp.raise_for_status()
        except requests.RequestException as e:
            raise ProviderError(
                f"gcp: cannot fetch prices from {source}: {type(e).__name__}",
                hint="pass source=<path to a downloaded vms.csv> to refresh offline",
            ) from None
        text = resp.text
    else:
        text = Path(source).read_text(encoding="utf-8")
    dropped: list[str] = []
    unpriced: list[str] = []
    rows = from_skypilot_csv(
        text, regions=regions, instance_types=instance_types, dropped=dropped, unpriced=unpriced
    )
    why = f"; {_said(dropped)} dropped: their GPUs have no price row" if dropped else ""
    if unpriced:
        why += f"; {_said(unpriced, 'price')} dropped: not a positive number of USD/h"
    if not rows:
        raise ProviderError(
            f"gcp: no prices matched in {source} for {regions=} {instance_types=}{why}"
        )
    if why:
        log.warning("gcp: prices refreshed from %s%s", source, why)
    return write(rows, dest)


def _said(dropped: Sequence[str], what: str = "machine-type row") -> str:
    """``3 machine-type rows (a3-edgegpu-8g in us-central1, ...)``, at most 5 named."""
    shown = ", ".join(dropped[:5]) + (", ..." if len(dropped) > 5 else "")
    return f"{len(dropped)} {what}{'s' * (len(dropped) != 1)} ({shown})"


def _bundled_gpu(itype: str) -> tuple[str, int] | None:
    for pattern, name, count in _BUNDLED:
        m = pattern.match(itype)
        if m:
            return name, count if count is not None else int(m.group(1))
    return None


def _num(v: str | None) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except ValueError:
        return None


def _positive(v: str | None) -> float | None:
    """``v`` as a price: a positive, finite number, else None (0, negative, NaN, inf, text)."""
    value = _num(v)
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _bad(v: str | None) -> bool:
    """A cell that holds something, but not a price (empty is "no price", not bad)."""
    return v not in (None, "") and _positive(v) is None


def _note(into: list[str] | None, what: str) -> None:
    if into is not None:
        into.append(what)
