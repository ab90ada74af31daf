"""EarlyCurve math: a known curve is recovered; stages; robustness; the baselines' interface."""

from __future__ import annotations

import numpy as np
import pytest

from spotwise.errors import SpecError
from spotwise.predictors.earlycurve import (
    CURVE_METHODS,
    fit_curve,
    get_curve_predictor,
    stage_boundaries,
)

K = np.arange(1, 101, dtype=float)


def test_known_loss_curve_is_recovered() -> None:
    v = 0.5 + 1.0 / (0.01 * K**2 + 0.2 * K + 1.0)
    f = fit_curve(K[:30], v[:30], total_steps=100)
    assert f.direction == "min"
    assert f.final == pytest.approx(v[-1], abs=1e-4)
    np.testing.assert_allclose(f.predict(K[:30]), v[:30], atol=1e-4)
    p = f.params[0]
    assert p["A3"] == pytest.approx(0.5, abs=1e-3) and p["A1"] == pytest.approx(0.2, rel=0.05)
    assert f.band[0] <= f.final <= f.band[1]


def test_known_accuracy_curve_is_recovered() -> None:
    v = 80.0 - 1.0 / (0.001 * K**2 + 0.05 * K + 0.1)
    f = fit_curve(K[:30], v[:30], total_steps=100)
    assert f.direction == "max"
    assert f.final == pytest.approx(v[-1], abs=0.02 * (v.max() - v.min()))
    assert f.final > v[29]


def test_stages_from_learning_rate_steps() -> None:
    lr = np.where(K <= 40, 0.1, 0.01)
    v = np.where(
        K <= 40, 1.0 + 1.0 / (0.1 * K + 1.0), 0.6 + 1.0 / (0.5 * np.maximum(K - 40, 0) + 3.0)
    )
    assert stage_boundaries(K, v, lr) == [40]
    f = fit_curve(K[:60], v[:60], lr[:60], total_steps=100)
    assert [s.start for s in f.stages] == [1.0, 41.0]
    assert f.final == pytest.approx(v[-1], abs=0.02)
    # cosine annealing (smooth) is one stage
    cos = 0.1 * 0.5 * (1 + np.cos(np.pi * K / 100)) + 1e-8
    assert stage_boundaries(K, v, cos) == []


def test_stages_detected_without_lr() -> None:
    rng = np.random.default_rng(0)
    v = np.where(K <= 30, 2.0 - 0.005 * K, 1.0 - 0.002 * (K - 30)) + rng.normal(0, 0.005, K.size)
    assert stage_boundaries(K[:60], v[:60]) == [30]
    assert fit_curve(K[:60], v[:60], total_steps=100).boundaries == [31.0]


@pytest.mark.parametrize("name", CURVE_METHODS)
@pytest.mark.parametrize(
    "values",
    [
        [1.0, 1.0],  # 2 points, flat
        [1.0, 0.5],  # 2 points
        [3.0],  # a single point
        [np.nan, 1.0, 2.0],  # a NaN
        np.full(9, 5.0),  # flat
        np.random.default_rng(0).normal(size=19),  # pure noise
        np.linspace(0, 1, 12) ** 3 * 1e6,  # huge values
        -np.logspace(-9, -8, 10),  # tiny values
    ],
)
def test_robust_to_short_flat_noisy(name: str, values: list[float]) -> None:
    k = np.arange(1, len(values) + 1, dtype=float)
    out = get_curve_predictor(name).predict_final(k, np.asarray(values, dtype=float), 50)
    assert all(np.isfinite(out)), out
    assert out[1] <= out[0] <= out[2]


def test_fit_is_fast_and_errors_are_clear() -> None:
    rng = np.random.default_rng(1)
    v = 70 + 10 * (1 - np.exp(-K / 8)) + rng.normal(0, 0.5, K.size)
    fits = [fit_curve(K[:20], v[:20], total_steps=100) for _ in range(20)]
    assert np.median([f.fit_ms for f in fits]) < 50
    with pytest.raises(SpecError, match="unknown name 'earlycurv'"):
        get_curve_predictor("earlycurv")
    with pytest.raises(SpecError, match="at least one"):
        fit_curve(np.array([]), np.array([]))
    with pytest.raises(SpecError, match="direction"):
        fit_curve(K[:5], v[:5], direction="up")
