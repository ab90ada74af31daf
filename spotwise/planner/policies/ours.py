"""``spotwise``: our policy — SpotTune's ideas with the costs SpotTune leaves out.

* **Placement by the expected bill of the next hour per useful second** (:func:`life_cost`):
  the refund of a revoked first hour (as SpotTune), but also the restart overhead, the work a
  revocation destroys (what the notice cannot save at this step length and checkpoint
  interval), and the time spent writing checkpoints.
* **Checkpoint interval adapted to the offer's risk** (Young/Daly with only the revocations
  whose notice is too short to save the work), set just before each launch.
* **A fresh first hour only when it pays**: at the last step boundary of an instance's first
  hour it moves to a new instance only if the expected cost per useful second of a new first
  hour (restart and checkpoint included) beats staying, instead of always (SpotTune).
* **Early stopping by the probability of beating the incumbent**: from ``min_fraction`` of the
  steps, every ``1/checks`` of the run, the final metric is predicted with EarlyCurve and its
  band; the trial stops when P(final better than the incumbent) < ``epsilon``. The incumbent is
  the best completed final, or the best lower band predicted for another live trial.
* **Deadlines**: Uniform Progress (NSDI'24) — on-demand when behind, spot when available, the
  hysteresis and the Safety Net — with the revocation predictor standing in for the paper's
  next-spot-lifetime oracle: spot is taken only when its predicted lifetime ``1/λ`` exceeds
  ``k·d/(k−1)`` (``2k·d/(k−1)`` to leave on-demand), k the on-demand/spot price ratio.
"""

from __future__ import annotations

import math

from spotwise.planner.cost import expected_loss_s, hazard, life_cost, young_daly_every
from spotwise.planner.policies._common import (
    CurvePredictor,
    best_completed,
    can_start_before_deadline,
    checkpoint_on_notice,
    earlycurve_predictor,
    free_slots,
    guards,
    needy,
    observed,
    price_per_step,
    projected_spend,
)
from spotwise.planner.policies.deadline import JobClock, job_clock
from spotwise.planner.policies.spottune import crosses_first_hour
from spotwise.planner.policy import (
    Action,
    Checkpoint,
    Event,
    Launch,
    OfferView,
    Phase,
    PlannerView,
    Progress,
    SetCheckpointEvery,
    StopEarly,
    TrialView,
    register_policy,
)

BAND_Z = 1.6449  # EarlyCurve's band is a central 90 % interval


