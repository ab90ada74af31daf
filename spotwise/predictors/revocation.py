"""Revocation predictors: P(spot in a zone becomes unavailable within a horizon | available now).

One small interface, :class:`RevocationModel`, and four implementations registered by name:

* ``base-rate``  — the zone's share of available ticks followed by a revocation within the horizon
  (shrunk toward the pooled rate; unseen zones get the pooled rate);
* ``persistence`` — recent availability: the unavailable share of the last horizon-long window,
  mapped to a probability by isotonic regression on the training ticks;
* ``logistic``   — logistic regression on lagged features (availability, price and its changes,
  clock, other zones of the same instance type; see :mod:`._revfeatures`);
* ``lstm``       — an LSTM over the recent per-tick history plus the same summary features,
  Platt-calibrated on a validation slice at the end of its training period (:mod:`.lstm`).

Every model returns probabilities in [0, 1]. Where spot is *not* obtainable at a tick the answer
is 1.0 (a launch there fails; the question "will it be revoked" presumes a running instance).

``load_pretrained()`` gives the shipped LSTM (trained on the first 70 % of the Apache-2.0 SkyNomad
V100 trace, see ``docs/predictors.md``); its features are zone-agnostic, so it serves any zone.
Models are saved as ``{"name", "horizon_s", "config", "tensors", "trained_on"}`` of plain types
and tensors and loaded with ``torch.load(..., weights_only=True)``: no pickled objects.
``trained_on`` records the ticks a model was fitted on (:mod:`._provenance`), so an evaluation
can refuse to score it on them. The interface and the plumbing the models share (the checks of a
trace at their boundary, the unavailable → 1.0 rule, save) are :mod:`._tracemodel`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotwise.errors import PredictorError, SpecError, did_you_mean
from spotwise.predictors._modelfile import (  # NotAModelFile: re-exported, raised by load
    NotAModelFile,
    finite,
    floats,
    read_model_doc,
)
from spotwise.predictors._provenance import read_record
from spotwise.predictors._tracemodel import (  # the interface and plumbing, re-exported
    FORMAT,
    RevocationModel,
    _TraceModel,
)

if TYPE_CHECKING:
    import numpy as np

    from spotwise.predictors._revfeatures import Features
    from spotwise.traces import TraceSet

MODELS_DIR = Path(__file__).resolve().parent / "models"
PRETRAINED = MODELS_DIR / "revocation-lstm-skynomad-v100.pt"
# what a model file may say: well above what ``spotwise predictor train`` writes (a horizon up to
# its trace's span); an absurd horizon made a forecast overflow instead of being refused
MAX_HORIZON_S = 100 * 365.25 * 86400.0  # 100 years


def _train_samples(traces: TraceSet, horizon_s: float, stride: int = 1) -> tuple[Any, Any, Any]:
    from spotwise.predictors._revfeatures import samples

    return samples(traces, horizon_s, (0, traces.n_ticks), stride)


class BaseRateModel(_TraceModel):
    """The zone's historical revocation rate (pooled rate for zones never seen)."""

    name = "base-rate"
    shrink = 20.0  # pseudo-ticks of the pooled rate added to each zone's count

    def __init__(self) -> None:
        super().__init__()
        self.rates: dict[str, float] = {}
        self.pooled = 0.5

    def _fit(self, traces: TraceSet, horizon_s: float) -> None:
        zi, _, y = _train_samples(traces, horizon_s)
        self.pooled = float((y.sum() + 0.5) / (len(y) + 1.0))
        for i, zone in enumerate(traces.zones):
            yz = y[zi == i]
            self.rates[zone] = float(
                (yz.sum() + self.shrink * self.pooled) / (len(yz) + self.shrink)
            )

    def _score(
        self, traces: TraceSet, lo: int, hi: int, zi: np.ndarray, ti: np.ndarray
    ) -> np.ndarray:
        import numpy as np

        per_zone = np.array([self.rates.get(z, self.pooled) for z in traces.zones])
        return per_zone[zi]

    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"rates": self.rates, "pooled": self.pooled}, {}

    def _load_state(self, config: dict[str, Any], tensors: dict[str, Any]) -> None:
        rates = config["rates"]
        if not isinstance(rates, dict):
            raise TypeError("rates is not a mapping")
        self.rates = {str(k): finite([v], f"rates[{k!r}]", 0.0, 1.0)[0] for k, v in rates.items()}
        (self.pooled,) = finite([config["pooled"]], "pooled", 0.0, 1.0)


