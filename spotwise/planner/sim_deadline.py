"""The "Can't Be Late" (NSDI'24) setting, replayed with our policy objects.

One job of ``job_s`` seconds of computation must finish within ``deadline_s`` of its start, on
one zone's spot capacity (available or not at each trace tick) or on on-demand (always
available). Following the paper (§3.1, §6.1):

* every switch to a new instance costs the changeover delay ``d`` (no progress, billed at the
  new instance's price); going idle costs nothing;
* progress is kept across a preemption (``d`` stands for the restart and the work lost), so
  there are no notices and no checkpoints to simulate;
* instances are billed per second while alive (the paper's model; ``--billing aws`` applies
  AWS's refund of a first hour that AWS revokes instead);
* spot is priced flat at ``spot_price`` when one is given; otherwise at the trace's own price
  of each tick (a SkyNomad CSV), a spot life billed as one segment per tick interval at the
  price in force over it, as :class:`~spotwise.providers.replay.ReplayMarket` bills the tuning
  simulator's lives; a trace without prices (Can't Be Late JSON) gets the paper's $0.9731
  flat. On-demand is always ``on_demand_price`` (the paper's $3.06 by default);
* many random start points per (zone) trace; costs are normalised by the on-demand cost of
  the job (``job_s`` at the on-demand price).

Decisions happen at every trace tick (``Tick``), after a preemption (``InstanceLost``) and
after the job leaves an instance (``TrialExited``), exactly as a policy sees them in ``tune``.

The suite (many starts, every policy on the same ones) is in
:mod:`spotwise.planner.deadline_sim`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotwise.errors import SpecError, check_choice
from spotwise.planner.policy import (
    Checkpoint,
    Event,
    InstanceLost,
    Launch,
    OfferView,
    Phase,
    PlannerView,
    Policy,
    StopEarly,
    Tick,
    TrialExited,
    TrialView,
)
from spotwise.planner.sim_state import frozen
from spotwise.planner.sim_suite import check, check_prices
from spotwise.providers.base import Market, Offer
from spotwise.providers.billing import BillingRule
from spotwise.providers.replay import CBL_SPOT_PRICE

if TYPE_CHECKING:
    import numpy as np

    from spotwise.traces import TraceSet

PAPER_BILLING = BillingRule(
    provider="paper",
    granularity_s=1.0,
    minimum_s=0.0,
    free_if_revoked_within_s=0.0,
    notice_lead_s=0.0,
    source="Wu et al., Can't Be Late, NSDI'24 §3.1: providers charge every second an instance "
    "is alive",
)


@dataclass(frozen=True)
class DeadlineJob:
    job_s: float = 48 * 3600.0
    deadline_s: float = 52 * 3600.0
    restart_s: float = 0.2 * 3600.0
    # flat spot $/h in every zone and tick; None: the trace's own per-tick prices, or the
    # paper's CBL_SPOT_PRICE flat for a trace without prices (see ``flat_spot_price``)
    spot_price: float | None = None
    on_demand_price: float = 3.06

    def __post_init__(self) -> None:
        """Checked under the names ``spotwise simulate deadline`` gives the fields (hours)."""
        job, deadline, d = self.job_s / 3600, self.deadline_s / 3600, self.restart_s / 3600
        check(job > 0, "--job-hours", "> 0", job)
        check(deadline > 0, "--deadline-hours", "> 0", deadline)
        if job > deadline:
            raise SpecError(
                f"--job-hours ({job:g}) must be at most --deadline-hours ({deadline:g})"
            )
        slack = deadline - job
        check(0 <= d <= slack + 1e-9, "--restart-hours", f"in [0, {slack:g}] (deadline - job)", d)
        check_prices(self.spot_price, self.on_demand_price)


def flat_spot_price(traces: TraceSet, job: DeadlineJob) -> float | None:
    """The flat spot $/h a run bills, or None when it bills the trace's per-tick prices.

    ``job.spot_price`` when given; else the paper's $0.9731 for a trace without prices (every
    price NaN, like Can't Be Late JSON); else None. The rule of the tuning simulator's
    :class:`~spotwise.providers.replay.ReplayMarket`.
    """
    import numpy as np

    if job.spot_price is not None:
        return job.spot_price
    return CBL_SPOT_PRICE if bool(np.isnan(traces.price).all()) else None


def check_trace_prices(traces: TraceSet, job: DeadlineJob) -> None:
    """A run on the trace's prices needs a price at every tick of its zone (SkyNomad CSVs
    carry the last price forward, so only a zone without any price lacks one)."""
    if flat_spot_price(traces, job) is None:
        _check_price_rows(traces, range(len(traces.zones)))


def _check_price_rows(traces: TraceSet, zones: Sequence[int]) -> None:
    import numpy as np

    for z in zones:
        if not bool(np.isfinite(traces.price[z]).all()):
            raise SpecError(
                f"--traces: zone {traces.zones[z]} has no spot price at some ticks while other "
                "zones have prices; give --spot-price to price spot flat in every zone"
            )


def billing_rule(name: str) -> BillingRule:
    """``paper`` (the paper's per-second billing) or a provider's rule (``aws``, ``gcp``, …)."""
    from spotwise.providers.billing import RULES

    rules = {"paper": PAPER_BILLING, **RULES}
    check_choice("--billing", name, list(rules))
    return rules[name]


@dataclass
class DeadlineRun:
    policy: str
    zone: str
    start_tick: int
    cost_usd: float
    normalized_cost: float
    finished_s: float | None  # after the start; None if never finished
    missed: bool
    spot_hours: float
    on_demand_hours: float
    changeovers: int


class DeadlineEngine:
    """One job on one zone from one start tick, under one policy."""

    def __init__(
        self,
        policy: Policy,
        traces: TraceSet,
        zone: int,
        start_tick: int,
        job: DeadlineJob,
        rule: BillingRule = PAPER_BILLING,
        risk: Callable[[int], float] | None = None,
    ) -> None:
        self.policy, self.traces, self.z, self.job, self.rule = policy, traces, zone, job, rule
        self.i0 = start_tick
        self.times = traces.times
        self.gap = float(traces.gap_seconds or 60.0)
        self.start = float(traces.times[start_tick])
        self.deadline = self.start + job.deadline_s
        self.risk = risk
        flat = flat_spot_price(traces, job)
        if flat is None:
            _check_price_rows(traces, [zone])
        # the zone's spot $/h per tick (a view, no copy); None: flat at ``flat``
        self.prices: np.ndarray | None = None if flat is not None else traces.price[zone]
        self.price_now = flat if flat is not None else float(traces.price[zone, start_tick])
        self.spot_up = self._mk(Market.SPOT, self.price_now, True)
        self.spot_down = self._mk(Market.SPOT, self.price_now, False)
        self.od = self._mk(Market.ON_DEMAND, job.on_demand_price, True)
        self.od_view = OfferView(self.od, 0.0)
        self.spot_key, self.od_key = self.spot_up.key, self.od.key
        self.progress = 0.0
        self.life: tuple[Offer, float, float] | None = None  # offer, launched_at, ready_at
        self.cost = self.spot_s = self.od_s = 0.0
        self.changeovers = 0
        self.finished: float | None = None
        self.abandoned = False
        self.now = self.start
        self.tick = start_tick

    def run(self) -> DeadlineRun:
        last = min(self.traces.n_ticks - 1, self.i0 + int(2 * self.job.deadline_s / self.gap) + 2)
        for i in range(self.i0, last + 1):
            t = float(self.times[i])
            self._advance(t)
            if self.finished is not None or self.abandoned:
                break
            self.now, self.tick = t, i
            if self.prices is not None and self.prices[i] != self.price_now:
                self._price_spot(float(self.prices[i]))
            events: list[Event] = []
            life = self.life
            if (
                life is not None
                and life[0].market is Market.SPOT
                and not self.traces.available[self.z, i]
            ):
                self._end(t, revoked=True)
                events.append(InstanceLost("job", "spot"))
            events.append(Tick(t))
            self._dispatch(events)
        if self.life is not None:
            self._end(self.now, revoked=False)
        od_cost = self.job.job_s / 3600.0 * self.job.on_demand_price
        fin = None if self.finished is None else self.finished - self.start
        return DeadlineRun(
            policy=self.policy.name,
            zone=self.traces.zones[self.z],
            start_tick=self.i0,
            cost_usd=self.cost,
            normalized_cost=self.cost / od_cost,
            finished_s=fin,
            missed=fin is None or fin > self.job.deadline_s + 1e-6,
            spot_hours=self.spot_s / 3600.0,
            on_demand_hours=self.od_s / 3600.0,
            changeovers=self.changeovers,
        )

    def _advance(self, t: float) -> None:
        """Progress between the previous decision and ``t``; finish inside the interval."""
        if self.life is None:
            return
        _, _, ready = self.life
        work_from = max(self.now, ready)
        if t <= work_from:
            return
        need = self.job.job_s - self.progress
        if t - work_from >= need:
            self.progress = self.job.job_s
            self.finished = work_from + need
            self.now = self.finished
            self._end(self.finished, revoked=False)
            return
        self.progress += t - work_from

    def _mk(self, market: Market, price: float, available: bool) -> Offer:
        return Offer(
            provider=self.rule.provider,
            region="",
            zone=self.traces.zones[self.z],
            instance_type=self.traces.instance_type or "?",
            market=market,
            price_per_hour=price,
            on_demand_price_per_hour=self.job.on_demand_price,
            available=available,
        )

    def _price_spot(self, price: float) -> None:
        """The spot offers the policy sees from now on, at ``price`` $/h (rebuilt only when
        the trace's price changes)."""
        self.price_now = price
        self.spot_up = self._mk(Market.SPOT, price, True)
        self.spot_down = self._mk(Market.SPOT, price, False)

    def _segments(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """``(seconds, $/h)`` pieces of a spot life over [t0, t1] on the trace's prices: one
        per tick interval, at the price of the tick that starts it (the first from ``t0``);
        the same pieces as :meth:`~spotwise.providers.replay.ReplayMarket.segments`."""
        assert self.prices is not None
        times, row, n = self.times, self.prices, len(self.times)
        i, out, t = self.traces.tick_at(t0), [], t0
        while t < t1:
            nxt = float(times[i + 1]) if i + 1 < n else t1
            end = min(max(nxt, t), t1) if nxt > t else t1
            out.append((end - t, float(row[i])))
            t, i = end, i + 1
        return out

    def _end(self, t: float, revoked: bool) -> None:
        assert self.life is not None
        offer, launched, _ = self.life
        secs = max(t - launched, 0.0)
        if not secs:
            segments = []
        elif self.prices is not None and offer.market is Market.SPOT:
            segments = self._segments(launched, t)
        else:
            segments = [(secs, offer.price_per_hour)]
        self.cost += self.rule.charge(segments, revoked, market=offer.market)
        if offer.market is Market.SPOT:
            self.spot_s += secs
        else:
            self.od_s += secs
        self.life = None

    def _dispatch(self, events: list[Event]) -> None:
        queue = list(events)
        while queue:
            ev = queue.pop(0)
            for a in self.policy.decide(self._view(), ev):
                if isinstance(a, Launch) and self.life is None:
                    offer = self._offer(a.offer_key)
                    if offer is not None and offer.available:
                        self.life = (offer, self.now, self.now + self.job.restart_s)
                        self.changeovers += 1
                elif isinstance(a, Checkpoint) and self.life is not None:
                    self._end(self.now, revoked=False)
                    queue.append(TrialExited("job", "x", False))
                elif isinstance(a, StopEarly):
                    if self.life is not None:
                        self._end(self.now, revoked=False)
                    self.abandoned = True
                    return

    def _offer(self, key: str) -> Offer | None:
        for o in (self._spot(), self.od):
            if o.key == key:
                return o
        return None

    def _spot(self) -> Offer:
        return self.spot_up if self.traces.available[self.z, self.tick] else self.spot_down

    def _next_gap(self) -> float:
        """Market seconds to the next decision: the next trace tick. SkyNomad traces are not
        evenly spaced (194–280 s around a 195 s median), so the median would let the Safety
        Net decide too late."""
        i = self.tick
        if i + 1 < self.traces.n_ticks:
            return max(float(self.times[i + 1] - self.times[i]), 0.0)
        return self.gap

    def _view(self) -> PlannerView:
        p = self.risk(self.tick) if self.risk is not None else 0.0
        life = self.life
        # whole seconds of progress, rounded down: the policy never sees more than was done
        step = math.floor(self.progress + 1e-6)
        trial = frozen(
            TrialView,
            trial_id="job",
            number=0,
            phase=Phase.RUNNING if life is not None else Phase.WAITING,
            step=step,
            steps_total=int(self.job.job_s),
            checkpoint_step=step,
            checkpoint_every=1,
            instance_id="x" if life is not None else None,
            offer_key=(
                None
                if life is None
                else self.spot_key
                if life[0].market is Market.SPOT
                else self.od_key
            ),
            launched_at=life[1] if life is not None else None,
            seconds_per_step=1.0,
            cost_usd=self.cost,
        )
        return frozen(
            PlannerView,
            now=self.now,
            offers=(OfferView(self._spot(), p), self.od_view),
            trials=(trial,),
            parallel=1,
            trials_total=1,
            spent_usd=self.cost,
            started_at=self.start,
            deadline=self.deadline,
            restart_overhead_s=self.job.restart_s,
            notice_lead_s=0.0,
            free_if_revoked_within_s=self.rule.free_if_revoked_within_s,
            tick_s=self._next_gap(),
            checkpoint_s=0.0,
        )
