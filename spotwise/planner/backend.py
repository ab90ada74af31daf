"""Open the market a job trades on: the catalog, the provisioner, the clock and the bill.

For ``local`` this is the replay market on a :class:`MarketClock` with the local provisioner;
for a cloud it is the adapter's catalog and provisioner on wall-clock time, once the job's
checkpoint location is known to be one its instances can reach (and the provider's
``artifacts`` option too, when set; :func:`spotwise.providers.channel.check_reachable`).

A job naming several clouds trades on all of them at once: the union of each cloud's filtered
offers, a :class:`~spotwise.providers.multi.MultiProvisioner` routing each call to the cloud
that owns it, and one billing rule per cloud (:meth:`Backend.rule_of`): every instance life is
billed by the rule of its own offer's provider. ``local`` (whose clock is the replayed
market's) is never mixed with a cloud (refused by the spec).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotwise.errors import PredictorError, ProviderError, SpecError, check_choice
from spotwise.planner.offer_filter import allowed_offers as _filter
from spotwise.providers.base import Catalog, Market, Offer, Provisioner
from spotwise.providers.billing import BillingRule, rule_for
from spotwise.providers.channel import check_reachable
from spotwise.providers.registry import ProviderConfig
from spotwise.providers.replay import ReplayMarket
from spotwise.spec import JobSpec, ProviderSpec, ReplaySpec
from spotwise.traces import TraceSet

log = logging.getLogger(__name__)


@dataclass
class Backend:
    provider: str  # the provider's name; several clouds: their names joined by "+"
    catalog: Catalog
    provisioner: Provisioner
    rules: dict[str, BillingRule]  # offer.provider → its billing rule
    now: Callable[[], float]
    list_offers: Callable[[float], list[Offer]]
    segments: Callable[[Offer, float, float], list[tuple[float, float]]]
    close: Callable[[], None]
    speedup: float = 1.0  # market seconds per wall second
    risk: Callable[[list[Offer], float], dict[str, float]] | None = None
    info: dict[str, object] = field(default_factory=dict)
    # a replayed market's clock starts again here when the job starts (a cloud's: no-op)
    start_clock: Callable[[], None] = lambda: None

    def rule_of(self, offer: Offer) -> BillingRule:
        """The billing rule of the provider selling ``offer`` (refund window, notice lead)."""
        try:
            return self.rules[offer.provider]
        except KeyError:
            raise ProviderError(
                f"no billing rule for provider {offer.provider!r} in this job "
                f"({', '.join(self.rules)})"
            ) from None


def replay_risk(
    traces: TraceSet, start: float | None = None, forecast: str = "pretrained"
) -> Callable[[list[Offer], float], dict[str, float]] | None:
    """Per-offer revocation probability within the hour, per trace tick, from ``forecast``:
    ``pretrained``, the shipped LSTM (a replay from ``start`` inside the ticks it was fitted
    on is warned about: there its forecasts have seen the revocations they are asked about);
    ``none``, no forecast (None: every risk 0); a registered model's name, that model fitted
    now on the trace's ticks up to ``start`` (its labels look no further: no look-ahead).
    The model is asked once per tick of the trace; a p it cannot give (NaN) is refused naming
    the field and the fix: a SpecError at ``start`` (nothing recorded), later a PredictorError."""
    from spotwise.predictors.revocation import load_pretrained

    check_forecast(forecast)
    if forecast == "none":
        return None
    if forecast == "pretrained":
        model: Any = load_pretrained()
        if start is not None and (note := in_sample_note(model.trained_on, traces, start)):
            log.warning("%s", note)
    else:
        model = _fitted_before(traces, start, forecast, _FORECAST)
    cache: dict[int, dict[str, float]] = {}
    # the policies read p within the hour (OfferView.horizon_s): a model of another horizon's
    # p is carried over at its constant hazard, 1 - (1 - p) ** (1 h / its horizon)
    per_hour = HOUR_S / float(model.horizon_s)

    def risk(offers: list[Offer], t: float) -> dict[str, float]:
        tick = traces.tick_at(t)
        if tick not in cache:
            try:  # a NaN p is never read as 0.5 or 0: the job ends, failed, saying so
                p = _one_thread(model.predict_proba, traces, tick)
            except PredictorError as e:
                why = e.message.removeprefix(f"{forecast}: ")
                raise PredictorError(
                    f"{_FORECAST}: {forecast} gave no usable forecast ({why}); set it to none "
                    "(no forecast) or another model (base-rate, logistic)"
                ) from None
            cache.clear()
            cache[tick] = {
                z: float(p[i]) if per_hour == 1.0 else 1.0 - (1.0 - float(p[i])) ** per_hour
                for i, z in enumerate(traces.zones)
            }
        by_zone = cache[tick]
        return {o.key: by_zone.get(o.zone, 0.0) for o in offers if o.market is Market.SPOT}

    if start is not None:  # the start's forecast, before anything is recorded or bought
        try:
            risk([], start)
        except PredictorError as e:
            raise SpecError(e.message) from None
    return risk


def _one_thread(predict: Callable[..., Any], *args: Any) -> Any:
    """``predict(*args)`` on one torch thread when torch is loaded (the LSTM): one small forward
    pass a tick, which torch's default pool (one thread per core) made compete with the job's
    trials for the cores, slowing them, and on the replay every wall second of theirs is
    billed ``speedup`` times (review-ab: 0.3 s a call under load, 15 ms alone). The pool's
    size is put back after."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return predict(*args)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return predict(*args)
    finally:
        torch.set_num_threads(before)


