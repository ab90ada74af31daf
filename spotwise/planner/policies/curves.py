"""Learning-curve pieces the early-stopping policies share (pure: the predictor is imported
lazily). Moved out of :mod:`._common`, which re-exports them."""

from __future__ import annotations

from typing import Protocol

from spotwise.planner.policy import PlannerView, TrialView


class CurvePredictor(Protocol):
    """``(steps, values, total_steps, direction) -> (final, lo, hi)``: EarlyCurve, or a stand-in.

    ``direction`` is the job's (``"maximize"`` / ``"minimize"``); ``(lo, hi)`` is a central 95 %
    band of the final value.
    """

    def __call__(
        self, steps: list[int], values: list[float], total_steps: int, direction: str
    ) -> tuple[float, float, float]: ...


BAND_Z = 1.96  # EarlyCurve's band is a central 95 % interval (spotwise.predictors.earlycurve.Z95)


def earlycurve_predictor(name: str = "earlycurve") -> CurvePredictor:
    """A registered curve predictor's pure ``predict_final`` (imported lazily: numpy/scipy)."""

    def predict(
        steps: list[int], values: list[float], total_steps: int, direction: str
    ) -> tuple[float, float, float]:
        from spotwise.predictors.earlycurve import get_curve_predictor

        opts = {"direction": "max" if direction == "maximize" else "min"}
        try:
            pred = get_curve_predictor(name, **opts)
        except TypeError:  # a predictor without a direction option (last-value, mean-last-k)
            pred = get_curve_predictor(name)
        final, lo, hi = pred.predict_final(steps, values, total_steps)  # type: ignore[arg-type]
        return float(final), float(lo), float(hi)

    return predict


def observed(trial: TrialView, upto: int | None = None) -> tuple[list[int], list[float]]:
    pts = [(s, v) for s, v in trial.curve if upto is None or s <= upto]
    return [s for s, _ in pts], [v for _, v in pts]


def final_value(trial: TrialView) -> float | None:
    """The metric at the last step of a trial that ran to the end, else None."""
    if trial.curve and trial.curve[-1][0] >= trial.steps_total:
        return trial.curve[-1][1]
    return None


def best_completed(view: PlannerView) -> float | None:
    best: float | None = None
    for t in view.trials:
        v = final_value(t)
        if v is not None and (best is None or view.better(v, best)):
            best = v
    return best
