"""The GCP Catalog: hardware from ``MachineTypesClient.aggregated_list``, prices from the catalog.

With ``options.offline: true`` (no clients) the hardware comes from the price CSV and zones
from ``providers[].zones``. Machine types without a price are never offered (a wrong price is
worse than none). GCP has no spot price history API: :meth:`GcpCatalog.price_history` returns
the catalog's dated point.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from spotwise.errors import ProviderError, SpecError
from spotwise.providers.base import InstanceType, Market, Offer, PricePoint
from spotwise.providers.gcp import NAME, GcpClients, GcpSettings, api_error, zone_region
from spotwise.providers.gcp_prices import PriceTable

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

    def regions(self) -> list[str]:
        return list(self.settings.regions) or self.prices.regions()

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
        key = tuple(names)
        if key not in self._listed:
            request: dict[str, Any] = {"project": self.settings.project}
            if names:
                request["filter"] = " OR ".join(f'(name = "{n}")' for n in names)
            try:
                pager = self.clients.get("MachineTypesClient").aggregated_list(request=request)
                self._listed[key] = [
                    (scope.split("/", 1)[-1], mt)
                    for scope, scoped in pager
                    for mt in scoped.machine_types
                ]
            except Exception as e:
                raise _wrap(e, "gcp: listing machine types failed") from None
        pairs = self._listed[key]
        regions = {region} if region else set(self.settings.regions)
        zones = set(self.settings.zones)
        return [
            (z, mt)
            for z, mt in pairs
            if (not regions or zone_region(z) in regions)
            and (not zones or z in zones)
            and (not names or mt.name in names)
        ]

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
            row = self.prices.lookup(mt.name, reg, zone)
            gpus, gpu_name = _gpus(mt)
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
            row = self.prices.lookup(itype, zone_region(zone), zone)
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