_FORECAST = "spec field 'providers.0.replay.forecast'"
HOUR_S = 3600.0  # the horizon of every risk the policies read (OfferView.horizon_s)


def check_forecast(name: str) -> None:
    """An unknown ``replay.forecast`` is a SpecError listing the valid ones."""
    from spotwise.predictors.revocation import FORECAST_NAMES

    check_choice(_FORECAST, name, FORECAST_NAMES)


def _fitted_before(traces: TraceSet, start: float | None, name: str, field: str) -> Any:
    """Revocation model ``name`` fitted on the ticks of ``traces`` up to ``start`` (1 h ahead)."""
    from spotwise.predictors.revocation import get_revocation_model

    upto = traces.tick_at(start if start is not None else float(traces.times[0])) + 1
    model = get_revocation_model(name)
    try:
        model.fit(traces.slice(0, upto), HOUR_S)
    except (PredictorError, SpecError, ValueError) as e:
        raise SpecError(
            f"{field}: {name} cannot be fitted on the {upto} trace ticks before the replay's "
            f"start ({e}); set providers.0.replay.start later, or forecast: pretrained"
        ) from None
    return model


def in_sample_note(rec: dict[str, Any] | None, traces: TraceSet, start: float) -> str:
    """A warning when a replay from ``start`` reads forecasts of a model fitted on the same
    ticks (the shipped model: the first 70 % of the shipped SkyNomad trace): its placements
    there are in-sample, so the job's savings overstate what the forecast does on unseen data.
    "" for another trace, or a replay that starts after the model's last training tick."""
    from datetime import UTC, datetime

    from spotwise.predictors._provenance import locate

    if rec is None or locate(rec, traces) is None or start > float(rec["until"]):
        return ""
    until = datetime.fromtimestamp(float(rec["until"]), UTC).strftime("%Y-%m-%d %H:%M UTC")
    hours = (float(rec["until"]) - float(traces.times[0])) / 3600.0
    return (
        f"warning: the revocation forecast was fitted on this trace up to {until}, after this "
        "replay's start: its placements are in-sample and the job's savings overstate what it "
        f"does on unseen data; set providers.0.replay.start above {hours:.0f} (hours), or "
        "replay.forecast to a model fitted before the start (base-rate, logistic, lstm), for "
        "an honest measure"
    )


def open_backend(
    spec: JobSpec, base_dir: Path, run_dir: Path, *, forecast: bool = False
) -> Backend:
    """The job's market; ``forecast`` attaches the revocation model (policies that use p)."""
    p = spec.providers[0]
    if p.name == "local":
        if len(spec.providers) != 1:  # the spec refuses it too; never trade on two clocks
            raise SpecError(_MIXED_LOCAL)
        check_forecast((p.replay or ReplaySpec()).forecast)  # a typo: refused, used or not
        backend = _local(p, p.replay or ReplaySpec(), base_dir, run_dir)
        if forecast:
            assert isinstance(backend.catalog, ReplayMarket)
            r = p.replay or ReplaySpec()
            backend.risk = replay_risk(backend.catalog.traces, backend.now(), r.forecast)
        return backend
    # A cloud trial checkpoints to, and reports through, folders its instance can reach (see
    # spotwise.providers.channel): a checkpoint on the instance's own disk goes with it (a
    # resume would restart from 0), and without a channel the orchestrator would take every
    # finished trial for a lost one. Refuse before anything is bought or written.
    for i, q in enumerate(spec.providers):
        if q.name == "local":
            raise SpecError(_MIXED_LOCAL)
        check_reachable(q.name, q.options, spec.checkpoint.location, i)
    parts = [_cloud(q) for q in spec.providers]
    if forecast:
        clouds = ", ".join(q.name for q in spec.providers)
        log.warning(
            "warning: this policy weighs each spot offer by a revocation forecast, which "
            "spotwise has only for the replayed market: on %s every spot offer's risk is "
            "taken as 0, so offers are ranked by their price per step alone",
            clouds,
        )
    return parts[0] if len(parts) == 1 else _several(parts)


