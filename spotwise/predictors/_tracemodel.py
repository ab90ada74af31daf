"""The plumbing every revocation model shares: the :class:`RevocationModel` interface and
:class:`_TraceModel` (tick bookkeeping, the unavailable → 1.0 rule, the checks at its boundary,
clipping, save).

At the boundary a trace's numbers are checked before any feature is computed from them, as the
trace readers (:mod:`spotwise.traces`) check a file: times finite and increasing, a gap of
seconds ≥ 0 (0: taken from the times), a price > 0 where known. A NaN price is *unknown*, not
wrong (Can't Be Late traces have none): the features then leave price out explicitly
(``has_price`` 0, :mod:`._revfeatures`). A probability that still comes out NaN or infinite is an
error naming the zone and tick, never read as 0.5.

Kept apart from :mod:`spotwise.predictors.revocation` (the models, their registry, ``load``) so
that module stays readable; every public name is re-exported there.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from spotwise.errors import PredictorError, SpecError
from spotwise.predictors._modelfile import atomic_save
from spotwise.predictors._provenance import record

if TYPE_CHECKING:
    import numpy as np

    from spotwise.traces import TraceSet

FORMAT = "spotwise-revocation/1"


@runtime_checkable
class RevocationModel(Protocol):
    """Per-zone probability that spot is revoked within ``horizon_s`` of a tick."""

    name: str
    horizon_s: float
    trained_on: dict[str, Any] | None  # the ticks it was fitted on (._provenance.record)

    def fit(self, traces: TraceSet, horizon_s: float) -> None: ...

    def predict_proba(self, traces: TraceSet, tick: int) -> np.ndarray:
        """(Z,) probabilities given the history up to and including ``tick``."""
        ...

    def predict_series(self, traces: TraceSet, ticks: np.ndarray) -> np.ndarray:
        """(Z, len(ticks)) probabilities; one vectorised pass, for simulation."""
        ...

    def save(self, path: str | Path) -> None: ...


_FIX = "the trace readers (spotwise.traces.load_traces) refuse such a trace"


def check_trace(traces: TraceSet, lo: int, hi: int, seq_len: int) -> None:
    """Refuse a trace whose numbers would make a feature of ticks ``[lo, hi)`` NaN or infinite:
    every time finite and increasing, ``gap_seconds`` finite and ≥ 0, and in the history those
    ticks' features read (a week plus ``seq_len`` ticks before ``lo``) every price > 0 or NaN
    (unknown). One-line PredictorError naming the field and the first bad tick."""
    import numpy as np

    from spotwise.predictors._revfeatures import lookback_ticks

    gap = float(traces.gap_seconds)
    if not (math.isfinite(gap) and gap >= 0):
        raise PredictorError(
            f"trace gap_seconds is {gap:g}: it must be a number of seconds > 0 (or 0: taken "
            f"from the times); {_FIX}"
        )
    times = np.asarray(traces.times, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(times))
    if len(bad):
        raise PredictorError(
            f"trace times[{bad[0]}] is {times[bad[0]]:g}: every tick needs a finite time "
            f"(epoch seconds); {_FIX}"
        )
    back = np.flatnonzero(np.diff(times) <= 0)
    if len(back):
        i = int(back[0]) + 1
        raise PredictorError(
            f"trace times[{i}] is {times[i]:.0f}, not after times[{i - 1}] {times[i - 1]:.0f}: "
            f"times must increase tick by tick; {_FIX}"
        )
    gap = gap or (float(np.median(np.diff(times))) if len(times) > 1 else 1.0)
    s0 = max(0, lo - lookback_ticks(gap, seq_len) - seq_len)  # as features_for reads it
    price = np.asarray(traces.price[:, s0:hi], dtype=np.float64)
    zi, ti = np.nonzero(~(np.isnan(price) | ((price > 0) & np.isfinite(price))))
    if len(zi):
        z, t = int(zi[0]), int(ti[0])
        raise PredictorError(
            f"trace price of zone {traces.zones[z]} at tick {s0 + t} is {price[z, t]:g}: a price "
            f"must be > 0 and finite, or NaN where unknown; {_FIX}"
        )


class _TraceModel:
    """Shared plumbing: tick bookkeeping, the unavailable → 1.0 rule, checks, clipping, save."""

    name = "?"
    seq_len = 1

    def __init__(self) -> None:
        self.horizon_s = 3600.0
        self.fitted = False
        self.trained_on: dict[str, Any] | None = None

    # subclasses implement these two
    def _fit(self, traces: TraceSet, horizon_s: float) -> None:
        raise NotImplementedError

    def _score(
        self, traces: TraceSet, lo: int, hi: int, zi: np.ndarray, ti: np.ndarray
    ) -> np.ndarray:
        """Probabilities of samples (zone, tick) with ticks in [lo, hi)."""
        raise NotImplementedError

    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        raise NotImplementedError

    def _load_state(self, config: dict[str, Any], tensors: dict[str, Any]) -> None:
        raise NotImplementedError

    def fit(self, traces: TraceSet, horizon_s: float) -> None:
        from spotwise.predictors._revfeatures import labels

        if not horizon_s > 0:
            raise SpecError(f"horizon must be > 0 seconds, got {horizon_s=}")
        if traces.n_ticks < 3:
            raise PredictorError(
                f"{self.name}: a trace of {traces.n_ticks} ticks is too short to fit"
            )
        check_trace(traces, 0, traces.n_ticks, self.seq_len)
        _, valid = labels(traces, horizon_s)
        if not valid.any():
            raise PredictorError(
                f"{self.name}: no labelled tick (spot never available, or the trace is shorter "
                f"than the {horizon_s:g} s horizon)"
            )
        self.horizon_s = float(horizon_s)
        self._fit(traces, float(horizon_s))
        self.trained_on = record(traces)
        self.fitted = True

    def predict_proba(self, traces: TraceSet, tick: int) -> np.ndarray:
        import numpy as np

        return self.predict_series(traces, np.array([tick]))[:, 0]

    def predict_series(self, traces: TraceSet, ticks: np.ndarray) -> np.ndarray:
        import numpy as np

        if not self.fitted:
            raise PredictorError(
                f"{self.name}: call fit() (or load a saved model) before predicting"
            )
        ticks = np.asarray(ticks, dtype=np.int64).reshape(-1)
        z = len(traces.zones)
        out = np.ones((z, len(ticks)))
        if len(ticks) == 0:
            return out
        if ticks.min() < 0 or ticks.max() >= traces.n_ticks:
            raise PredictorError(
                f"ticks must lie in [0, {traces.n_ticks}), got {ticks.min()}..{ticks.max()}"
            )
        lo, hi = int(ticks.min()), int(ticks.max()) + 1
        check_trace(traces, lo, hi, self.seq_len)
        zi, col = np.nonzero(traces.available[:, ticks])
        if len(zi):
            p = self._score(traces, lo, hi, zi, ticks[col] - lo)
            bad = np.flatnonzero(~np.isfinite(p))
            if len(bad):  # never read as 0.5: a forecast nobody can trust is an error
                k = int(bad[0])
                raise PredictorError(
                    f"{self.name}: the probability for zone {traces.zones[zi[k]]} at tick "
                    f"{int(ticks[col[k]])} is {p[k]:g}, not a number in [0, 1] (a NaN or "
                    "infinite feature or weight); check the trace and the model file"
                )
            out[zi, col] = np.clip(p, 0.0, 1.0)
        return out

    def save(self, path: str | Path) -> None:
        if not self.fitted:
            raise PredictorError(f"{self.name}: nothing to save, the model is not fitted")
        config, tensors = self._state()
        doc = {
            "format": FORMAT,
            "name": self.name,
            "horizon_s": self.horizon_s,
            "config": config,
            "tensors": tensors,
        }
        if self.trained_on is not None:
            doc["trained_on"] = self.trained_on
        atomic_save(doc, Path(path))
