"""The AWS catalog: what EC2 sells in a region, and for how much.

* Hardware from ``describe_instance_types`` (vCPUs, memory, GPUs, architecture), paginated.
* On-demand prices from the Pricing API (``get_products``, Linux, shared tenancy), and when
  that cannot be reached (no network, no ``pricing:GetProducts`` permission, moto) from the
  shipped offline catalog — ec2instances.info's 2017-11-12 snapshot (MIT, see
  ``spotwise/data/ec2-on-demand-2017/SOURCE.md``). :meth:`AwsCatalog.on_demand_source` says
  which one priced a region (``pricing-api`` or ``offline-2017``): old prices are never passed
  off as today's. Provider option ``pricing`` = ``auto`` (default) | ``api`` | ``offline``.
* Spot prices per availability zone from ``describe_spot_price_history`` (paginated,
  ``Linux/UNIX``): the price in effect now, and the history over a window.

On-demand offers are per zone (EC2's offerings and spot prices say which); with no AWS credentials
found, on-demand offers alone are one per type, zone = the region (:meth:`~AwsCatalog.zones_known`).

On-demand prices unknown for a type leave ``Offer.on_demand_price_per_hour`` at ``0.0``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from spotwise.errors import NotFoundError, ProviderError, ProviderUnavailable, did_you_mean
from spotwise.providers import aws
from spotwise.providers.aws_listings import RegionListings
from spotwise.providers.aws_offline import (
    API_SOURCE,
    OFFLINE_SOURCE,
    Hardware,
    hardware_of,
    offline_hardware,
    offline_prices,
    parse_price_list,
)
from spotwise.providers.base import InstanceType, Market, Offer, PricePoint
from spotwise.providers.registry import ProviderConfig

PRODUCT_DESCRIPTIONS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
PRICING_FILTERS = {
    "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
    "capacitystatus": "Used", "licenseModel": "No License required",
}  # fmt: skip


def _epoch(ts: Any) -> float:
    if isinstance(ts, datetime):
        return ts.timestamp()
    return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()


def zone_region(zone: str) -> str:
    """``us-east-1a`` → ``us-east-1`` (also local zones: ``us-east-1-bos-1a`` → ``us-east-1``)."""
    parts = zone.split("-")
    if len(parts) >= 3 and parts[2][:1].isdigit():
        return "-".join([*parts[:2], parts[2].rstrip("abcdefghijklmnopqrstuvwxyz")])
    return zone[:-1]


class AwsCatalog(RegionListings):
    """A :class:`~spotwise.providers.base.Catalog` over EC2 (see the module docstring)."""

    name = "aws"

    def __init__(self, config: ProviderConfig | None = None, *, clock: Any = time.time) -> None:
        self.config = config or ProviderConfig(name="aws")
        self.profile = self.config.options.get("profile") or None
        self.pricing = self.config.options.get("pricing", "auto")
        if self.pricing not in ("auto", "api", "offline"):
            raise ProviderError(
                f"aws: option pricing must be auto, api or offline, got {self.pricing!r}"
            )
        self._clock = clock
        self._hardware: dict[str, dict[str, Hardware]] = {}
        self._unknown: set[str] = set()
        self._od: dict[str, tuple[dict[str, float], str]] = {}
        self._zones: dict[str, dict[str, set[str]]] = {}
        self._zones_known: dict[str, bool] = {}
        self._clients: dict[tuple[str, str], Any] = {}
        self._failed: dict[str, BaseException] = {}  # region → the last EC2 call's error

    # ---- Catalog -----------------------------------------------------------------------
    def regions(self) -> list[str]:
        return list(self.config.regions) or list(aws.known_regions())

    def instance_types(self, region: str | None = None) -> list[InstanceType]:
        region = self._region(region)
        hardware = self._dit(region)
        if hardware is None:  # EC2 unreachable: the offline catalog's types of this region
            offline = offline_hardware()
            hardware = {t: offline[t] for t in offline_prices(region) if t in offline}
        od = self.on_demand_prices(region)
        return [
            InstanceType(
                provider="aws",
                region=region,
                name=t,
                vcpus=h.vcpus,
                memory_gb=h.memory_gb,
                gpus=h.gpus,
                gpu_name=h.gpu_name,
                architecture=h.architecture,
                on_demand_price_per_hour=od.get(t),
            )
            for t, h in sorted(hardware.items())
        ]

    def offers(
        self,
        region: str | None = None,
        instance_types: Sequence[str] | None = None,
        market: Market | None = None,
    ) -> list[Offer]:
        region = self._region(region)
        wanted = list(instance_types or self.config.instance_types or ())
        for t in wanted:
            self.check_instance_type(t, region)
        od = self.on_demand_prices(region)
        zones_ok = set(self.config.zones)
        out: list[Offer] = []

        def offer(zone: str, itype: str, m: Market, price: float) -> Offer:
            h = hardware.get(itype) or Hardware(0, 0.0, 0, "", "")
            return Offer(
                provider="aws",
                region=region,
                zone=zone,
                instance_type=itype,
                market=m,
                price_per_hour=price,
                on_demand_price_per_hour=od.get(itype, 0.0),
                vcpus=h.vcpus,
                memory_gb=h.memory_gb,
                gpus=h.gpus,
                gpu_name=h.gpu_name,
            )

        try:
            spot = self.spot_prices(region, wanted or None)
            self._zones_known[region] = True
        except NoCredentials:
            if market is not Market.ON_DEMAND:
                raise
            spot, self._zones_known[region] = [], False  # no zones: one offer per type
        types = set(wanted) | {p.instance_type for p in spot}
        if market in (None, Market.ON_DEMAND):
            types |= set(wanted or od)
        hardware = self._hardware_of_types(region, types)
        spot_zones: dict[str, set[str]] = {}
        for p in spot:
            spot_zones.setdefault(p.instance_type, set()).add(p.zone)
        if market in (None, Market.SPOT):
            out += [offer(p.zone, p.instance_type, Market.SPOT, p.price_per_hour) for p in spot]
        if market in (None, Market.ON_DEMAND):
            known = self._zones_known[region]
            priced = [t for t in sorted(wanted or od) if t in od]
            offered = self._offerings(region, priced) if known else {}
            for itype in priced:
                zones = offered.get(itype, set()) | spot_zones.get(itype, set())
                for zone in sorted(zones) if known else [region]:
                    out.append(offer(zone, itype, Market.ON_DEMAND, od[itype]))
        return [o for o in out if not zones_ok or o.zone in zones_ok]

    def price_history(
        self, region: str, instance_type: str, start: float, end: float
    ) -> list[PricePoint]:
        region = self._region(region)
        rows = self._spot_history(region, [instance_type], start, end)
        return sorted(rows, key=lambda p: (p.timestamp, p.zone))

    def zones_known(self, region: str | None = None) -> bool:
        """False when the last :meth:`offers` of the region found no AWS credentials to read
        which zones sell each type: its on-demand offers are one per type, zone = the region."""
        return self._zones_known.get(self._region(region), True)

    # ---- prices ------------------------------------------------------------------------
    def spot_prices(
        self, region: str | None = None, instance_types: Sequence[str] | None = None
    ) -> list[PricePoint]:
        """The spot price in effect now, one per (zone, instance type)."""
        region = self._region(region)
        now = self._clock()
        latest: dict[tuple[str, str], PricePoint] = {}
        for p in self._spot_history(region, instance_types, now, None):
            key = (p.zone, p.instance_type)
            if key not in latest or p.timestamp > latest[key].timestamp:
                latest[key] = p
        return sorted(latest.values(), key=lambda p: (p.price_per_hour, p.zone, p.instance_type))

    def on_demand_prices(self, region: str | None = None) -> dict[str, float]:
        """Instance type → on-demand USD/h (Pricing API, else the offline 2017 catalog)."""
        region = self._region(region)
        if region not in self._od:
            prices, source = None, OFFLINE_SOURCE
            if self.pricing in ("auto", "api"):
                prices = self._pricing_api(region)
                source = API_SOURCE
            if prices is None:
                prices, source = offline_prices(region), OFFLINE_SOURCE
            self._od[region] = (prices, source)
        return self._od[region][0]

    def on_demand_source(self, region: str | None = None) -> str:
        """``pricing-api`` or ``offline-2017``: where this region's on-demand prices came from."""
        region = self._region(region)
        self.on_demand_prices(region)
        return self._od[region][1]

    def instance_type_names(self, region: str | None = None) -> list[str]:
        """Every instance type name EC2 offers in the region, plus the offline catalog's."""
        region = self._region(region)
        names = set(self._offered_names(region) or ()) | set(offline_hardware())
        return sorted(names)

    def check_instance_type(self, name: str, region: str | None = None) -> str:
        """``name`` if EC2 (or the offline catalog) knows it, else NotFoundError with "did
        you mean" (the region's names are listed only on that error path)."""
        region = self._region(region)
        if name in self._hardware_of_types(region, [name]):
            return name
        if self._offered_names(region) is None:  # only the 2017 offline list: cannot tell
            if _no_credentials(self._failed.get(region)):  # the cause first, and its fix
                raise ProviderUnavailable(
                    "aws: no AWS credentials found: configure them through the standard chain "
                    "(AWS_PROFILE, `aws configure`, SSO or an instance role); without them "
                    f"EC2 cannot check instance type {name!r} in {region}, which the offline "
                    "catalog (2017) does not list",
                    hint="`spotwise check` then says which credentials AWS finds",
                )
            raise ProviderUnavailable(
                f"aws: cannot check instance type {name!r} in {region}: EC2 cannot be reached "
                "and the offline catalog (2017) does not list it",
                hint="configure AWS credentials (see `spotwise check`)",
            )
        names = self.instance_type_names(region)
        if name not in names:
            raise NotFoundError(f"aws: unknown instance type {name!r}{did_you_mean(name, names)}")
        return name

    # ---- AWS calls ---------------------------------------------------------------------
    def _client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = aws.client(service, region, profile=self.profile)
        return self._clients[key]

    def _region(self, region: str | None) -> str:
        return aws.check_region(region or aws.default_region(self.config))

    def _hw(self, region: str) -> dict[str, Hardware]:
        return self._hardware.setdefault(region, {})

    def _hardware_of_types(self, region: str, types: Iterable[str]) -> dict[str, Hardware]:
        """Hardware of some instance types: targeted ``describe_instance_types`` calls (100
        names each), names EC2 does not know dropped; the offline catalog fills gaps."""
        known = self._hw(region)
        missing = sorted({t for t in types if t not in known and t not in self._unknown})
        for i in range(0, len(missing), 100):
            chunk = missing[i : i + 100]
            while chunk:
                try:
                    resp = self._client("ec2", region).describe_instance_types(InstanceTypes=chunk)
                except Exception as e:
                    if not aws.is_sdk_error(e):
                        raise
                    self._failed[region] = e  # why EC2 did not answer, for the error path
                    bad = _invalid_types(e) if aws.error_code(e) == "InvalidInstanceType" else set()
                    if not bad & set(chunk):
                        break  # EC2 unreachable or an unexpected answer: use what we have
                    self._unknown.update(bad)
                    chunk = [t for t in chunk if t not in bad]
                    continue
                self._failed.pop(region, None)
                for it in resp.get("InstanceTypes", []):
                    known[it["InstanceType"]] = hardware_of(it)
                break
        return {**offline_hardware(), **known}

    def _offerings(self, region: str, types: Iterable[str]) -> dict[str, set[str]]:
        """Instance type → availability zones that offer it (empty when unknown)."""
        known = self._zones.setdefault(region, {})
        missing = sorted({t for t in types if t not in known})
        try:
            ec2 = self._client("ec2", region)
            for i in range(0, len(missing), 100):
                chunk = missing[i : i + 100]
                for t in chunk:
                    known[t] = set()
                pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
                    LocationType="availability-zone",
                    Filters=[{"Name": "instance-type", "Values": chunk}],
                )
                for page in pages:
                    for o in page.get("InstanceTypeOfferings", []):
                        known.setdefault(o["InstanceType"], set()).add(o["Location"])
        except Exception as e:
            if not aws.is_sdk_error(e):
                raise
        return known

    def _pricing_api(self, region: str) -> dict[str, float] | None:
        terms = {**PRICING_FILTERS, "regionCode": region}
        filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in terms.items()]
        items: list[str] = []
        try:
            pricing = self._client("pricing", aws.PRICING_REGION)
            for page in pricing.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"
            ):
                items += page.get("PriceList", [])
        except Exception as e:
            if not aws.is_sdk_error(e):
                raise
            if self.pricing == "api":
                raise aws.provider_error(e, "reading on-demand prices (Pricing API)") from None
            return None
        return parse_price_list(items)

    def _spot_history(
        self, region: str, instance_types: Sequence[str] | None, start: float, end: float | None
    ) -> list[PricePoint]:
        args: dict[str, Any] = {
            "StartTime": datetime.fromtimestamp(start, UTC),
            "ProductDescriptions": ["Linux/UNIX"],
        }
        if end is not None:
            args["EndTime"] = datetime.fromtimestamp(end, UTC)
        if instance_types:
            args["InstanceTypes"] = list(instance_types)
        calls = [
            {**args, "AvailabilityZone": z} for z in self.config.zones if zone_region(z) == region
        ] or [args]
        out: list[PricePoint] = []
        try:
            pages = self._client("ec2", region).get_paginator("describe_spot_price_history")
            for call in calls:
                for page in pages.paginate(**call):
                    for row in page.get("SpotPriceHistory", []):
                        if row.get("ProductDescription") not in PRODUCT_DESCRIPTIONS:
                            continue
                        price = float(row["SpotPrice"])
                        if price <= 0:
                            continue
                        out.append(
                            PricePoint(
                                "aws",
                                row["AvailabilityZone"],
                                row["InstanceType"],
                                Market.SPOT,
                                price,
                                _epoch(row["Timestamp"]),
                            )
                        )
        except Exception as e:
            if not aws.is_sdk_error(e):
                raise
            err = aws.provider_error(e, f"reading spot prices in {region}")
            if _no_credentials(e):
                raise NoCredentials(err.message, hint=err.hint) from None
            raise err from None
        return out


class NoCredentials(ProviderUnavailable):
    """No AWS credentials were found (credentials AWS rejected are a ProviderUnavailable)."""


def _no_credentials(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    return isinstance(exc, NoCredentialsError | PartialCredentialsError)


def _invalid_types(exc: BaseException) -> set[str]:
    """Names in "The following supplied instance types do not exist: [a, b]"."""
    message = str(getattr(exc, "response", {}).get("Error", {}).get("Message"))
    m = re.search(r"\[([^\]]*)\]", message)
    return {n.strip() for n in m.group(1).split(",") if n.strip()} if m else set()
