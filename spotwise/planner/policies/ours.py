"""``spotwise``: our policy — SpotTune's ideas with the costs SpotTune leaves out.

* **Placement by the expected bill per useful step**: per useful second of the life about to
  start (:func:`~spotwise.planner.cost.life_cost`) times the trial's seconds per step on the
  offer's instance type (:mod:`spotwise.planner.speeds`: measured, or the hardware prior), with
  the refund of a first hour revoked by the provider (as SpotTune), the restart overhead, the
  work a revocation destroys (what the 120 s notice cannot save at this step length and
  checkpoint interval), and the time spent writing checkpoints. A life is
  priced for the work it is *expected* to do: early stopping ends most trials long before
  their last step, so that length is learned from the trials already done.
* **Checkpoint interval adapted to the offer's risk** (Young/Daly, counting only the
  revocations whose notice is too short to save the work), set just before each launch.
* **A fresh first hour only when it pays**: at the last step boundary of an instance's first
  hour the trial moves to a new instance only if the expected cost per useful step of a new
  first hour (restart and checkpoint included) beats staying — SpotTune always moves.
* **Early stopping by the probability of beating the incumbent**: at ``check_at`` fractions of
  the steps (at the first report at or past each; a report past several: at the highest, once)
  the final metric is predicted with EarlyCurve from the reports so far; its 95 % band, widened
  to the spread (and shifted by the bias) of this job's own past predictions at that check step
  once three trials have finished, gives a normal; the trial stops when P(final better than the
  incumbent) < ``epsilon``. The incumbent is the best completed final, or the best lower band
  predicted for a live trial.
* **Deadlines**: Uniform Progress (NSDI'24: on-demand when behind, spot when available, the
  Safety Net), with the revocation predictor standing in for the paper's next-spot-lifetime
  oracle: idle → spot only if the predicted lifetime ``1/λ`` exceeds ``k·d/(k−1)``; on-demand →
  spot when ahead of ``ep(t + 2d)`` (the paper's hysteresis) or when ``1/λ`` exceeds
  ``od_exit_factor × 2k·d/(k−1)``; k is the on-demand/spot price ratio.

``epsilon = 0.1`` and ``od_exit_factor = 3`` were chosen on seeds other than the ones reported
(docs/simulation.md).
"""

from __future__ import annotations

import math
from dataclasses import replace

from spotwise.planner.cost import expected_loss_s, hazard, life_cost, young_daly_every
from spotwise.planner.policies._common import (
    BAND_Z,
    CurvePredictor,
    best_completed,
    can_start_before_deadline,
    checkpoint_on_notice,
    earlycurve_predictor,
    final_value,
    first_fit,
    free_slots,
    guards,
    needy,
    observed,
    projected_spend,
    stop_invalid,
)
from spotwise.planner.policies.asha import judged_reports, mark_judged, report_judged_at
from spotwise.planner.policies.deadline import JobClock, job_clock, leaves_for_spot, spot_fits
from spotwise.planner.policies.finish import by_deadline
from spotwise.planner.policies.odds import _noise, p_beat
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


