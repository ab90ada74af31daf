"""Trace-driven simulation of one tuning job under one policy, on a virtual clock.

The policy object is the one ``spotwise tune`` runs: the engine builds the same frozen
:class:`~spotwise.planner.policy.PlannerView`, feeds the same events and executes the same
actions as the orchestrator, against a :class:`~spotwise.providers.replay.ReplayMarket`
(availability and price of a real trace) and recorded learning curves.

The model (docs/simulation.md has the why of each choice):

* A launch takes ``restart_overhead_s`` (boot, setup, restore) before the first step; every
  launch pays it. Steps last their recorded seconds × ``time_scale`` (÷ the offer's speed).
* A trial writes a checkpoint after every ``checkpoint_every`` steps (``checkpoint_s`` each,
  no progress meanwhile); it is valid once written. The observed seconds per step the
  policy sees include these writes, as ``tune`` measures them (report to report).
* A spot instance is revoked at the first tick its zone is unavailable; the notice comes
  ``notice_lead_s`` earlier. A trial asked to leave (notice or ``Checkpoint``) finishes its
  current step, writes a checkpoint and exits; work after the last valid checkpoint is lost
  (``lost_hours``). After a notice the engine lets the provider take the instance when that is
  cheaper (a revoked first hour is free on AWS), else terminates it at once.
* Each instance life is billed by the provider's rule (:mod:`spotwise.providers.billing`).

The bills and the running spend are in :mod:`spotwise.planner.sim_money`, the policy's views
in :mod:`spotwise.planner.sim_view`, the state and results in :mod:`spotwise.planner.sim_state`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from spotwise.planner.policy import (
    Action,
    Checkpoint,
    Event,
    InstanceLost,
    Launch,
    NoticeReceived,
    OfferView,
    Phase,
    Policy,
    Progress,
    SetCheckpointEvery,
    StopEarly,
    Tick,
    TrialAdded,
    TrialExited,
)
from spotwise.planner.sim_curves import RecordedCurve
from spotwise.planner.sim_money import Meter
from spotwise.planner.sim_state import (
    Life,
    RunResult,
    SimSettings,
    TrialState,
    frozen,
    iid,
    make_result,
)
from spotwise.planner.sim_view import RiskFn, SimViews
from spotwise.providers.base import Market, Offer
from spotwise.providers.billing import BillingRule

if TYPE_CHECKING:
    import numpy as np

    from spotwise.providers.replay import ReplayMarket

__all__ = ["Engine", "RiskFn", "RunResult", "SimSettings", "frozen"]


class Engine(SimViews):
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
        self.trials: list[TrialState] = []
        self.heap: list[tuple[float, int, str, int, int, int]] = []
        self.seq = itertools.count()
        self.lids = itertools.count(1)
        self.billed = 0.0
        self.decisions = 0
        self.last_end = start
        self.spot_s = self.od_s = self.refunded_s = 0.0
        self._offers_tick = -1
        self._offer_views: tuple[OfferView, ...] = ()
        self._offers: dict[str, Offer] = {}
        self._tick_offers: list[Offer] = []
        self._next_rev: dict[str, float | None] = {}
        self._risk_now: np.ndarray | None = None
        self._imminent: frozenset[str] | None = None
        self.meter = Meter(market, rule)
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
        return make_result(self, unfinished)

    def _done(self) -> bool:
        return (len(self.trials) >= len(self.curves) or self._budget_spent()) and all(
            t.phase is Phase.DONE for t in self.trials
        )

    def _push(self, t: float, kind: str, idx: int, lid: int, arg: int) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, idx, lid, arg))

    def _admit(self) -> list[Event]:
        active = sum(1 for t in self.trials if t.phase is not Phase.DONE)
        out: list[Event] = []
        if self._budget_spent():
            return out
        while active < self.s.parallel and len(self.trials) < len(self.curves):
            n = len(self.trials)
            t = TrialState(f"t{n:04d}", n, self.curves[n], self.s.checkpoint_every)
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
            return [NoticeReceived(t.tid, iid(life), life.revoke_at or self.now)]
        if kind == "revoke":
            return self._on_revoke(t, life)
        raise AssertionError(kind)

    def _on_step(self, t: TrialState, life: Life) -> list[Event]:
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
            return [TrialExited(t.tid, iid(life), True)]
        if life.leaving:
            self._push(self.now + self.s.checkpoint_s, "exit", t.number, life.lid, k)
            return []
        wait = 0.0
        if k % t.checkpoint_every == 0:
            wait = self.s.checkpoint_s
            t.run_s += wait  # tune times a step from report to report, checkpoint writes included
            life.ckpt_until, life.ckpt_step = self.now + wait, k
            self._push(self.now + wait, "ckpt", t.number, life.lid, k)
        life.token += 1
        self._push(
            self.now + wait + self._step_s(t, k + 1, life.offer),
            "step",
            t.number,
            life.lid,
            life.token,
        )
        return []

    def _on_exit(self, t: TrialState, life: Life, saved: int) -> list[Event]:
        t.checkpoint_step = max(t.checkpoint_step, saved)
        self._end_life(t, life, revoked=False, may_leave_to_provider=life.noticed)
        self._to_waiting(t)
        if life.noticed:
            return [InstanceLost(t.tid, iid(life))]
        return [TrialExited(t.tid, iid(life), False)]

    def _on_revoke(self, t: TrialState, life: Life) -> list[Event]:
        if not life.noticed:
            t.revocations += 1
        base = (
            life.step_end.get(t.checkpoint_step, life.ready_at)
            if t.checkpoint_step > life.start_step
            else life.ready_at
        )
        t.lost_s += max(self.now - max(base, life.ready_at), 0.0)
        self._end_life(t, life, revoked=True)
        self._to_waiting(t)
        return [InstanceLost(t.tid, iid(life))]

    # ---- actions ------------------------------------------------------------------------
    def _execute(self, action: Action) -> list[Event]:
        t = self._trial(action.trial_id)
        if t is None or t.phase is Phase.DONE:
            return []
        if isinstance(action, Launch):
            return self._launch(t, action.offer_key)
        if isinstance(action, StopEarly):
            if t.life is not None:  # a noticed one is left to its provider when cheaper, as in tune
                self._end_life(t, t.life, revoked=False, may_leave_to_provider=t.life.noticed)
            self._close(t, action.reason)
            return []
        if isinstance(action, Checkpoint):
            return self._leave(t)
        if isinstance(action, SetCheckpointEvery):
            t.pending_every = max(1, int(action.every))  # takes effect at the next launch
            t.view = None
        return []

    def _launch(self, t: TrialState, key: str) -> list[Event]:
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
        t.lives += 1
        life = Life(
            next(self.lids),
            offer,
            self.now,
            self.now + self.s.restart_overhead_s,
            t.checkpoint_step,
            revoke_at,
        )
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

    def _leave(self, t: TrialState) -> list[Event]:
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

    # ---- helpers ------------------------------------------------------------------------
    def _step_s(self, t: TrialState, k: int, offer: Offer) -> float:
        k = min(max(k, 1), t.curve.steps)
        return t.curve.step_seconds[k - 1] * self.s.time_scale / max(self.speed(offer), 1e-9)

    def _trial(self, tid: str) -> TrialState | None:
        if tid.startswith("t") and tid[1:].isdigit():
            n = int(tid[1:])
            if n < len(self.trials):
                return self.trials[n]
        return None