class PersistenceModel(_TraceModel):
    """Recent availability: unavailable share of the last horizon, isotonic-calibrated."""

    name = "persistence"

    def __init__(self) -> None:
        super().__init__()
        self.x: list[float] = [0.0, 1.0]
        self.y: list[float] = [0.5, 0.5]

    def _recent(self, traces: TraceSet, lo: int, hi: int) -> np.ndarray:
        from spotwise.predictors._revfeatures import _wmean, ticks_for

        w = ticks_for(self.horizon_s, traces.gap_seconds)
        s0 = max(0, lo - w)
        return 1.0 - _wmean(traces.available[:, s0:hi].astype(float), w)[:, lo - s0 :]

    def _fit(self, traces: TraceSet, horizon_s: float) -> None:
        import numpy as np
        from sklearn.isotonic import IsotonicRegression

        self.horizon_s = horizon_s
        zi, ti, y = _train_samples(traces, horizon_s)
        s = self._recent(traces, 0, traces.n_ticks)[zi, ti]
        iso = IsotonicRegression(y_min=1e-4, y_max=1 - 1e-4, out_of_bounds="clip").fit(s, y)
        self.x = [float(v) for v in np.asarray(iso.X_thresholds_)]
        self.y = [float(v) for v in np.asarray(iso.y_thresholds_)]

    def _score(
        self, traces: TraceSet, lo: int, hi: int, zi: np.ndarray, ti: np.ndarray
    ) -> np.ndarray:
        import numpy as np

        return np.interp(self._recent(traces, lo, hi)[zi, ti], self.x, self.y)

    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"x": self.x, "y": self.y}, {}

    def _load_state(self, config: dict[str, Any], tensors: dict[str, Any]) -> None:
        import itertools

        x, y = finite(config["x"], "x"), finite(config["y"], "y", 0.0, 1.0)
        if not 1 <= len(x) == len(y):
            raise ValueError(f"x has {len(x)} thresholds and y {len(y)}; retrain it")
        if any(b < a for a, b in itertools.pairwise(x)):
            raise ValueError("x is not in increasing order; retrain it")
        self.x, self.y = x, y


class LogisticModel(_TraceModel):
    """Logistic regression on lagged features (standardised), fitted with scikit-learn."""

    name = "logistic"
    n_lags = 12

    def __init__(self, stride: int = 1, C: float = 1.0) -> None:
        super().__init__()
        self.seq_len = self.n_lags
        self.stride, self.C = stride, C
        self.mean: list[float] = []
        self.std: list[float] = []
        self.coef: list[float] = []
        self.intercept = 0.0

    def _design(self, f: Features, zi: np.ndarray, ti: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.concatenate([f.stat[zi, ti], f.lags(zi, ti, self.n_lags)], axis=1).astype(
            np.float64
        )

    def _fit(self, traces: TraceSet, horizon_s: float) -> None:
        import numpy as np
        from sklearn.linear_model import LogisticRegression

        from spotwise.predictors._revfeatures import features_for

        zi, ti, y = _train_samples(traces, horizon_s, self.stride)
        x = self._design(features_for(traces, 0, traces.n_ticks, self.seq_len), zi, ti)
        mean, std = x.mean(0), x.std(0) + 1e-6
        if y.min() == y.max():  # one class only: a constant at the smoothed rate
            self.coef, self.intercept = (
                [0.0] * x.shape[1],
                float(np.log((y.sum() + 0.5) / (len(y) - y.sum() + 0.5))),
            )
        else:
            lr = LogisticRegression(C=self.C, max_iter=2000).fit((x - mean) / std, y)
            self.coef, self.intercept = lr.coef_[0].tolist(), float(lr.intercept_[0])
        self.mean, self.std = mean.tolist(), std.tolist()

    def _score(
        self, traces: TraceSet, lo: int, hi: int, zi: np.ndarray, ti: np.ndarray
    ) -> np.ndarray:
        import numpy as np

        from spotwise.predictors._revfeatures import features_for

        x = self._design(features_for(traces, lo, hi, self.seq_len), zi, ti)
        logit = ((x - np.array(self.mean)) / np.array(self.std)) @ np.array(
            self.coef
        ) + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(logit, -30, 30)))

    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return {
            "mean": self.mean,
            "std": self.std,
            "coef": self.coef,
            "intercept": self.intercept,
        }, {}

    def _load_state(self, config: dict[str, Any], tensors: dict[str, Any]) -> None:
        import math

        from spotwise.predictors._revfeatures import LAG_FEATURES, STAT_FEATURES

        want = len(STAT_FEATURES) + self.n_lags * len(LAG_FEATURES)
        mean, std, coef = (floats(config[k]) for k in ("mean", "std", "coef"))
        if not len(coef) == len(mean) == len(std) == want:
            raise ValueError(
                f"{len(coef)} coefficients for the {want} features this spotwise computes: "
                "built for other features; retrain it"
            )
        (intercept,) = floats([config["intercept"]])
        if not all(math.isfinite(v) for v in [*mean, *std, *coef, intercept]):
            raise ValueError("NaN or infinite weights; retrain it")
        if not all(v > 0 for v in std):
            raise ValueError("a feature's std is 0 or less (training adds 1e-6); retrain it")
        self.mean, self.std, self.coef, self.intercept = mean, std, coef, intercept