@register_policy("spotwise")
class Spotwise:
    name = "spotwise"
    uses_forecast = True  # the orchestrator attaches the revocation model (OfferView.p_revoke)

    def __init__(
        self,
        epsilon: float = 0.1,
        check_at: tuple[float, ...] = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.65, 0.8),
        margin: float = 0.02,
        od_exit_factor: float = 3.0,
        predictor: CurvePredictor | None = None,
    ) -> None:
        if not 0.0 < epsilon < 0.5:
            raise ValueError(f"epsilon must be in (0, 0.5), got {epsilon=}")
        if not check_at:  # `check_at: []` (review-ao M4)
            raise ValueError(
                "check_at is an empty list; give at least one fraction in (0, 1), e.g. "
                "check_at: [0.2, 0.5], or leave it out for the default"
            )
        if not all(0.0 < f < 1.0 for f in check_at):
            bad = next(f for f in check_at if not 0.0 < f < 1.0)
            raise ValueError(f"check_at fractions must lie in (0, 1), got {bad:g}")
        self.epsilon, self.check_at, self.margin = epsilon, tuple(sorted(check_at)), margin
        self.od_exit_factor = od_exit_factor
        self.predict = predictor or earlycurve_predictor()
        self.memo: dict[tuple[str, int], tuple[float, float, float]] = {}  # pure memoisation
        self.latest: dict[str, tuple[float, float, float]] = {}

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        stop = guards(view) or stop_invalid(view, event)
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
        """Young/Daly's interval, never longer than the job's ``checkpoint.every``: a notice
        that leaves time to save makes its own checkpoint, but a crash, a lost notice or a
        write slower than assumed loses everything since the last one."""
        p = o.p_revoke if o.is_spot else 0.0
        longest = min(view.checkpoint_every_max or t.steps_total, t.steps_total)
        return young_daly_every(
            t.seconds_on(o), view.checkpoint_s, p, o.horizon_s, view.lead_of(o), longest
        )

    def _per_useful_step(
        self, view: PlannerView, t: TrialView, o: OfferView, *, fresh: bool
    ) -> float:
        """Expected dollars per useful step of a life on ``o``: per useful second of the life
        (:func:`~spotwise.planner.cost.life_cost`) times the trial's seconds per step on
        ``o``'s instance type (a faster instance at a higher price can be the cheaper one)."""
        sps = max(t.seconds_on(o), 1e-9)
        p = o.p_revoke if o.is_spot else 0.0
        every = self._every(view, t, o) if fresh else max(t.checkpoint_every, 1)
        loss = expected_loss_s(sps, every, view.checkpoint_s, view.lead_of(o))
        ckpt_share = (
            view.checkpoint_s / (every * sps + view.checkpoint_s) if view.checkpoint_s > 0 else 0.0
        )
        work = min(self._expected_steps(view, t) * sps, o.horizon_s)
        overhead = 0.0
        if fresh:  # a new life boots, and a running trial first writes its checkpoint
            overhead = view.restart_overhead_s + (view.checkpoint_s if t.step > 0 else 0.0)
        refund = view.refund_of(o) if (o.is_spot and fresh) else 0.0
        return (
            life_cost(
                price_per_hour=o.price,
                p_revoke=p,
                horizon_s=o.horizon_s,
                plan_s=work + overhead,
                refund_s=refund,
                overhead_s=overhead,
                loss_s=loss,
                checkpoint_overhead=ckpt_share,
            ).per_useful_s
            * sps
        )

    def _fresh_hour(self, view: PlannerView, t: TrialView) -> list[Action]:
        if t.phase is not Phase.RUNNING or t.stopping:
            return []
        cur = view.offer(t.offer_key) if t.offer_key else None
        if cur is None or not cur.is_spot or view.refund_of(cur) <= 0:
            return []
        if not crosses_first_hour(view, t):
            return []
        stay = self._per_useful_step(view, t, cur, fresh=False)
        options = [o for o in view.offers if o.available and o.is_spot]
        if not options:
            return []
        move = min(self._per_useful_step(view, t, o, fresh=True) for o in options)
        if move * (1.0 + self.margin) < stay:
            return [Checkpoint(t.trial_id, "spotwise: a fresh first hour pays")]
        return []

    # ---- deadlines ----------------------------------------------------------------------
    def _lifetime_ok(
        self, view: PlannerView, o: OfferView, leaving_on_demand: bool, factor: float = 1.0
    ) -> bool:
        od = [x.price for x in view.offers if not x.is_spot]
        if not od or o.price <= 0:
            return True
        k = min(od) / o.price
        if k <= 1.0:
            return False
        lam = hazard(o.p_revoke, o.horizon_s)
        life = math.inf if lam <= 0 else 1.0 / lam
        need = factor * (2.0 if leaving_on_demand else 1.0) * k * view.restart_overhead_s / (k - 1)
        return life > need

    def _spot_choices(
        self, view: PlannerView, clock: JobClock | None, leaving_od: bool
    ) -> list[OfferView]:
        spots = [o for o in view.offers if o.available and o.is_spot]
        if clock is None:
            return spots
        return [o for o in spots if self._lifetime_ok(view, o, leaving_od)]

    def _back_to_spot(
        self, view: PlannerView, clock: JobClock | None, busy: set[str]
    ) -> list[Action]:
        """Leave on-demand for spot: when ahead of ep(t + 2d) (Uniform Progress's hysteresis),
        or — even behind — when the spot is predicted to live long enough to repay the two
        changeovers several times over (``od_exit_factor`` × 2k·d/(k−1)). The Safety Net
        still holds: never when R(t) < C(t) + 2d."""
        if clock is None or clock.safety_net:
            return []
        choices, frac = self._spot_choices(view, clock, True), self._expected_fraction(view)
        if not choices:
            return []
        ahead = clock.done >= clock.expected(clock.elapsed + 2.0 * clock.d)
        if not ahead and not any(
            self._lifetime_ok(view, o, True, self.od_exit_factor) for o in choices
        ):
            return []
        return [
            Checkpoint(t.trial_id, "spotwise: back to spot")
            for t in view.trials
            if t.phase is Phase.RUNNING
            and not t.stopping
            and t.trial_id not in busy
            and (o := view.offer(t.offer_key or "")) is not None
            and not o.is_spot
            and leaves_for_spot(view, t, choices, frac)  # a spot that still fits once moved
        ]

    def _place(self, view: PlannerView, clock: JobClock | None) -> list[Action]:
        slots = free_slots(view)
        if slots <= 0:
            return []
        od = [o for o in view.offers if o.available and not o.is_spot]
        spots, frac = self._spot_choices(view, clock, False), self._expected_fraction(view)
        actions: list[Action] = []
        spend = projected_spend(view)
        for t in needy(view)[:slots]:
            if not can_start_before_deadline(view, t):
                actions.append(StopEarly(t.trial_id, "deadline"))
                continue
            # the spot types on which the clock keeps its margin at the trial's speed there
            fit = [o for o in spots if clock is None or spot_fits(view, t, o, frac)]
            if clock is not None and (clock.safety_net or (not fit and clock.behind)):
                pool = od
            else:  # ahead and no worthwhile spot, or no deadline: wait for spot
                pool = fit
            if not pool:
                continue
            ranked = sorted(
                pool, key=lambda o: (self._per_useful_step(view, t, o, fresh=True), o.key)
            )
            if pool is od:  # on-demand: those finishing by the deadline first (review-aq AQ1)
                ranked = by_deadline(view, t, ranked)
            action, spend, best = first_fit(view, spend, t, ranked)  # the budget: review-aq AQ4
            if not isinstance(action, Launch):  # stopped for the budget, or waiting for room
                actions += [action] if action is not None else []
                continue
            every = self._every(view, t, best)
            if every != t.checkpoint_every:
                actions.append(SetCheckpointEvery(t.trial_id, every))
            actions.append(action)
        return actions

    # ---- early stopping -----------------------------------------------------------------
    def _expected_fraction(self, view: PlannerView) -> float:
        done = [t for t in view.trials if t.phase is Phase.DONE and t.steps_total]
        if not done:
            return 1.0
        return sum(min(t.step / t.steps_total, 1.0) for t in done) / len(done)

    def _expected_steps(self, view: PlannerView, t: TrialView) -> float:
        """Steps this trial will still run: early stopping ends most trials long before their
        last step, so a life is priced for the work it is expected to do, learned from the
        trials already done (all remaining steps until a few are done)."""
        ends = [d.step for d in view.trials if d.phase is Phase.DONE and d.step > t.step]
        if len(ends) < 3:
            return float(t.remaining_steps)
        return min(sum(ends) / len(ends) - t.step, float(t.remaining_steps))

    def _check_steps(self, total: int) -> set[int]:
        return {max(2, math.ceil(f * total)) for f in self.check_at}

    def _prediction(
        self, t: TrialView, check: int, direction: str, upto: int | None = None
    ) -> tuple[float, float, float]:
        """EarlyCurve on ``t``'s reports up to ``upto`` (default ``check``), the one judged at
        check step ``check``."""
        key = (t.trial_id, check)
        if key not in self.memo:
            steps, values = observed(t, upto=check if upto is None else upto)
            self.memo[key] = self.predict(steps, values, t.steps_total, direction)
        return self.memo[key]

    def _early_stop(self, view: PlannerView, event: Progress) -> list[Action]:
        t = view.trial(event.trial_id)
        total, s = t.steps_total, event.step
        if t.phase is not Phase.RUNNING or s >= total:
            return []
        check = mark_judged(t.curve, s, self._check_steps(total))
        if check is None:
            return []
        final, lo, hi = self.latest[t.trial_id] = self._judged(view, t, check, s)
        bar = self._incumbent(view, t.trial_id)
        if bar is None:
            return []
        p = p_beat(final, lo, hi, bar, view.direction)
        if p < self.epsilon:
            return [StopEarly(t.trial_id, f"P(beat incumbent) < {self.epsilon:g}", final)]
        return []

    def _judged(
        self, view: PlannerView, t: TrialView, check: int, upto: int
    ) -> tuple[float, float, float]:
        """The calibrated prediction of ``t``'s final at check step ``check`` (from its reports
        up to ``upto``, the one judged there) and its band."""
        raw, lo, hi = self._prediction(t, check, view.direction, upto)
        final, sigma = self._calibrated(view, check, raw, (hi - lo) / (2.0 * BAND_Z))
        sigma = max(sigma, _noise(t), 1e-12)
        return final, final - BAND_Z * sigma, final + BAND_Z * sigma

    def _calibrated(
        self, view: PlannerView, step: int, pred: float, band_sd: float
    ) -> tuple[float, float]:
        """EarlyCurve's prediction at ``step`` and its uncertainty, calibrated on this job.

        EarlyCurve's band describes its fit, not how far finals land from its predictions here;
        the trials that finished say that. With fewer than 3 of them: the prediction and its
        band. With 3–4: the mean bias removed (shrunk toward 0 by 3 pseudo-trials), the band
        widened to the spread of the errors. From 5: final ≈ a + b·prediction fitted by least
        squares on them (EarlyCurve over- and under-shoots in proportion), with the regression's
        prediction interval as the uncertainty.
        """
        xs, ys = [], []
        for t in view.trials:
            done = final_value(t)
            got = self.memo.get((t.trial_id, step))
            # a resumed job's trial that passed ``step`` in the earlier run: predicted as that
            # run did (the memo was that run's policy object's)
            if got is None and done is not None:  # the report judged at ``step``: not the last
                hit = report_judged_at(t.curve, step, self._check_steps(t.steps_total))
                if hit is not None and t.start_step >= hit[0] and hit[0] < t.steps_total:
                    got = self._prediction(t, step, view.direction, hit[0])
            if done is not None and got is not None:
                xs.append(got[0])
                ys.append(done)
        n = len(xs)
        if n < 3:
            return pred, band_sd
        res = [y - x for x, y in zip(xs, ys, strict=True)]
        mean = sum(res) / n
        spread = math.sqrt(sum((r - mean) ** 2 for r in res) / (n - 1))
        if n < 5:
            return pred + mean * n / (n + 3.0), max(band_sd, spread)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        b = (
            sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
            if sxx > 1e-12
            else 0.0
        )
        b = min(max(b, 0.0), 1.5)
        a = my - b * mx
        sse = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
        sd = math.sqrt(sse / (n - 2))
        lever = (pred - mx) ** 2 / sxx if sxx > 1e-12 else 0.0
        dof = n - 2  # a t with few degrees of freedom has heavier tails: match its variance
        heavy = math.sqrt(dof / (dof - 2.0)) if dof > 2 else 2.0
        return a + b * pred, sd * heavy * math.sqrt(1.0 + 1.0 / n + lever)

    def _incumbent(self, view: PlannerView, exclude: str) -> float | None:
        bar = best_completed(view)
        for other in view.trials:
            if other.trial_id == exclude or other.phase is Phase.DONE:
                continue
            pred = self.latest.get(other.trial_id) or self._earlier_judgement(view, other)
            if pred is None:
                continue
            sure = pred[1] if view.direction == "maximize" else pred[2]
            if bar is None or view.better(sure, bar):
                bar = sure
        return bar

    def _earlier_judgement(
        self, view: PlannerView, t: TrialView
    ) -> tuple[float, float, float] | None:
        """A resumed job's trial queued again: its prediction at the last check step its
        earlier run reported, as that run's policy held it (its memo is gone)."""
        checks = self._check_steps(t.steps_total)
        judged = [(c, s) for c, s in judged_reports(t.reported, checks) if s < t.steps_total]
        if not judged:
            return None
        check, s = judged[-1]
        then = replace(t, curve=tuple((k, v) for k, v in t.reported if k <= s))
        self.latest[t.trial_id] = self._judged(view, then, check, s)
        return self.latest[t.trial_id]