_MIXED_LOCAL = (
    "spec field 'providers': local (the replayed market, on its own clock) cannot be mixed "
    "with a cloud; name only clouds, or run the local job on its own"
)


def _local(p: ProviderSpec, r: ReplaySpec, base_dir: Path, run_dir: Path) -> Backend:
    from spotwise.providers.local import LocalProvisioner
    from spotwise.providers.replay import MarketClock, check_replay_filters, load_market_traces

    # the trace, a start past its end, an unknown region, zone or instance type: a SpecError
    # naming the field (load_spec checks it first, with the spec's path; a spec parsed by
    # other means, e.g. a resumed job's, is checked here)
    check_replay_filters(
        r.trace, base_dir, p.regions, p.zones, instance_types=p.instance_types, start_h=r.start
    )
    traces = load_market_traces(r.trace, base_dir, "spec field 'providers.0.replay.trace'")
    market = ReplayMarket(traces, provider=r.billing)
    start = market.start_time + r.start * 3600.0
    clock = MarketClock(start, r.speedup)
    rule = rule_for(r.billing)
    prov = LocalProvisioner(
        market,
        clock,
        notice_lead_s=rule.notice_lead_s,
        notice_floor_wall_s=r.notice_floor_s,
        logs_dir=run_dir / "logs",
    )
    listed = market.offers(at=start)
    offers = _filter(listed, p)
    if not offers:
        unpriced = sorted({o.zone for o in listed if not o.billable})  # review-ap AP2
        no_price = f" ({', '.join(unpriced)}: no price in the trace)" if unpriced else ""
        raise SpecError(
            "spec field 'providers.0': no offer of the replayed market matches its regions/zones/"
            f"instance_types/markets; the trace has {market.instance_type} in "
            f"{', '.join(market.traces.zones)}{no_price}"
        )
    return Backend(
        provider="local",
        catalog=market,
        provisioner=prov,
        rules={market.provider: rule},
        now=clock.now,
        list_offers=lambda t: _filter(market.offers(at=t), p),
        segments=market.segments,
        close=prov.shutdown,
        speedup=r.speedup,
        start_clock=clock.restart,
        info={
            "trace": str(traces.source),
            "start": start,
            "speedup": r.speedup,
            "tick_s": traces.gap_seconds,
        },
    )


def provider_config(p: ProviderSpec) -> ProviderConfig:
    return ProviderConfig(
        name=p.name,
        regions=tuple(p.regions),
        zones=tuple(p.zones),
        instance_types=tuple(p.instance_types),
        markets=tuple(p.markets),
        options=dict(p.options),
    )


def _cloud(p: ProviderSpec) -> Backend:
    from spotwise.providers.registry import cloud_module

    mod = cloud_module(p.name)
    config = provider_config(p)
    catalog: Catalog = mod.open_catalog(config)
    prov: Provisioner = mod.open_provisioner(config)
    cache: dict[str, tuple[float, list[Offer]]] = {}

    def list_offers(t: float) -> list[Offer]:
        hit = cache.get("offers")
        if hit is None or t - hit[0] > 300:  # refresh prices every 5 minutes
            regions: list[str | None] = list(p.regions) or [None]
            offers = [
                o
                for r in regions
                for o in catalog.offers(region=r, instance_types=p.instance_types or None)
            ]
            cache["offers"] = (t, _filter(offers, p))
        return cache["offers"][1]

    return Backend(
        provider=p.name,
        catalog=catalog,
        provisioner=prov,
        rules={p.name: rule_for(p.name)},
        now=time.time,
        list_offers=list_offers,
        segments=_price_at_launch,
        close=lambda: None,
    )


def _price_at_launch(offer: Offer, t0: float, t1: float) -> list[tuple[float, float]]:
    """A cloud life's priced segments: the price at launch for the whole life (spot prices
    move slowly; the bill is the truth)."""
    price = (
        offer.on_demand_price_per_hour if offer.market is Market.ON_DEMAND else offer.price_per_hour
    )
    return [(max(t1 - t0, 0.0), price)]


def _several(parts: list[Backend]) -> Backend:
    """Several clouds as one market: the union of their (each already filtered) offers, calls
    routed to the cloud that owns them, each cloud's own billing rule."""
    from spotwise.providers.multi import MultiCatalog, MultiProvisioner

    def list_offers(t: float) -> list[Offer]:
        return [o for b in parts for o in b.list_offers(t)]

    def close() -> None:
        for b in parts:
            b.close()

    return Backend(
        provider="+".join(b.provider for b in parts),
        catalog=MultiCatalog({b.provider: b.catalog for b in parts}),
        provisioner=MultiProvisioner({b.provider: b.provisioner for b in parts}),
        rules={name: rule for b in parts for name, rule in b.rules.items()},
        now=time.time,
        list_offers=list_offers,
        segments=_price_at_launch,
        close=close,
    )
