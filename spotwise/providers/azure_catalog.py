"""The Azure Catalog: VM sizes from ``resource_skus.list``, prices from the Retail Prices API.

Hardware (vCPUs, memory, GPUs, zones, Spot capability, subscription restrictions) comes from the
resource SKUs of a region. Prices come live from the public Retail Prices API (read again per
region after :data:`LIVE_TTL_S`, as the planner refreshes its offers) or, offline, from the
shipped dated catalog; while the API fails, from the last live prices if recent, else the shipped
catalog, the API tried again after :data:`RETRY_AFTER_S`. An Azure
"zone" in an :class:`Offer` is ``<region>-<n>`` for zonal placement, or the region name itself
where a size has no zones. Sizes without a price are never offered, nor, with
``options.max_price``, a Spot offer priced above it (ARM would refuse it).

Names a job gets wrong are refused before it starts (:mod:`spotwise.planner.preflight`):
:meth:`AzureCatalog.check_instance_type` and :meth:`AzureCatalog.check_region` (regions from
the prices, else from :meth:`AzureCatalog.lists_region`).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotwise.errors import NotFoundError, ProviderError, SpecError, did_you_mean
from spotwise.providers import azure_prices
from spotwise.providers.azure import (
    NAME,
    AzureSettings,
    api_deadline_s,
    api_error,
    max_price,
)
from spotwise.providers.base import InstanceType, Market, Offer, PricePoint
from spotwise.providers.bounded import CallDeadlineExceeded, call_within
from spotwise.providers.gcp_prices import PriceRow, PriceTable

log = logging.getLogger(__name__)
LIVE_TTL_S = 300.0  # live prices are read again after this (the planner's offer refresh)
RETRY_AFTER_S = 60.0  # after a failed Retail Prices call, the next try waits this long
STALE_OK_S = 3600.0  # while the API fails, live prices this young beat the shipped catalog
_GPU_IN_NAME = re.compile(r"_(H100|A100|A10|T4|V100|K80|M60|P100|P40|L4|L40S|MI300X)(_|$)")
_GPU_FAMILY = {
    "standardNCSv3Family": "V100",
    "standardNCSv2Family": "P100",
    "standardNDSFamily": "P40",
    "standardNVSv3Family": "M60",
}


@dataclass(frozen=True)
class Sku:
    name: str
    region: str
    vcpus: int
    memory_gb: float
    gpus: int
    gpu_name: str
    zones: tuple[str, ...]
    spot_capable: bool
    arch: str


def zone_name(region: str, zone: str) -> str:
    return f"{region}-{zone}" if zone else region


def split_zone(zone: str) -> tuple[str, str]:
    """``eastus-1`` → (``eastus``, ``1``); ``eastus`` → (``eastus``, ``""``)."""
    m = re.match(r"^(.+)-(\d+)$", zone)
    return (m.group(1), m.group(2)) if m else (zone, "")


def parse_sku(raw: Any, region: str) -> Sku | None:
    """A virtualMachines ResourceSku usable by this subscription in ``region``, else None."""
    if getattr(raw, "resource_type", "") != "virtualMachines":
        return None
    blocked_zones: set[str] = set()
    for r in getattr(raw, "restrictions", None) or []:
        if r.type == "Location" and region in (getattr(r, "values_property", None) or []):
            return None  # NotAvailableForSubscription here
        if r.type == "Zone":
            blocked_zones |= set(getattr(r.restriction_info, "zones", None) or [])
    caps = {c.name: c.value for c in getattr(raw, "capabilities", None) or []}
    try:
        vcpus, mem = int(caps.get("vCPUs", 0)), float(caps.get("MemoryGB", 0))
    except ValueError:
        return None
    if vcpus <= 0 or mem <= 0:
        return None
    gpus = int(caps.get("GPUs", 0) or 0)
    m = _GPU_IN_NAME.search(raw.name)
    gpu_name = (
        (m.group(1) if m else _GPU_FAMILY.get(getattr(raw, "family", ""), "GPU")) if gpus else ""
    )
    zones: list[str] = []
    for info in getattr(raw, "location_info", None) or []:
        if str(info.location).lower() == region.lower():
            zones += [z for z in info.zones or [] if z not in blocked_zones]
    arch = "arm64" if caps.get("CpuArchitectureType") == "Arm64" else "x86_64"
    spot = caps.get("LowPriorityCapable", "False") == "True"
    return Sku(raw.name, region, vcpus, mem, gpus, gpu_name, tuple(sorted(zones)), spot, arch)


class AzureCatalog:
    name = NAME

    def __init__(
        self,
        settings: AzureSettings,
        client: Any | None,
        fallback: PriceTable,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.client = client  # None: offline (hardware and prices from the catalog CSV)
        self.fallback = fallback
        self.clock = clock  # when live prices were read and when a read failed
        self._skus: dict[str, list[Sku]] = {}
        self._sizes: dict[str, set[str]] = {}  # region → every VM size ARM lists there
        self._live: dict[str, tuple[float, PriceTable]] = {}  # region → (read at, prices)
        self._failed_at: dict[str, float] = {}  # region → when its last read failed

    def regions(self) -> list[str]:
        return list(self.settings.regions) or self.fallback.regions()

    def lists_region(self, region: str) -> bool:
        """Whether the resource SKUs API lists VM sizes in ``region`` (False offline, or for
        a name not shaped like a region, which is never sent). The listing is the one the
        offers make anyway: no extra call."""
        if self.client is None:
            return False
        try:
            azure_prices.retail_filter(region)
        except SpecError:
            return False
        self.skus(region)
        return bool(self._sizes.get(region))

    def check_region(self, region: str) -> str:
        """``region`` if Azure has it, else NotFoundError with "did you mean". Known without a
        call: the regions of the shipped price catalog and of this catalog's prices. Else it is
        accepted when the resource SKUs API lists VM sizes there (the listing the offers make
        anyway), so a real region the price catalog lacks passes."""
        from spotwise.providers.azure import shipped_regions

        known = set(shipped_regions()) | set(self.fallback.regions())
        if region in known or self.lists_region(region):
            return region
        choices = sorted(known)
        raise NotFoundError(f"{NAME}: unknown region {region!r}{did_you_mean(region, choices)}")

    def instance_type_names(self, region: str | None = None) -> list[str]:
        """Every VM size the price catalog (any region) or, online, the resource SKUs API (in
        ``region``, else in each of :meth:`regions`; restricted sizes too) knows."""
        names = {r.instance_type for r in self.fallback.rows}
        if self.client is not None:
            for reg in [region] if region else self.regions():
                self.skus(reg)
                names |= self._sizes.get(reg, set())
        return sorted(names)

    def check_instance_type(self, name: str, region: str | None = None) -> str:
        """``name`` if the price catalog or the resource SKUs API knows it, else NotFoundError
        with "did you mean". A name the price catalog knows needs no call; else the region's
        SKUs are listed (the listing the offers make anyway). A size without a price in
        ``region`` passes: it is never offered there, as before."""
        if any(r.instance_type == name for r in self.fallback.rows):
            return name
        names = self.instance_type_names(region)
        if name not in names:
            raise NotFoundError(f"{NAME}: unknown VM size {name!r}{did_you_mean(name, names)}")
        return name

    # ---- hardware --------------------------------------------------------------------------
    def skus(self, region: str) -> list[Sku]:
        if region not in self._skus:
            if self.client is None:
                self._skus[region] = [
                    Sku(
                        r.instance_type,
                        region,
                        r.vcpus,
                        r.memory_gb,
                        r.gpus,
                        r.gpu_name,
                        (),
                        True,
                        "x86_64",
                    )
                    for r in self.fallback.for_region(region)
                ]
            else:
                azure_prices.retail_filter(region)  # checks the region name before it is sent
                try:
                    raws = list(self.client.resource_skus.list(filter=f"location eq '{region}'"))
                except Exception as e:
                    raise api_error(f"azure: listing VM sizes in {region} failed", e) from None
                here = region.lower()
                self._sizes[region] = {
                    raw.name
                    for raw in raws
                    if getattr(raw, "resource_type", "") == "virtualMachines"
                    and here in {str(loc).lower() for loc in getattr(raw, "locations", None) or []}
                }
                parsed = (parse_sku(raw, region) for raw in raws)
                self._skus[region] = [s for s in parsed if s is not None]
        names = self.settings.instance_types
        return [s for s in self._skus[region] if not names or s.name in names]

    def instance_types(self, region: str | None = None) -> list[InstanceType]:
        out = []
        for reg in [region] if region else self.regions():
            prices = self.prices(reg)
            for s in self.skus(reg):
                row = prices.lookup(s.name, reg)
                out.append(
                    InstanceType(
                        NAME,
                        reg,
                        s.name,
                        s.vcpus,
                        s.memory_gb,
                        s.gpus,
                        s.gpu_name,
                        s.arch,
                        row.on_demand if row else None,
                    )
                )
        return sorted(out, key=lambda t: (t.region, t.name))

    # ---- prices ----------------------------------------------------------------------------
    def prices(self, region: str) -> PriceTable:
        """Live Retail API prices for a region, read again once :data:`LIVE_TTL_S` old. When a
        read fails: the last live prices while younger than :data:`STALE_OK_S`, else the
        shipped catalog, for this call only: the API is asked again at the first call
        :data:`RETRY_AFTER_S` after the failure (a passing 503 never pins a job to the
        shipped prices). Offline, or ``prices_source`` not ``live``: the shipped catalog."""
        if self.settings.opt("prices_source", "live") != "live" or self.client is None:
            return self.fallback
        now = self.clock()
        read_at, live = self._live.get(region, (-math.inf, self.fallback))
        if now - read_at < LIVE_TTL_S:
            return live
        kept = live if now - read_at < STALE_OK_S else self.fallback
        failed = self._failed_at.get(region)
        if failed is None or now - failed >= RETRY_AFTER_S:
            try:
                items = self._retail_items(region)
            except ProviderError as e:
                self._failed_at[region] = now
                said = "the shipped Azure price catalog"
                if kept is not self.fallback:
                    said = f"the live prices read {now - read_at:.0f} s ago"
                log.warning("%s; using %s", e.message, said)  # asked again after RETRY_AFTER_S
            else:
                self._failed_at.pop(region, None)
                table = PriceTable(azure_prices.rows_from_items(items))
                self._live[region] = (now, table)
                return table
        return kept

    def _retail_items(self, region: str) -> list[dict[str, Any]]:
        """The region's Retail Prices API items, all pages within one ``api_deadline_s``
        (each page's request may take half of it, or what is left); ProviderError if not."""
        deadline = api_deadline_s(self.settings)
        end = time.monotonic() + deadline

        def get(url: str, params: Mapping[str, str] | None) -> Any:
            left = end - time.monotonic()
            if left <= 0:
                raise CallDeadlineExceeded(deadline)
            return azure_prices.http_get_json(url, params, timeout_s=min(deadline / 2, left))

        def work() -> list[dict[str, Any]]:
            return azure_prices.fetch_items(
                region,
                self.settings.instance_types or None,
                url=self.settings.opt("retail_prices_url", azure_prices.RETAIL_URL),
                get=get,
            )

        try:
            return call_within(end, deadline, work, name="spotwise-azure-prices")
        except CallDeadlineExceeded as e:
            raise ProviderError(f"azure: Retail Prices API request failed: {e}") from None

    def offers(
        self,
        region: str | None = None,
        instance_types: Sequence[str] | None = None,
        market: Market | None = None,
    ) -> list[Offer]:
        markets = [market] if market else list(self.settings.markets)
        cap = max_price(self.settings)
        above: list[str] = []  # Spot offers above options.max_price: ARM refuses them
        out: list[Offer] = []
        for reg in [region] if region else self.regions():
            prices = self.prices(reg)
            for s in self.skus(reg):
                if instance_types and s.name not in instance_types:
                    continue
                row = prices.lookup(s.name, reg)
                if row is None:
                    continue
                zones = [zone_name(reg, z) for z in s.zones] or [reg]
                if self.settings.zones:
                    zones = [z for z in zones if z in self.settings.zones]
                for m in markets:
                    price = row.price(m)
                    if price is None or (m is Market.SPOT and not s.spot_capable):
                        continue
                    if m is Market.SPOT and cap is not None and price > cap:
                        above.append(f"{s.name} in {reg} ({price:g} $/h)")
                        continue
                    out += [
                        Offer(
                            NAME,
                            reg,
                            z,
                            s.name,
                            m,
                            price,
                            row.on_demand,
                            s.vcpus,
                            s.memory_gb,
                            s.gpus,
                            s.gpu_name,
                        )
                        for z in zones
                    ]
        if above:
            log.debug(
                "azure: %d Spot offer(s) above options.max_price %g $/h not offered: %s",
                len(above),
                cap,
                ", ".join(above),
            )
        return sorted(out, key=lambda o: (o.price_per_hour, o.key))

    def price_history(
        self, region: str, instance_type: str, start: float, end: float
    ) -> list[PricePoint]:
        """Azure has no spot price history: the price in effect, dated by when it took effect."""
        row: PriceRow | None = self.prices(region).lookup(instance_type, region)
        if row is None:
            return []
        at = row.as_of_epoch  # the date the price took effect (or was copied, offline)
        if at > end:
            return []
        return [
            PricePoint(NAME, region, instance_type, m, p, at)
            for m in (Market.SPOT, Market.ON_DEMAND)
            if (p := row.price(m)) is not None
        ]
