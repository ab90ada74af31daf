"""The money side of the tuning simulation (:mod:`spotwise.planner.simulator`): the bill of each
instance life by the provider's rule, the running spend a policy sees, and the bookkeeping of a
life's end (what it cost, its hours, the trial it leaves behind).

The running spend counts the lives not billed yet as ``spotwise tune`` does
(``Ledger._running_cost``): a noticed life as its provider bills a life it takes (AWS: nothing
within the first hour), the others as if terminated by us now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotwise.planner.policy import Phase
from spotwise.planner.sim_state import Life, SimSettings, TrialState
from spotwise.providers.base import Market
from spotwise.providers.billing import BillingRule

if TYPE_CHECKING:
    import numpy as np

    from spotwise.providers.replay import ReplayMarket


def price_matrix(market: ReplayMarket) -> np.ndarray:
    """(Z, T) spot price the market charges (override-aware, read-only)."""
    return market.spot_prices


class Meter:
    """Bills instance lives by the provider's rule; prices running ones fast for the views."""

    def __init__(self, market: ReplayMarket, rule: BillingRule) -> None:
        self.market, self.rule = market, rule
        self._cum: np.ndarray | None = None
        self._prices: np.ndarray | None = None

    def charge(self, life: Life, end: float, revoked: bool) -> float:
        """The exact bill of a life ending at ``end`` (the market's priced segments)."""
        segs = self.market.segments(life.offer, life.launched_at, end)
        return self.rule.charge(segs, revoked_by_provider=revoked, market=life.offer.market)

    def accrued(self, lives: list[Life], now: float) -> float:
        """What the running lives cost up to ``now``, as ``Ledger._running_cost`` counts them: a
        noticed life (it is never released while it runs here: a stop ends it at once) as its
        provider bills a life it takes (AWS: nothing within the first hour), the others as if
        terminated by us now."""
        total = 0.0
        for life in lives:
            secs = now - life.launched_at
            if secs <= 0:
                continue
            if life.offer.market is Market.SPOT:
                zi = self.market.zone_index(life.offer.zone)
                dollars_h = self._integral(zi, now) - self._integral(zi, life.launched_at)
            else:
                dollars_h = secs * life.offer.price_per_hour
            segs = [(secs, dollars_h / secs)]
            total += self.rule.charge(
                segs, revoked_by_provider=life.noticed, market=life.offer.market
            )
        return total

    def _integral(self, zi: int, t: float) -> float:
        """∫ spot price dt (price-hours × 3600) from the trace start to ``t`` in zone ``zi``."""
        times = self.market.traces.times
        if self._cum is None or self._prices is None:
            import numpy as np

            price = self._prices = price_matrix(self.market)
            gap = float(self.market.traces.gap_seconds or 60.0)
            widths = np.diff(times, append=times[-1] + gap)
            self._cum = np.concatenate(
                [np.zeros((price.shape[0], 1)), np.cumsum(price * widths, axis=1)], axis=1
            )
        i = self.market.traces.tick_at(t)
        return float(self._cum[zi, i]) + float(self._prices[zi, i]) * (t - float(times[i]))


class SimBooks:
    """The engine's money and trial bookkeeping (a mixin of
    :class:`~spotwise.planner.simulator.Engine`, which sets these attributes)."""

    s: SimSettings
    now: float
    trials: list[TrialState]
    meter: Meter
    billed: float
    last_end: float
    spot_s: float
    od_s: float
    refunded_s: float

    def _budget_spent(self) -> bool:
        """No new trial starts (as in `tune`, ``Ledger._budget_spent``): the cap is reached, or
        a trial that never ran was stopped for the budget (a new one would not fit either)."""
        cap = self.s.max_cost_usd
        if cap is None:
            return False
        if self._spent() >= cap:
            return True
        return any(t.stop_reason == "budget" and not t.lives for t in self.trials)

    def _spent(self) -> float:
        """Billed lives plus the running ones as ``Ledger._running_cost`` counts them (what the
        orchestrator shows): a noticed life as its provider would bill taking it."""
        return self.billed + self.meter.accrued([t.life for t in self.trials if t.life], self.now)

    def _end_life(
        self, t: TrialState, life: Life, *, revoked: bool, may_leave_to_provider: bool = False
    ) -> None:
        end = self.now
        cost = self._charge(life, end, revoked)
        if may_leave_to_provider and life.revoke_at is not None and life.revoke_at >= end:
            later = self._charge(life, life.revoke_at, True)
            if later < cost:  # let the provider take it (a revoked first hour is free)
                cost, end = later, life.revoke_at
        t.cost += cost
        self.billed += cost
        if cost == 0.0 and end > life.launched_at:
            self.refunded_s += end - life.launched_at
        t.overhead_s += min(max(end - life.launched_at, 0.0), self.s.restart_overhead_s)
        secs = max(end - life.launched_at, 0.0)
        if life.offer.market is Market.SPOT:
            self.spot_s += secs
        else:
            self.od_s += secs
        self.last_end = max(self.last_end, end)
        t.life = None
        t.view = None

    def _charge(self, life: Life, end: float, revoked: bool) -> float:
        return self.meter.charge(life, end, revoked)

    def _to_waiting(self, t: TrialState) -> None:
        t.phase, t.step, t.stopping = Phase.WAITING, t.checkpoint_step, False
        t.view = None

    def _close(self, t: TrialState, reason: str | None) -> None:
        t.phase, t.stop_reason, t.stopping = Phase.DONE, reason, False
        t.view = None
        self.last_end = max(self.last_end, self.now)

    def _abandon(self) -> None:
        for t in self.trials:
            if t.life is not None:
                self._end_life(t, t.life, revoked=False)
            if t.phase is not Phase.DONE:
                self._close(t, "unfinished")
