"""Which of a provider's offers a job may buy: those its spec allows (regions, zones, instance
types, markets), of those a bill can price (``Offer.billable``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotwise.providers.base import Offer
    from spotwise.spec import ProviderSpec

log = logging.getLogger("spotwise.planner.backend")  # where the offers are listed


def allowed_offers(offers: list[Offer], p: ProviderSpec) -> list[Offer]:
    """The offers the spec allows, of those a bill can price (``Offer.billable``: an offer at
    $0, below or NaN is left out, said once per offer)."""
    kept = []
    for o in offers:
        if (
            (not p.regions or o.region in p.regions)
            and (not p.zones or o.zone in p.zones)
            and (not p.instance_types or o.instance_type in p.instance_types)
            and o.market.value in p.markets
        ):
            if o.billable:
                kept.append(o)
            elif o.key not in _UNPRICED:
                _UNPRICED.add(o.key)
                log.warning(
                    "%s not offered: priced %r $/h, on-demand %r $/h (a price must be above 0)",
                    o.key,
                    o.price_per_hour,
                    o.on_demand_price_per_hour,
                )
    return kept


_UNPRICED: set[str] = set()  # offers said to have no usable price (said once each)
