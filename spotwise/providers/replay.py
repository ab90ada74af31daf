"""The replay market: offers, spot prices and revocations served from a real spot trace.

A :class:`ReplayMarket` is a :class:`~spotwise.providers.base.Catalog` over a
:class:`~spotwise.traces.TraceSet`: each zone of the trace is one spot offer (price and
availability at every tick) and one on-demand offer (the trace's on-demand price, always
available). Time is the *market clock*: epoch seconds inside the trace. A :class:`MarketClock`
maps wall time onto it with a speed-up (market seconds per wall second), so a two-minute run
crosses hours of real market; the simulator drives the same market with a virtual clock.

A spot instance launched in zone z at time t0 is revoked at the first tick after t0 at which
the trace says spot is no longer obtainable in z. A zone whose revocation is ``reclaim_lead_s``
or less ahead (the provider's notice lead: it refuses launches into capacity it is reclaiming,
as the simulator does) is offered as unavailable; the local provider sets it for its market.
The market ends at :attr:`ReplayMarket.end_time` (the last tick plus one gap): past it the
trace says nothing, and every offer is unavailable.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from spotwise.errors import NotFoundError, SpecError, did_you_mean
from spotwise.providers.base import InstanceType, Market, Offer, PricePoint
from spotwise.traces import TraceSet, load_traces

if TYPE_CHECKING:
    import numpy as np

_DATA = Path(__file__).resolve().parent.parent / "data"
BUILTIN_TRACES = {"skynomad-v100-2023": _DATA / "skynomad-v100-2023"}

# Hardware of the instance types in the shipped traces (AWS documentation).
HARDWARE = {
    "p3.2xlarge": dict(vcpus=8, memory_gb=61.0, gpus=1, gpu_name="V100"),
    "v100_1": dict(vcpus=8, memory_gb=61.0, gpus=1, gpu_name="V100"),
    "k80_1": dict(vcpus=4, memory_gb=61.0, gpus=1, gpu_name="K80"),
}
CBL_SPOT_PRICE = 0.9731  # Can't Be Late paper's p3.2xlarge spot price (traces carry none)
CBL_ON_DEMAND_PRICE = 3.06


def resolve_trace(ref: str, base: Path | None = None, field: str = "replay.trace") -> Path:
    """``builtin:<name>`` → the shipped copy; anything else is a path (relative to ``base``).
    Errors start with ``field`` (a job spec's is ``spec field 'providers.0.replay.trace'``)."""
    if ref.startswith("builtin:"):
        name = ref.split(":", 1)[1]
        if name not in BUILTIN_TRACES:
            raise SpecError(
                f"{field}: unknown builtin trace {name!r}"
                f"{did_you_mean(name, list(BUILTIN_TRACES))}; "
                f"valid: {', '.join('builtin:' + n for n in BUILTIN_TRACES)}"
            )
        return BUILTIN_TRACES[name]
    p = Path(ref).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    if not p.exists():
        raise SpecError(
            f"{field}: {p} does not exist; use builtin:skynomad-v100-2023 or a trace path"
        )
    return p


@cache
def _load_cached(path: str) -> TraceSet:
    return load_traces(path)


def load_market_traces(ref: str, base: Path | None = None, field: str = "replay.trace") -> TraceSet:
    """The trace ``ref`` names (cached); a missing or unreadable one is a SpecError naming
    ``field``."""
    path = str(resolve_trace(ref, base, field))
    try:
        return _load_cached(path)
    except SpecError as e:  # load_traces names its --traces option: name the spec's field
        raise SpecError(field + e.message.removeprefix("--traces"), hint=e.hint) from None


def check_replay_filters(
    trace: str,
    base: Path | None,
    regions: Sequence[str],
    zones: Sequence[str],
    i: int = 0,
    *,
    instance_types: Sequence[str] = (),
    start_h: float = 0.0,
) -> None:
    """Refuse (:class:`SpecError`, exit 2) what the local provider ``i`` names and its
    replayed ``trace`` does not have: the trace itself, a ``replay.start`` past its end, a
    region, zone or instance type (with the closest name the trace has), or regions and zones
    that share no zone. Each names the spec field (``providers.0.zones.1``). Called when the
    spec loads, before anything is recorded, and when the market opens; the trace is read
    only when something is to be checked against it (then cached)."""
    at = f"spec field 'providers.{i}"
    filters = bool(regions or zones or instance_types or start_h)
    if filters or trace.startswith("builtin:"):  # a builtin's name costs no file
        resolve_trace(trace, base, f"{at}.replay.trace'")
    if not filters:
        return  # nothing to check against it: a missing file is refused when the market opens
    traces = load_market_traces(trace, base, f"{at}.replay.trace'")
    first, end = float(traces.times[0]), float(traces.times[-1]) + traces.gap_seconds
    if first + start_h * 3600.0 >= end:
        hours = math.floor((end - first) / 360.0) / 10  # rounded down: "below" it is inside
        raise SpecError(
            f"{at}.replay.start': {start_h} h is past the trace end ({hours} h); set it "
            f"below {hours} (hours into the trace)"
        )
    known = {
        "regions": sorted({zone_region(z) for z in traces.zones}),
        "zones": traces.zones,
        "instance_types": [_instance_type_name(traces.instance_type)],
    }
    for field, names in (
        ("regions", regions),
        ("zones", zones),
        ("instance_types", instance_types),
    ):
        what = "instance type" if field == "instance_types" else field[:-1]
        for j, name in enumerate(names):
            if name not in known[field]:
                raise SpecError(
                    f"{at}.{field}.{j}': {what} {name!r} is not in the replayed "
                    f"trace{did_you_mean(name, known[field])}; valid: {', '.join(known[field])}"
                )
    if regions and zones and not any(zone_region(z) in regions for z in zones):
        raise SpecError(
            f"{at}.zones': none of {', '.join(zones)} is in its regions ({', '.join(regions)}), "
            "so no offer matches; name zones of those regions, or drop one of the two"
        )


def zone_region(zone: str) -> str:
    """AWS zone → region (``us-east-1a`` → ``us-east-1``); other names pass through."""
    return zone[:-1] if zone and zone[-1].isalpha() and zone[-2:-1].isdigit() else zone


class MarketClock:
    """Market time = ``start + speedup × (wall − wall0)``."""

    def __init__(self, start: float, speedup: float, wall: Callable[[], float] = time.monotonic):
        if speedup <= 0:
            raise ValueError(f"speedup must be > 0, got {speedup=}")
        self.start = start
        self.speedup = speedup
        self._wall = wall
        self._wall0 = wall()

    def now(self) -> float:
        return self.start + self.speedup * (self._wall() - self._wall0)

    def restart(self) -> None:
        """Market time is ``start`` again from now (the job starts once its market is open
        and checked, not when the market was built)."""
        self._wall0 = self._wall()

    def wall_seconds(self, market_seconds: float) -> float:
        return market_seconds / self.speedup


class ReplayMarket:
    """A Catalog over a real trace; also answers availability and revocation questions."""

    def __init__(
        self,
        traces: TraceSet,
        *,
        provider: str = "aws",
        spot_price: float | None = None,
        on_demand_price: float | None = None,
        reclaim_lead_s: float = 0.0,
    ) -> None:
        import numpy as np

        self.traces = traces
        # a spot zone revoked this close ahead is offered as unavailable (the notice lead)
        self.reclaim_lead_s = reclaim_lead_s
        self.provider = provider
        self.name = "replay"
        self.instance_type = _instance_type_name(traces.instance_type)
        od = on_demand_price if on_demand_price is not None else traces.on_demand_price
        self.on_demand_price = float(od) if od == od else CBL_ON_DEMAND_PRICE
        price = traces.price.copy()
        if spot_price is not None or np.isnan(price).all():
            price[:] = spot_price if spot_price is not None else CBL_SPOT_PRICE
        self._price = price
        self._zindex = {z: i for i, z in enumerate(traces.zones)}

    @property
    def spot_prices(self) -> np.ndarray:
        """(zones × ticks) spot price in USD/h that this market charges: the trace's, or the
        override (``spot_price``, or the Can't Be Late constant for traces without prices).
        A read-only view: the market's prices do not change under it."""
        view = self._price.view()
        view.flags.writeable = False
        return view

    # ---- Catalog -----------------------------------------------------------------------
    def regions(self) -> list[str]:
        return sorted({zone_region(z) for z in self.traces.zones})

    def instance_types(self, region: str | None = None) -> list[InstanceType]:
        hw = HARDWARE.get(self.instance_type, HARDWARE.get(self.traces.instance_type, {}))
        return [
            InstanceType(
                provider=self.provider,
                region=r,
                name=self.instance_type,
                on_demand_price_per_hour=self.on_demand_price,
                **hw,  # type: ignore[arg-type]
            )
            for r in self.regions()
            if region is None or r == region
        ]

    def offers(
        self,
        region: str | None = None,
        instance_types: Sequence[str] | None = None,
        market: Market | None = None,
        at: float | None = None,
        zones: Sequence[str] | None = None,
    ) -> list[Offer]:
        if region is not None and region not in self.regions():
            raise NotFoundError(
                f"region {region!r} is not in the replayed trace"
                f"{did_you_mean(region, self.regions())}; "
                f"valid: {', '.join(self.regions())}"
            )
        if instance_types and self.instance_type not in instance_types:
            return []
        t = float(self.traces.times[0] if at is None else at)
        i = self.traces.tick_at(t)
        ended = t >= self.end_time  # no data past the trace: nothing is offered as obtainable
        hw = HARDWARE.get(self.instance_type, {})
        out: list[Offer] = []
        for z in self.traces.zones:
            if region is not None and zone_region(z) != region:
                continue
            if zones and z not in zones:
                continue
            zi = self._zindex[z]
            for m in (Market.SPOT, Market.ON_DEMAND):
                if market is not None and m is not market:
                    continue
                spot = m is Market.SPOT
                up = not ended and (not spot or self.obtainable(z, t))
                out.append(
                    Offer(
                        provider=self.provider,
                        region=zone_region(z),
                        zone=z,
                        instance_type=self.instance_type,
                        market=m,
                        price_per_hour=float(self._price[zi, i]) if spot else self.on_demand_price,
                        on_demand_price_per_hour=self.on_demand_price,
                        available=up,
                        **hw,  # type: ignore[arg-type]
                    )
                )
        return out

    def price_history(
        self, region: str, instance_type: str, start: float, end: float
    ) -> list[PricePoint]:
        i0, i1 = self.traces.tick_at(start), self.traces.tick_at(end)
        return [
            PricePoint(
                self.provider,
                z,
                self.instance_type,
                Market.SPOT,
                float(self._price[self._zindex[z], i]),
                float(self.traces.times[i]),
            )
            for z in self.traces.zones
            if zone_region(z) == region and instance_type == self.instance_type
            for i in range(i0, i1 + 1)
        ]

    # ---- market questions --------------------------------------------------------------
    @property
    def start_time(self) -> float:
        return float(self.traces.times[0])

    @property
    def end_time(self) -> float:
        """Where the market ends (the last tick plus one gap): the catalog's optional market
        end (:func:`~spotwise.providers.base.market_end`), at which a job stops."""
        return float(self.traces.times[-1]) + self.traces.gap_seconds

    def zone_index(self, zone: str) -> int:
        try:
            return self._zindex[zone]
        except KeyError:
            raise NotFoundError(
                f"zone {zone!r} is not in the trace{did_you_mean(zone, list(self._zindex))}"
            ) from None

    def available(self, zone: str, t: float) -> bool:
        return bool(self.traces.available[self.zone_index(zone), self.traces.tick_at(t)])

    def obtainable(self, zone: str, t: float, lead_s: float | None = None) -> bool:
        """Whether a spot launch in ``zone`` at ``t`` is accepted: spot is available at ``t``
        and the zone is not revoked within ``lead_s`` (default :attr:`reclaim_lead_s`) after
        it: the rule of ``simulate``'s offers (:mod:`spotwise.planner.sim_view`)."""
        lead = self.reclaim_lead_s if lead_s is None else lead_s
        zi, i = self.zone_index(zone), self.traces.tick_at(t)
        row, times = self.traces.available[zi], self.traces.times
        if not row[i]:
            return False
        j = i + 1  # the first unavailable tick after i is the revocation: is one that close?
        while j < len(times) and float(times[j]) - t <= lead:
            if not row[j]:
                return False
            j += 1
        return True

    def refusal(self, zone: str, spot: bool, t: float, lead_s: float) -> str | None:
        """Why a launch in ``zone`` at ``t`` is refused, or None: past the trace's end there is
        no market; a spot one where spot is not available or the zone is revoked within
        ``lead_s`` (the provider's notice lead)."""
        if t >= self.end_time:
            hours = (self.end_time - self.start_time) / 3600.0
            return f"the replayed trace ended {hours:g} h into it: no market after its end"
        if spot and not self.available(zone, t):
            return f"no spot capacity in {zone} now"
        gone = self.next_revocation(zone, t) if spot else None
        if gone is not None and gone - t <= lead_s:
            return (
                f"no spot capacity in {zone} now: it is reclaimed {gone - t:.0f} s later, "
                f"within the {lead_s:g} s notice lead"
            )
        return None

    def spot_price(self, zone: str, t: float) -> float:
        return float(self._price[self.zone_index(zone), self.traces.tick_at(t)])

    def next_revocation(self, zone: str, t: float) -> float | None:
        """Market time at which a spot instance running in ``zone`` at ``t`` is taken: the
        first tick after ``t``'s at which spot is not obtainable there; ``t`` itself when it is
        not obtainable at ``t`` (an instance there now is being taken); None: never, in the
        trace."""
        import numpy as np

        zi, i = self.zone_index(zone), self.traces.tick_at(t)
        if not self.traces.available[zi, i]:
            return float(t)
        row = self.traces.available[zi, i + 1 :]
        gone = np.flatnonzero(~row)
        return float(self.traces.times[i + 1 + gone[0]]) if len(gone) else None

    def segments(self, offer: Offer, t0: float, t1: float) -> list[tuple[float, float]]:
        """``(seconds, price_per_hour)`` pieces of an instance life on ``offer`` over [t0, t1]."""
        if t1 <= t0:
            return []
        if offer.market is Market.ON_DEMAND:
            return [(t1 - t0, self.on_demand_price)]
        zi = self.zone_index(offer.zone)
        times = self.traces.times
        i, out, t = self.traces.tick_at(t0), [], t0
        while t < t1:
            nxt = float(times[i + 1]) if i + 1 < len(times) else t1
            end = min(max(nxt, t), t1) if nxt > t else t1
            out.append((end - t, float(self._price[zi, i])))
            t, i = end, i + 1
        return out


def _instance_type_name(raw: str) -> str:
    return "p3.2xlarge" if raw in ("v100_1", "") else raw