def _lstm() -> type[_TraceModel]:
    from spotwise.predictors.lstm import LSTMModel

    return LSTMModel


_REGISTRY: dict[str, Callable[[], type[_TraceModel]]] = {
    "lstm": _lstm,
    "base-rate": lambda: BaseRateModel,
    "persistence": lambda: PersistenceModel,
    "logistic": lambda: LogisticModel,
}
MODEL_NAMES = tuple(_REGISTRY)
# what a job's ``replay.forecast`` and simulate's ``--revocation-model`` may name: the shipped
# model, no forecast, or a registered model fitted on the trace before it is used
FORECAST_NAMES = ("pretrained", "none", *MODEL_NAMES)


def get_revocation_model(name: str, **options: Any) -> RevocationModel:
    """A fresh, unfitted model by name; unknown names raise SpecError listing the valid ones."""
    if name not in _REGISTRY:
        raise SpecError(
            f"revocation model: unknown name {name!r}{did_you_mean(name, list(MODEL_NAMES))}; "
            f"valid: {', '.join(MODEL_NAMES)}"
        )
    model: RevocationModel = _REGISTRY[name]()(**options)
    return model


def load(path: str | Path) -> RevocationModel:
    """A model written by ``save`` (or ``spotwise predictor train``)."""
    p = Path(path)
    doc = read_model_doc(p, FORMAT)
    if doc.get("name") not in _REGISTRY:
        raise NotAModelFile(
            p, f"unknown model {doc.get('name')!r}; this spotwise reads {', '.join(MODEL_NAMES)}"
        )
    model = _REGISTRY[doc["name"]]()()
    try:
        (model.horizon_s,) = floats([doc["horizon_s"]])
        if not 0 < model.horizon_s < float("inf"):
            raise ValueError(f"its horizon_s {model.horizon_s:g} is not a positive duration")
        if model.horizon_s > MAX_HORIZON_S:
            raise ValueError(
                f"its horizon_s {model.horizon_s:g} is more than 100 years "
                f"({MAX_HORIZON_S:g} s); retrain it"
            )
        model._load_state(doc["config"], doc["tensors"])
    except KeyError as e:
        raise NotAModelFile(p, f"an incomplete {doc['name']} model: no {e} entry") from None
    except ValueError as e:  # the models' own checks, e.g. features changed since
        raise NotAModelFile(p, f"{doc['name']}: {e}") from None
    except (TypeError, AttributeError, RuntimeError):  # wrong types or tensor shapes
        raise NotAModelFile(p, f"a malformed {doc['name']} model") from None
    model.trained_on = read_record(doc, p)
    model.fitted = True
    return model


def load_pretrained() -> RevocationModel:
    """The shipped LSTM (1 h horizon, SkyNomad V100 2023 training part); any zone."""
    if not PRETRAINED.is_file():
        raise PredictorError(
            f"the pretrained model {PRETRAINED.name} is missing from the install",
            hint="spotwise predictor train --traces <trace> --out model.pt, then pass --model",
        )
    return load(PRETRAINED)
