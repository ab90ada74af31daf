"""The GCP Catalog: hardware from ``MachineTypesClient.aggregated_list``, prices from the catalog.

With ``options.offline: true`` (no clients) the hardware comes from the price CSV and zones
from ``providers[].zones``. Machine types without a price are never offered (a wrong price is
worse than none), nor is one whose listing has GPUs its price row does not count (a catalog
row with the host part only: an 8-GPU VM would be billed at a fraction of its price). GCP has
no spot price history API: :meth:`GcpCatalog.price_history` returns the catalog's dated point.

Names a job gets wrong are refused before it starts (:mod:`spotwise.planner.preflight`):
:meth:`GcpCatalog.check_instance_type` and :meth:`GcpCatalog.check_region` (regions from the
prices, else from :meth:`GcpCatalog.listed_regions`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from spotwise.errors import NotFoundError, ProviderError, SpecError, did_you_mean
from spotwise.providers.base import InstanceType, Market, Offer, PricePoint
from spotwise.providers.gcp import NAME, GcpClients, GcpSettings, zone_region
from spotwise.providers.gcp_errors import api_error
from spotwise.providers.gcp_prices import PriceRow, PriceTable

log = logging.getLogger(__name__)
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
_GPU_NAMES = {
    "nvidia-l4": "L4",
    "nvidia-tesla-a100": "A100",
    "nvidia-a100-80gb": "A100-80GB",
    "nvidia-h100-80gb": "H100",
    "nvidia-h100-mega-80gb": "H100-MEGA",
    "nvidia-tesla-t4": "T4",
    "nvidia-tesla-v100": "V100",
}


class GcpCatalog:
    """Hardware from ``MachineTypesClient.aggregated_list``, prices from the price catalog."""

    name = NAME

    def __init__(
        self, settings: GcpSettings, clients: GcpClients | None, prices: PriceTable
    ) -> None:
        self.settings = settings
        self.clients = clients  # None: offline, hardware from the price catalog
        self.prices = prices
        self._listed: dict[tuple[str, ...], list[tuple[str, Any]]] = {}
        self._zones: set[str] = set()  # every zone an API listing named, matched or not

    def regions(self) -> list[str]:
        return list(self.settings.regions) or self.prices.regions()

    def listed_regions(self) -> set[str]:
        """The regions of the zones the Compute API lists machine types in (empty offline).

        The answer names every zone, those without a match too, so this is the listing the
        offers make anyway (the job's machine types, else the priced ones): no extra call."""
        if self.clients is None:
            return set()
        named = [n for n in self.settings.instance_types if _MACHINE_TYPE.match(n)]
        self._machine_types(None, named or None)
        return {zone_region(z) for z in self._zones}

    def check_region(self, region: str) -> str:
        """``region`` if GCP has it, else NotFoundError with "did you mean". Known without a
        call: the regions of the shipped price catalog and of this catalog's prices. Else it
        is looked for in the zones the Compute API lists machine types in (the listing the
        offers make anyway), so a real region the price catalog lacks is accepted."""
        from spotwise.providers.gcp import shipped_regions

        known = set(shipped_regions()) | set(self.prices.regions())
        if region in known:
            return region
        listed = self.listed_regions()
        if region in listed:
            return region
        choices = sorted(known | listed)
        raise NotFoundError(f"{NAME}: unknown region {region!r}{did_you_mean(region, choices)}")

    def instance_type_names(self) -> list[str]:
        """Every machine type the price catalog (any region) or, online, the Compute API (any
        zone: one listing of everything, kept) knows."""
        names = {r.instance_type for r in self.prices.rows}
        if self.clients is not None:
            names |= {mt.name for _, mt in self._listing(())}
        return sorted(names)

    def check_instance_type(self, name: str, region: str | None = None) -> str:
        """``name`` if the price catalog or the Compute API knows it, else NotFoundError with
        "did you mean". A priced name needs no call; else the API is asked for that name, and
        only when it does not list it for everything (the error path). A machine type the
        catalog does not price in ``region`` passes: it is never offered there, as before."""
        if any(r.instance_type == name for r in self.prices.rows):
            return name
        asked = self.clients is not None and _MACHINE_TYPE.match(name)
        if asked and any(mt.name == name for _, mt in self._listing((name,))):
            return name
        names = self.instance_type_names()
        if name not in names:
            raise NotFoundError(f"{NAME}: unknown machine type {name!r}{did_you_mean(name, names)}")
        return name

    def _machine_types(
        self, region: str | None, names: Sequence[str] | None
    ) -> list[tuple[str, Any]]:
        """(zone, MachineType) pairs inside the configured regions/zones.

        Without a list of names only the machine types the price catalog knows are asked for
        (a project-wide listing is tens of thousands of entries, and unpriced types are never
        offered). One listing per set of names is kept for the catalog's life.
        """
        if self.clients is None:
            return []
        names = sorted(set(names or {r.instance_type for r in self.prices.rows}))
        bad = [n for n in names if not _MACHINE_TYPE.match(n)]
        if bad:
            raise SpecError(f"providers[].instance_types: {bad} are not GCP machine type names")
        pairs = self._listing(tuple(names))
        regions = {region} if region else set(self.settings.regions)
        zones = set(self.settings.zones)
        return [
            (z, mt)
            for z, mt in pairs
            if (not regions or zone_region(z) in regions)
            and (not zones or z in zones)
            and (not names or mt.name in names)
        ]

    def _listing(self, names: tuple[str, ...]) -> list[tuple[str, Any]]:
        """(zone, MachineType) of the project's zones for ``names`` (every machine type when
        empty; names already checked), one ``aggregated_list`` per set of names, kept."""
        assert self.clients is not None
        if names not in self._listed:
            request: dict[str, Any] = {"project": self.settings.project}
            if names:
                request["filter"] = " OR ".join(f'(name = "{n}")' for n in names)
            try:
                pager = self.clients.get("MachineTypesClient").aggregated_list(
                    request=request, **self.clients.bounds
                )
                pairs: list[tuple[str, Any]] = []
                for scope, scoped in pager:
                    zone = scope.split("/", 1)[-1]
                    if scope.startswith("zones/"):
                        self._zones.add(zone)
                    pairs += [(zone, mt) for mt in scoped.machine_types]
            except Exception as e:
                raise _wrap(e, "gcp: listing machine types failed") from None
            self._listed[names] = pairs
        return self._listed[names]

    def instance_types(self, region: str | None = None) -> list[InstanceType]:
        names = list(self.settings.instance_types) or None
        out: dict[tuple[str, str], InstanceType] = {}
        if self.clients is None:
            for r in self.prices.for_region(region):
                if (names and r.instance_type not in names) or (
                    self.settings.regions and r.region not in self.settings.regions
                ):
                    continue
                out[(r.instance_type, r.region)] = InstanceType(
                    NAME,
                    r.region,
                    r.instance_type,
                    r.vcpus,
                    r.memory_gb,
                    r.gpus,
                    r.gpu_name,
                    on_demand_price_per_hour=r.on_demand,
                )
            return sorted(out.values(), key=lambda t: (t.region, t.name))
        for zone, mt in self._machine_types(region, names):
            reg = zone_region(zone)
            gpus, gpu_name = _gpus(mt)
            row = _priced(self.prices.lookup(mt.name, reg, zone), gpus, zone)
            out.setdefault(
                (mt.name, reg),
                InstanceType(
                    NAME,
                    reg,
                    mt.name,
                    int(mt.guest_cpus),
                    round(mt.memory_mb / 1024, 2),
                    gpus,
                    gpu_name,
                    "arm64" if mt.architecture == "ARM64" else "x86_64",
                    on_demand_price_per_hour=row.on_demand if row else None,
                ),
            )
        return sorted(out.values(), key=lambda t: (t.region, t.name))

    def offers(
        self,
        region: str | None = None,
        instance_types: Sequence[str] | None = None,
        market: Market | None = None,
    ) -> list[Offer]:
        names = list(instance_types or self.settings.instance_types) or None
        markets = [market] if market else list(self.settings.markets)
        hardware: list[
            tuple[str, str, int, float, int, str]
        ] = []  # zone, type, cpu, mem, gpu, name
        if self.clients is None:
            for t in self.instance_types(region):
                if names and t.name not in names:
                    continue
                zones = [z for z in self.settings.zones if zone_region(z) == t.region]
                if not zones:
                    raise SpecError(
                        "providers[].zones: offline gcp offers need the zones to use",
                        hint="list zones (e.g. us-central1-a) or drop options.offline",
                    )
                hardware += [(z, t.name, t.vcpus, t.memory_gb, t.gpus, t.gpu_name) for z in zones]
        else:
            for zone, mt in self._machine_types(region, names):
                g, gname = _gpus(mt)
                hardware.append(
                    (zone, mt.name, int(mt.guest_cpus), round(mt.memory_mb / 1024, 2), g, gname)
                )
        out = []
        for zone, itype, cpus, mem, gpus, gpu_name in hardware:
            row = _priced(self.prices.lookup(itype, zone_region(zone), zone), gpus, zone)
            if row is None:
                continue  # unpriced: never offer a wrong price
            for m in markets:
                price = row.price(m)
                if price is None:
                    continue
                out.append(
                    Offer(
                        NAME,
                        zone_region(zone),
                        zone,
                        itype,
                        m,
                        price,
                        row.on_demand,
                        cpus,
                        mem,
                        gpus,
                        gpu_name or row.gpu_name,
                    )
                )
        return sorted(out, key=lambda o: (o.price_per_hour, o.key))

    def price_history(
        self, region: str, instance_type: str, start: float, end: float
    ) -> list[PricePoint]:
        """The catalog's dated point(s): GCP publishes no spot price history.

        Returns the price in effect over ``[start, end]`` stamped with its ``as_of`` date (zone =
        the region: list prices are per region), for both markets.
        """
        row = self.prices.lookup(instance_type, region)
        if row is None or row.as_of_epoch > end:
            return []
        return [
            PricePoint(NAME, region, instance_type, m, p, row.as_of_epoch)
            for m in (Market.SPOT, Market.ON_DEMAND)
            if (p := row.price(m)) is not None
        ]


def _priced(row: PriceRow | None, gpus: int, zone: str) -> PriceRow | None:
    """``row`` if it prices the ``gpus`` the listing gives the machine type, else None: a row
    that counts fewer GPUs (a refreshed catalog's host-only price, a hand-written row) would
    offer and bill the VM below its price."""
    if row is None or row.gpus >= gpus:
        return row
    log.debug(
        "gcp: %s in %s not offered: the listing gives it %d GPUs, its price row (%s) counts %d",
        row.instance_type,
        zone,
        gpus,
        row.source,
        row.gpus,
    )
    return None


def _gpus(mt: Any) -> tuple[int, str]:
    count, name = 0, ""
    for acc in mt.accelerators:
        count += int(acc.guest_accelerator_count)
        name = _GPU_NAMES.get(acc.guest_accelerator_type, acc.guest_accelerator_type)
    return count, name


def _wrap(e: Exception, prefix: str) -> ProviderError:
    if isinstance(e, ProviderError):
        return e
    return api_error(prefix, e)
