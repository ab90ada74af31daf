"""The frozen views of the tuning simulation (:mod:`spotwise.planner.simulator`): what a
policy sees at each event, built as the orchestrator builds it for ``spotwise tune``.

Offers are re-read once per trace tick; a spot zone whose capacity goes within the notice
lead is shown (and treated) as unavailable. A trial's view is rebuilt only when it changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from spotwise.planner.policy import OfferView, PlannerView, TrialView
from spotwise.planner.sim_money import SimBooks
from spotwise.planner.sim_state import TrialState, frozen, iid
from spotwise.providers.base import Market, Offer
from spotwise.providers.billing import BillingRule

if TYPE_CHECKING:
    import numpy as np

    from spotwise.planner.sim_curves import RecordedCurve
    from spotwise.providers.replay import ReplayMarket

# tick index → (Z,) P(revoked within the horizon), or None for no forecast
RiskFn = Callable[[int], "np.ndarray | None"]


def trial_view(t: TrialState, steps_total: int, default_sps: float) -> TrialView:
    """The frozen view of one simulated trial (as the orchestrator's ``trial_view``)."""
    life = t.life
    return frozen(
        TrialView,
        trial_id=t.tid,
        number=t.number,
        phase=t.phase,
        step=t.step,
        steps_total=steps_total,
        curve=tuple(sorted(t.reported.items())),
        checkpoint_step=t.checkpoint_step,
        checkpoint_every=t.checkpoint_every,
        instance_id=iid(life) if life else None,
        offer_key=life.offer.key if life else None,
        launched_at=life.launched_at if life else None,
        notice_deadline=life.revoke_at if life and life.noticed else None,
        seconds_per_step=t.run_s / t.steps_run if t.steps_run else default_sps,
        cost_usd=t.cost,
        revocations=t.revocations,
        stopping=t.stopping,
        params={"curve_id": t.curve.curve_id},
    )


class SimViews(SimBooks):
    """Builds the engine's :class:`~spotwise.planner.policy.PlannerView` (a mixin of
    :class:`~spotwise.planner.simulator.Engine`, which sets these attributes)."""

    market: ReplayMarket
    rule: BillingRule
    curves: list[RecordedCurve]
    start: float
    deadline: float | None
    steps_total: int
    risk: RiskFn | None
    risk_horizon_s: float
    tick: int
    times: np.ndarray
    gap: float
    _offers_tick: int
    _offer_views: tuple[OfferView, ...]
    _offers: dict[str, Offer]
    _tick_offers: list[Offer]
    _next_rev: dict[str, float | None]
    _risk_now: np.ndarray | None
    _imminent: frozenset[str] | None

    def _refresh_offers(self) -> None:
        """Offers at the current tick; a spot zone whose capacity goes within the notice lead is
        shown (and treated) as unavailable: the provider refuses launches it is reclaiming."""
        if self._offers_tick != self.tick:
            at = float(self.times[self.tick])
            self._tick_offers = self.market.offers(at=at)
            self._next_rev = {
                o.zone: self.market.next_revocation(o.zone, at)
                for o in self._tick_offers
                if o.market is Market.SPOT and o.available
            }
            self._risk_now = self.risk(self.tick) if self.risk is not None else None
            self._offers_tick, self._imminent = self.tick, None
        lead = self.rule.notice_lead_s
        imminent = frozenset(
            z for z, r in self._next_rev.items() if r is not None and r - self.now <= lead
        )
        if imminent == self._imminent:
            return
        offers = [
            replace(o, available=False) if o.market is Market.SPOT and o.zone in imminent else o
            for o in self._tick_offers
        ]
        p = self._risk_now
        views = []
        for o in offers:
            pr = 0.0
            if o.market is Market.SPOT and p is not None:
                pr = float(p[self.market.zone_index(o.zone)])
            views.append(OfferView(o, pr, self.risk_horizon_s))
        self._offers = {o.key: o for o in offers}
        self._offer_views = tuple(views)
        self._imminent = imminent

    def _view(self) -> PlannerView:
        self._refresh_offers()
        runs = [t.run_s / t.steps_run for t in self.trials if t.steps_run]
        default_sps = sum(runs) / len(runs) if runs else 60.0
        views = []
        for t in self.trials:
            if t.view is None or (not t.steps_run and t.view.seconds_per_step != default_sps):
                t.view = self._trial_view(t, default_sps)
            views.append(t.view)
        return frozen(
            PlannerView,
            now=self.now,
            offers=self._offer_views,
            trials=tuple(views),
            direction=self.s.direction,
            parallel=self.s.parallel,
            trials_total=len(self.curves),
            spent_usd=self._spent(),
            max_cost_usd=self.s.max_cost_usd,
            started_at=self.start,
            deadline=self.deadline,
            restart_overhead_s=self.s.restart_overhead_s,
            notice_lead_s=self.rule.notice_lead_s,
            free_if_revoked_within_s=self.rule.free_if_revoked_within_s,
            tick_s=self._to_next_tick(),
            checkpoint_s=self.s.checkpoint_s,
            speed_measured=bool(runs),
        )

    def _to_next_tick(self) -> float:
        """The longest market time to the next decision: the next trace tick (the SkyNomad
        ticks are 194-280 s apart around a 195 s median; the median would let the budget and
        deadline guards decide too late)."""
        nxt = self.tick + 1
        if nxt < len(self.times):
            return max(float(self.times[nxt]) - self.now, 0.0)
        return self.gap

    def _trial_view(self, t: TrialState, default_sps: float) -> TrialView:
        return trial_view(t, self.steps_total, default_sps)
