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
* many random start points per (zone) trace; costs are normalised by the on-demand cost of
  the job (``job_s`` at the on-demand price).

Decisions happen at every trace tick (``Tick``), after a preemption (``InstanceLost``) and
after the job leaves an instance (``TrialExited``), exactly as a policy sees them in ``tune``.

The suite (many starts, every policy on the same ones) is in
:mod:`spotwise.planner.deadline_sim`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotwise.errors import SpecError
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
from spotwise.planner.sim_suite import check, check_choice, check_prices
from spotwise.providers.base import Market, Offer
from spotwise.providers.billing import BillingRule

if TYPE_CHECKING:
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
    spot_price: float = 0.9731
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
        zname = traces.zones[zone]
        mk = lambda m, price, avail: Offer(  # noqa: E731
            provider=rule.provider,
            region="",
            zone=zname,
            instance_type=traces.instance_type or "?",
            market=m,
            price_per_hour=price,
            on_demand_price_per_hour=job.on_demand_price,
            available=avail,
        )
        self.spot_up = mk(Market.SPOT, job.spot_price, True)
        self.spot_down = mk(Market.SPOT, job.spot_price, False)
        self.od = mk(Market.ON_DEMAND, job.on_demand_price, True)
        self.od_view = OfferView(self.od, 0.0)
        self.keys = {self.spot_up: self.spot_up.key, self.od: self.od.key}
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

    def _end(self, t: float, revoked: bool) -> None:
        assert self.life is not None
        offer, launched, _ = self.life
        secs = max(t - launched, 0.0)
        self.cost += self.rule.charge([(secs, offer.price_per_hour)] if secs else [], revoked)
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
            offer_key=self.keys[life[0]] if life is not None else None,
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
