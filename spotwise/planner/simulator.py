"""Trace-driven simulation of one tuning job under one policy, on a virtual clock.

The policy object is the one ``spotwise tune`` runs: the engine builds the same frozen
:class:`~spotwise.planner.policy.PlannerView`, feeds the same events and executes the same
actions as the orchestrator, against a :class:`~spotwise.providers.replay.ReplayMarket`
(availability and price of a real trace) and recorded learning curves.

The model (docs/simulation.md has the why of each choice):

* A launch takes ``restart_overhead_s`` (boot, setup, restore) before the first step; every
  launch pays it. Steps last their recorded seconds × ``time_scale`` (÷ the offer's speed).
* A trial writes a checkpoint after every ``checkpoint_every`` steps (``checkpoint_s`` each,
  no progress meanwhile); it is valid once written.
* A spot instance is revoked at the first tick its zone is unavailable; the notice comes
  ``notice_lead_s`` earlier. A trial asked to leave (notice or ``Checkpoint``) finishes its
  current step, writes a checkpoint and exits; work after the last valid checkpoint is lost
  (``lost_hours``). After a notice the engine lets the provider take the instance when that is
  cheaper (a revoked first hour is free on AWS), else terminates it at once.
* Each instance life is billed by the provider's rule (:mod:`spotwise.providers.billing`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spotwise.planner.policy import (
    Action,
    Checkpoint,
    Event,
    InstanceLost,
    Launch,
    NoticeReceived,
    OfferView,
    Phase,
    PlannerView,
    Policy,
    Progress,
    SetCheckpointEvery,
    StopEarly,
    Tick,
    TrialAdded,
    TrialExited,
    TrialView,
)
from spotwise.planner.sim_curves import RecordedCurve
from spotwise.providers.base import Market, Offer
from spotwise.providers.billing import BillingRule

if TYPE_CHECKING:
    import numpy as np

    from spotwise.providers.replay import ReplayMarket


@dataclass(frozen=True)
class SimSettings:
    parallel: int = 8
    direction: str = "maximize"
    time_scale: float = 120.0  # market seconds per recorded second
    restart_overhead_s: float = 180.0
    checkpoint_s: float = 20.0
    checkpoint_every: int = 5
    max_cost_usd: float | None = None
    deadline_s: float | None = None  # after the start
    horizon_s: float = 14 * 86400.0  # give up (``unfinished``) after this much market time

    def __post_init__(self) -> None:
        if self.parallel < 1:
            raise ValueError(f"parallel must be >= 1, got {self.parallel=}")
        if self.time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale=}")
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {self.checkpoint_every=}")


@dataclass
class RunResult:
    policy: str
    seed: int
    start: float
    cost_usd: float
    makespan_hours: float
    returned: str | None
    returned_final: float | None
    best_final: float
    regret: float
    revocations: int
    lost_hours: float
    overhead_hours: float
    early_stopped: int
    completed: int
    stopped_by: dict[str, int]
    steps_run: int
    spot_hours: float
    on_demand_hours: float
    budget_exceeded: bool
    deadline_missed: bool
    unfinished: bool
    decisions: int

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class _Life:
    lid: int
    offer: Offer
    launched_at: float
    ready_at: float
    start_step: int
    revoke_at: float | None
    token: int = 0  # bumps to cancel the scheduled step of this life
    noticed: bool = False
    leaving: bool = False
    ckpt_until: float = 0.0  # a periodic checkpoint is being written until then
    ckpt_step: int = 0
    step_end: dict[int, float] = field(default_factory=dict)


@dataclass
class _Trial:
    tid: str
    number: int
    curve: RecordedCurve
    checkpoint_every: int
    phase: Phase = Phase.QUEUED
    step: int = 0
    reported: dict[int, float] = field(default_factory=dict)
    checkpoint_step: int = 0
    life: _Life | None = None
    cost: float = 0.0
    revocations: int = 0
    lost_s: float = 0.0
    overhead_s: float = 0.0
    run_s: float = 0.0  # market seconds spent in steps (for the observed seconds per step)
    steps_run: int = 0
    stopping: bool = False
    completed: bool = False
    stop_reason: str | None = None
    pending_every: int | None = None
    view: TrialView | None = None


RiskFn = Callable[[int], "np.ndarray"]  # tick index → (Z,) P(revoked within the horizon)


class Engine:
    """One job, one policy, one pass over the market. Not reusable."""

    def __init__(
        self,
        policy: Policy,
        market: ReplayMarket,
        rule: BillingRule,
        curves: Sequence[RecordedCurve],
        settings: SimSettings,
        start: float,
        risk: RiskFn | None = None,
        speed: Callable[[Offer], float] | None = None,
        horizon_s: float = 3600.0,
    ) -> None:
        self.policy, self.market, self.rule, self.s = policy, market, rule, settings
        self.curves = list(curves)
        self.start = self.now = start
        self.risk = risk
        self.speed = speed or (lambda o: 1.0)
        self.risk_horizon_s = horizon_s
        self.steps_total = self.curves[0].steps
        self.deadline = start + settings.deadline_s if settings.deadline_s else None
        self.trials: list[_Trial] = []
        self.heap: list[tuple[float, int, str, int, int, int]] = []
        self.seq = itertools.count()
        self.lids = itertools.count(1)
        self.billed = 0.0
        self.decisions = 0
        self.last_end = start
        self.spot_s = self.od_s = 0.0
        self._offers_tick = -1
        self._offer_views: tuple[OfferView, ...] = ()
        self._offers: dict[str, Offer] = {}
        times = market.traces.times
        self.gap = float(market.traces.gap_seconds or 60.0)
        self.tick = market.traces.tick_at(start)
        self.times = times

    # ---- the loop -----------------------------------------------------------------------
    def run(self) -> RunResult:
        end_of_trace = self.market.end_time
        limit = min(self.start + self.s.horizon_s, end_of_trace - 1.0)
        nxt = self.tick + 1
        if nxt < len(self.times):
            self._push(float(self.times[nxt]), "tick", -1, 0, nxt)
        self._dispatch([Tick(self.now), *self._admit()])
        unfinished = False
        while not self._done():
            if not self.heap:
                unfinished = True
                break
            t, _, kind, idx, lid, arg = heapq.heappop(self.heap)
            if t > limit:
                unfinished = True
                break
            self.now = t
            events = self._handle(kind, idx, lid, arg)
            self._dispatch(events)
            self._dispatch(self._admit())
        if unfinished:
            self._abandon()
        return self._result(unfinished)

    def _done(self) -> bool:
        return len(self.trials) >= len(self.curves) and all(t.phase is Phase.DONE for t in self.trials)

    def _push(self, t: float, kind: str, idx: int, lid: int, arg: int) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, idx, lid, arg))

    def _admit(self) -> list[Event]:
        active = sum(1 for t in self.trials if t.phase is not Phase.DONE)
        out: list[Event] = []
        if self.s.max_cost_usd is not None and self._spent() >= self.s.max_cost_usd:
            return out
        while active < self.s.parallel and len(self.trials) < len(self.curves):
            n = len(self.trials)
            t = _Trial(f"t{n:04d}", n, self.curves[n], self.s.checkpoint_every)
            self.trials.append(t)
            active += 1
            out.append(TrialAdded(t.tid))
        return out

    def _dispatch(self, events: list[Event]) -> None:
        queue = list(events)
        while queue:
            ev = queue.pop(0)
            view = self._view()
            self.decisions += 1
            for action in self.policy.decide(view, ev):
                queue.extend(self._execute(action))

    # ---- events from the heap -----------------------------------------------------------
    def _handle(self, kind: str, idx: int, lid: int, arg: int) -> list[Event]:
        if kind == "tick":
            self.tick = arg
            if arg + 1 < len(self.times):
                self._push(float(self.times[arg + 1]), "tick", -1, 0, arg + 1)
            return [Tick(self.now)]
        t = self.trials[idx]
        life = t.life
        if life is None or life.lid != lid:
            return []  # stale: that life is over
        if kind == "step":
            if arg != life.token:
                return []
            return self._on_step(t, life)
        if kind == "ckpt":
            t.checkpoint_step = max(t.checkpoint_step, arg)
            t.view = None
            return []
        if kind == "exit":
            return self._on_exit(t, life, arg)
        if kind == "notice":
            life.noticed = True
            t.revocations += 1
            t.view = None
            return [NoticeReceived(t.tid, _iid(life), life.revoke_at or self.now)]
        if kind == "revoke":
            return self._on_revoke(t, life)
        raise AssertionError(kind)

    def _on_step(self, t: _Trial, life: _Life) -> list[Event]:
        k = t.step + 1
        dur = self._step_s(t, k, life.offer)
        t.step = k
        t.reported[k] = t.curve.values[k - 1]
        t.steps_run += 1
        t.run_s += dur
        life.step_end[k] = self.now
        t.view = None
        events: list[Event] = [Progress(t.tid, k, t.reported[k])]
        self._dispatch(events)
        if t.life is not life:  # the policy stopped it on this progress
            return []
        if k >= self.steps_total:
            t.completed = True
            self._end_life(t, life, revoked=False)
            self._close(t, None)
            return [TrialExited(t.tid, _iid(life), True)]
        if life.leaving:
            self._push(self.now + self.s.checkpoint_s, "exit", t.number, life.lid, k)
            return []
        wait = 0.0
        if k % t.checkpoint_every == 0:
            wait = self.s.checkpoint_s
            life.ckpt_until, life.ckpt_step = self.now + wait, k
            self._push(self.now + wait, "ckpt", t.number, life.lid, k)
        life.token += 1
        self._push(self.now + wait + self._step_s(t, k + 1, life.offer), "step", t.number, life.lid, life.token)
        return []

    def _on_exit(self, t: _Trial, life: _Life, saved: int) -> list[Event]:
        t.checkpoint_step = max(t.checkpoint_step, saved)
        self._end_life(t, life, revoked=False, may_leave_to_provider=life.noticed)
        self._to_waiting(t)
        if life.noticed:
            return [InstanceLost(t.tid, _iid(life))]
        return [TrialExited(t.tid, _iid(life), False)]

    def _on_revoke(self, t: _Trial, life: _Life) -> list[Event]:
        if not life.noticed:
            t.revocations += 1
        base = life.step_end.get(t.checkpoint_step, life.ready_at) if t.checkpoint_step > life.start_step \
            else life.ready_at
        t.lost_s += max(self.now - max(base, life.ready_at), 0.0)
        self._end_life(t, life, revoked=True)
        self._to_waiting(t)
        return [InstanceLost(t.tid, _iid(life))]

    # ---- actions ------------------------------------------------------------------------
    def _execute(self, action: Action) -> list[Event]:
        t = self._trial(action.trial_id)
        if t is None or t.phase is Phase.DONE:
            return []
        if isinstance(action, Launch):
            return self._launch(t, action.offer_key)
        if isinstance(action, StopEarly):
            if t.life is not None:
                self._end_life(t, t.life, revoked=False)
            self._close(t, action.reason)
            return []
        if isinstance(action, Checkpoint):
            return self._leave(t)
        if isinstance(action, SetCheckpointEvery):
            t.pending_every = max(1, int(action.every))  # takes effect at the next launch
            t.view = None
        return []

    def _launch(self, t: _Trial, key: str) -> list[Event]:
        if t.phase not in (Phase.QUEUED, Phase.WAITING) or t.life is not None:
            return []
        self._refresh_offers()
        offer = self._offers.get(key)
        if offer is None or not offer.available:
            return []  # launch failed: no capacity (the policy sees it unavailable next time)
        if self.s.max_cost_usd is not None and self._spent() >= self.s.max_cost_usd:
            return []
        if t.pending_every is not None:
            t.checkpoint_every, t.pending_every = t.pending_every, None
        revoke_at = None
        if offer.market is Market.SPOT:
            revoke_at = self.market.next_revocation(offer.zone, self.now)
        life = _Life(next(self.lids), offer, self.now, self.now + self.s.restart_overhead_s,
                     t.checkpoint_step, revoke_at)  # fmt: skip
        t.life, t.phase, t.step, t.stopping = life, Phase.RUNNING, t.checkpoint_step, False
        t.view = None
        life.token += 1
        first = life.ready_at + self._step_s(t, t.step + 1, offer)
        self._push(first, "step", t.number, life.lid, life.token)
        if revoke_at is not None:
            notice_at = max(self.now, revoke_at - self.rule.notice_lead_s)
            self._push(notice_at, "notice", t.number, life.lid, 0)
            self._push(revoke_at, "revoke", t.number, life.lid, 0)
        return []

    def _leave(self, t: _Trial) -> list[Event]:
        life = t.life
        if life is None or life.leaving:
            return []
        life.leaving, t.stopping = True, True
        t.view = None
        if self.now < life.ready_at:  # still booting: nothing new to save
            life.token += 1
            self._push(self.now, "exit", t.number, life.lid, t.checkpoint_step)
        elif life.ckpt_until > self.now:  # writing a checkpoint now: leave when it is written
            life.token += 1
            self._push(life.ckpt_until, "exit", t.number, life.lid, life.ckpt_step)
        return []

    # ---- money and bookkeeping ----------------------------------------------------------
    def _end_life(self, t: _Trial, life: _Life, *, revoked: bool, may_leave_to_provider: bool = False) -> None:
        end = self.now
        cost = self._charge(life, end, revoked)
        if may_leave_to_provider and life.revoke_at is not None and life.revoke_at >= end:
            later = self._charge(life, life.revoke_at, True)
            if later < cost:  # let the provider take it (a revoked first hour is free)
                cost, end = later, life.revoke_at
        t.cost += cost
        self.billed += cost
        t.overhead_s += min(max(end - life.launched_at, 0.0), self.s.restart_overhead_s)
        secs = max(end - life.launched_at, 0.0)
        if life.offer.market is Market.SPOT:
            self.spot_s += secs
        else:
            self.od_s += secs
        self.last_end = max(self.last_end, end)
        t.life = None
        t.view = None

    def _charge(self, life: _Life, end: float, revoked: bool) -> float:
        segs = self.market.segments(life.offer, life.launched_at, end)
        return self.rule.charge(segs, revoked_by_provider=revoked)

    def _to_waiting(self, t: _Trial) -> None:
        t.phase, t.step, t.stopping = Phase.WAITING, t.checkpoint_step, False
        t.view = None

    def _close(self, t: _Trial, reason: str | None) -> None:
        t.phase, t.stop_reason, t.stopping = Phase.DONE, reason, False
        t.view = None
        self.last_end = max(self.last_end, self.now)

    def _abandon(self) -> None:
        for t in self.trials:
            if t.life is not None:
                self._end_life(t, t.life, revoked=False)
            if t.phase is not Phase.DONE:
                self._close(t, "unfinished")

    def _spent(self) -> float:
        running = sum(self._charge(t.life, self.now, False) for t in self.trials if t.life is not None)
        return self.billed + running

    def _step_s(self, t: _Trial, k: int, offer: Offer) -> float:
        k = min(max(k, 1), t.curve.steps)
        return t.curve.step_seconds[k - 1] * self.s.time_scale / max(self.speed(offer), 1e-9)

    def _trial(self, tid: str) -> _Trial | None:
        if tid.startswith("t") and tid[1:].isdigit():
            n = int(tid[1:])
            if n < len(self.trials):
                return self.trials[n]
        return None

    # ---- the view -----------------------------------------------------------------------
    def _refresh_offers(self) -> None:
        if self._offers_tick == self.tick:
            return
        at = float(self.times[self.tick])
        offers = self.market.offers(at=at)
        p = self.risk(self.tick) if self.risk is not None else None
        views = []
        for o in offers:
            pr = 0.0
            if o.market is Market.SPOT and p is not None:
                pr = float(p[self.market.zone_index(o.zone)])
            views.append(OfferView(o, pr, self.risk_horizon_s))
        self._offers = {o.key: o for o in offers}
        self._offer_views = tuple(views)
        self._offers_tick = self.tick

    def _view(self) -> PlannerView:
        self._refresh_offers()
        runs = [t.run_s / t.steps_run for t in self.trials if t.steps_run]
        default_sps = sum(runs) / len(runs) if runs else 60.0
        views = []
        for t in self.trials:
            if t.view is None or (not t.steps_run and t.view.seconds_per_step != default_sps):
                t.view = self._trial_view(t, default_sps)
            views.append(t.view)
        return PlannerView(
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
            tick_s=self.gap,
            checkpoint_s=self.s.checkpoint_s,
        )

    def _trial_view(self, t: _Trial, default_sps: float) -> TrialView:
        life = t.life
        return TrialView(
            trial_id=t.tid,
            number=t.number,
            phase=t.phase,
            step=t.step,
            steps_total=self.steps_total,
            curve=tuple(sorted(t.reported.items())),
            checkpoint_step=t.checkpoint_step,
            checkpoint_every=t.checkpoint_every,
            instance_id=_iid(life) if life else None,
            offer_key=life.offer.key if life else None,
            launched_at=life.launched_at if life else None,
            notice_deadline=life.revoke_at if life and life.noticed else None,
            seconds_per_step=t.run_s / t.steps_run if t.steps_run else default_sps,
            cost_usd=t.cost,
            revocations=t.revocations,
            stopping=t.stopping,
            params={"curve_id": t.curve.curve_id},
        )

    # ---- result -------------------------------------------------------------------------
    def _result(self, unfinished: bool) -> RunResult:
        better = (lambda a, b: a > b) if self.s.direction == "maximize" else (lambda a, b: a < b)
        best_final = self.curves[0].final
        for c in self.curves:
            if better(c.final, best_final):
                best_final = c.final
        done = [t for t in self.trials if t.completed]
        pool = done or [t for t in self.trials if t.reported]
        returned: _Trial | None = None
        for t in pool:
            v = t.reported[max(t.reported)]
            if returned is None or better(v, returned.reported[max(returned.reported)]):
                returned = t
        ret_final = returned.curve.final if returned else None
        if ret_final is None:
            regret = float("inf")
        else:
            regret = (best_final - ret_final) if self.s.direction == "maximize" else (ret_final - best_final)
        stopped: dict[str, int] = {}
        for t in self.trials:
            if t.stop_reason:
                stopped[t.stop_reason] = stopped.get(t.stop_reason, 0) + 1
        early = sum(n for r, n in stopped.items() if r not in ("budget", "deadline", "unfinished"))
        cap = self.s.max_cost_usd
        return RunResult(
            policy=self.policy.name,
            seed=-1,
            start=self.start,
            cost_usd=self.billed,
            makespan_hours=(self.last_end - self.start) / 3600.0,
            returned=returned.curve.curve_id if returned else None,
            returned_final=ret_final,
            best_final=best_final,
            regret=regret,
            revocations=sum(t.revocations for t in self.trials),
            lost_hours=sum(t.lost_s for t in self.trials) / 3600.0,
            overhead_hours=sum(t.overhead_s for t in self.trials) / 3600.0,
            early_stopped=early,
            completed=len(done),
            stopped_by=stopped,
            steps_run=sum(t.steps_run for t in self.trials),
            spot_hours=self.spot_s / 3600.0,
            on_demand_hours=self.od_s / 3600.0,
            budget_exceeded=cap is not None and self.billed > cap + 1e-9,
            deadline_missed=self.deadline is not None and self.last_end > self.deadline + 1e-6,
            unfinished=unfinished,
            decisions=self.decisions,
        )


def _iid(life: _Life) -> str:
    return f"i{life.lid}"