@register_policy("spotwise")
class Spotwise:
    name = "spotwise"

    def __init__(
        self,
        epsilon: float = 0.05,
        min_fraction: float = 0.1,
        checks: int = 20,
        margin: float = 0.02,
        predictor: CurvePredictor | None = None,
    ) -> None:
        if not 0.0 < epsilon < 0.5:
            raise ValueError(f"epsilon must be in (0, 0.5), got {epsilon=}")
        if not 0.0 < min_fraction < 1.0:
            raise ValueError(f"min_fraction must be in (0, 1), got {min_fraction=}")
        if checks < 1:
            raise ValueError(f"checks must be >= 1, got {checks=}")
        self.epsilon, self.min_fraction, self.checks, self.margin = epsilon, min_fraction, checks, margin
        self.predict = predictor or earlycurve_predictor()
        self.memo: dict[tuple[str, int], tuple[float, float, float]] = {}  # pure memoisation
        self.latest: dict[str, tuple[float, float, float]] = {}

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        stop = guards(view)
        if stop:
            return stop
        actions: list[Action] = []
        if isinstance(event, Progress):
            actions += self._early_stop(view, event)
        actions += checkpoint_on_notice(view, event)
        busy = {a.trial_id for a in actions}
        if isinstance(event, Progress) and event.trial_id not in busy:
            actions += self._fresh_hour(view, view.trial(event.trial_id))
        clock = job_clock(view, self._expected_fraction(view))
        actions += self._back_to_spot(view, clock, busy | {a.trial_id for a in actions})
        busy = {a.trial_id for a in actions}
        actions += [a for a in self._place(view, clock) if a.trial_id not in busy]
        return actions

    # ---- money --------------------------------------------------------------------------
    def _every(self, view: PlannerView, t: TrialView, o: OfferView) -> int:
        p = o.p_revoke if o.is_spot else 0.0
        return young_daly_every(t.seconds_per_step, view.checkpoint_s, p, o.horizon_s,
                                view.notice_lead_s, t.steps_total)  # fmt: skip

    def _per_useful_s(self, view: PlannerView, t: TrialView, o: OfferView, *, fresh: bool) -> float:
        sps = max(t.seconds_per_step, 1e-9)
        p = o.p_revoke if o.is_spot else 0.0
        every = self._every(view, t, o) if fresh else max(t.checkpoint_every, 1)
        loss = expected_loss_s(sps, every, view.checkpoint_s, view.notice_lead_s)
        ckpt_share = view.checkpoint_s / (every * sps + view.checkpoint_s) if view.checkpoint_s > 0 else 0.0
        work = min(t.remaining_steps * sps, o.horizon_s)
        overhead = 0.0
        if fresh:  # a new life boots, and a running trial first writes its checkpoint
            overhead = view.restart_overhead_s + (view.checkpoint_s if t.step > 0 else 0.0)
        refund = view.free_if_revoked_within_s if (o.is_spot and fresh) else 0.0
        return life_cost(
            price_per_hour=o.price, p_revoke=p, horizon_s=o.horizon_s, plan_s=work + overhead,
            refund_s=refund, overhead_s=overhead, loss_s=loss, checkpoint_overhead=ckpt_share,
        ).per_useful_s  # fmt: skip

    def _fresh_hour(self, view: PlannerView, t: TrialView) -> list[Action]:
        if t.phase is not Phase.RUNNING or t.stopping or view.free_if_revoked_within_s <= 0:
            return []
        cur = view.offer(t.offer_key) if t.offer_key else None
        if cur is None or not cur.is_spot or not crosses_first_hour(view, t):
            return []
        stay = self._per_useful_s(view, t, cur, fresh=False)
        options = [o for o in view.offers if o.available and o.is_spot]
        if not options:
            return []
        move = min(self._per_useful_s(view, t, o, fresh=True) for o in options)
        if move * (1.0 + self.margin) < stay:
            return [Checkpoint(t.trial_id, "spotwise: a fresh first hour pays")]
        return []

    # ---- deadlines ----------------------------------------------------------------------
    def _lifetime_ok(self, view: PlannerView, o: OfferView, leaving_on_demand: bool) -> bool:
        od = [x.price for x in view.offers if not x.is_spot]
        if not od or o.price <= 0:
            return True
        k = min(od) / o.price
        if k <= 1.0:
            return False
        lam = hazard(o.p_revoke, o.horizon_s)
        life = math.inf if lam <= 0 else 1.0 / lam
        need = (2.0 if leaving_on_demand else 1.0) * k * view.restart_overhead_s / (k - 1.0)
        return life > need

    def _spot_choices(self, view: PlannerView, clock: JobClock | None, leaving_od: bool) -> list[OfferView]:
        spots = [o for o in view.offers if o.available and o.is_spot]
        if clock is None:
            return spots
        return [o for o in spots if self._lifetime_ok(view, o, leaving_od)]

    def _back_to_spot(self, view: PlannerView, clock: JobClock | None, busy: set[str]) -> list[Action]:
        if clock is None or clock.safety_net or not self._spot_choices(view, clock, True):
            return []
        if clock.done < clock.expected(clock.elapsed + 2.0 * clock.d):
            return []
        return [
            Checkpoint(t.trial_id, "spotwise: ahead of uniform progress, back to spot")
            for t in view.trials
            if t.phase is Phase.RUNNING and not t.stopping and t.trial_id not in busy
            and (o := view.offer(t.offer_key or "")) is not None and not o.is_spot
        ]

    def _place(self, view: PlannerView, clock: JobClock | None) -> list[Action]:
        slots = free_slots(view)
        if slots <= 0:
            return []
        od = [o for o in view.offers if o.available and not o.is_spot]
        spots = self._spot_choices(view, clock, False)
        actions: list[Action] = []
        spend = projected_spend(view)
        for t in needy(view)[:slots]:
            if not can_start_before_deadline(view, t):
                actions.append(StopEarly(t.trial_id, "deadline", t.last_metric))
                continue
            if clock is not None and (clock.safety_net or (not spots and clock.behind)):
                pool = od
            elif clock is not None:
                pool = spots  # ahead and no worthwhile spot: wait
            else:
                pool = spots or []  # no deadline: wait for spot rather than pay on-demand
            if not pool:
                continue
            best = min(pool, key=lambda o: (self._per_useful_s(view, t, o, fresh=True), o.key))
            extra = t.remaining_steps * price_per_step(view, t, best)
            if view.max_cost_usd is not None and spend + extra > view.max_cost_usd:
                actions.append(StopEarly(t.trial_id, "budget", t.last_metric))
                continue
            spend += extra
            every = self._every(view, t, best)
            if every != t.checkpoint_every:
                actions.append(SetCheckpointEvery(t.trial_id, every))
            actions.append(Launch(t.trial_id, best.key))
        return actions

    # ---- early stopping -----------------------------------------------------------------
    def _expected_fraction(self, view: PlannerView) -> float:
        done = [t for t in view.trials if t.phase is Phase.DONE and t.steps_total]
        if not done:
            return 1.0
        return sum(min(t.step / t.steps_total, 1.0) for t in done) / len(done)

    def _prediction(self, t: TrialView, step: int) -> tuple[float, float, float]:
        key = (t.trial_id, step)
        if key not in self.memo:
            steps, values = observed(t, upto=step)
            self.memo[key] = self.predict(steps, values, t.steps_total)
        return self.memo[key]

    def _early_stop(self, view: PlannerView, event: Progress) -> list[Action]:
        t = view.trial(event.trial_id)
        total = t.steps_total
        first = max(2, math.ceil(self.min_fraction * total))
        every = max(1, round(total / self.checks))
        s = event.step
        if t.phase is not Phase.RUNNING or s >= total or s < first or (s - first) % every:
            return []
        final, lo, hi = self._prediction(t, s)
        self.latest[t.trial_id] = (final, lo, hi)
        bar = self._incumbent(view, t.trial_id)
        if bar is None:
            return []
        p = p_beat(final, lo, hi, bar, view.direction, noise=_noise(t))
        if p < self.epsilon:
            return [StopEarly(t.trial_id, f"P(beat incumbent)={p:.3f} < {self.epsilon:g}", final)]
        return []

    def _incumbent(self, view: PlannerView, exclude: str) -> float | None:
        bar = best_completed(view)
        for other in view.trials:
            if other.trial_id == exclude or other.phase is Phase.DONE:
                continue
            pred = self.latest.get(other.trial_id)
            if pred is None:
                continue
            sure = pred[1] if view.direction == "maximize" else pred[2]
            if bar is None or view.better(sure, bar):
                bar = sure
        return bar


def _noise(t: TrialView, last: int = 5) -> float:
    """Step-to-step noise of the recent curve: a floor under EarlyCurve's band."""
    vals = [v for _, v in t.curve[-last:]]
    if len(vals) < 3:
        return 0.0
    diffs = [b - a for a, b in zip(vals, vals[1:], strict=False)]
    mean = sum(diffs) / len(diffs)
    return math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) / math.sqrt(2.0)


def p_beat(final: float, lo: float, hi: float, bar: float, direction: str, noise: float = 0.0) -> float:
    """P(the final metric ends better than ``bar``) under a normal with EarlyCurve's band."""
    sigma = max((hi - lo) / (2.0 * BAND_Z), noise, 1e-12)
    z = (bar - final) / sigma if direction == "maximize" else (final - bar) / sigma
    return 0.5 * math.erfc(z / math.sqrt(2.0))
