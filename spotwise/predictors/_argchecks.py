"""Checks of the ``spotwise predictor`` options, each refusal one line naming the option.

Kept apart from :mod:`spotwise.predictors.service` (the core calls) so that file stays about
what the commands do; these only say what they will not do, and why.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from spotwise.errors import SpecError
from spotwise.units import parse_duration

if TYPE_CHECKING:
    from spotwise.traces import TraceSet


def check_model_name(name: str, field: str) -> None:
    from spotwise.errors import did_you_mean
    from spotwise.predictors.revocation import MODEL_NAMES

    if name not in MODEL_NAMES:
        shown = repr(name) if name else "''"
        raise SpecError(
            f"{field}: unknown model {shown}{did_you_mean(name, list(MODEL_NAMES))}; "
            f"valid: {', '.join(MODEL_NAMES)}"
        )


def fmt(seconds: float) -> str:
    from spotwise.units import format_duration

    return format_duration(seconds) if seconds >= 1 else f"{seconds:g}s"


def trace_span(ts: TraceSet, lo: int, hi: int) -> float:
    """Seconds from tick ``lo`` to tick ``hi - 1`` (0 for fewer than two ticks)."""
    return float(ts.times[hi - 1] - ts.times[lo]) if hi - lo >= 2 else 0.0


def check_horizon(ts: TraceSet, horizon_s: float, which: str = "trace") -> None:
    """A horizon shorter than one tick of the trace sees no revocation (every label 0), one
    longer than the whole trace leaves no labelled tick: say so up front."""
    import math

    gap = ts.gap_seconds
    if ts.n_ticks >= 2 and gap > 0 and horizon_s < gap:
        tick = fmt(math.ceil(gap))
        raise SpecError(
            f"--horizon {fmt(horizon_s)} is shorter than one tick of the {which} ({tick}): "
            f"nothing can be revoked within it; pass at least --horizon {tick}"
        )
    span = trace_span(ts, 0, ts.n_ticks)
    if span < horizon_s:
        raise SpecError(
            f"--horizon {fmt(horizon_s)} is longer than the {which} ({fmt(span)}); "
            "pass a shorter --horizon"
        )


def check_model_horizon(
    ts: TraceSet, model_s: float, horizon_s: float, model: str, trace: str, until: float
) -> None:
    """``predictor eval --model``: a ``--horizon`` other than the saved model's is refused,
    saying what can be done instead. Training a model for it is offered only for a horizon
    the trace supports: at least one tick (else the shortest it supports is said), at most
    half its span (a training and a test part each that long); the hint was "train a model for
    this horizon" for a horizon under a tick, which ``predictor train`` refuses."""
    if abs(model_s - horizon_s) <= 1e-6:
        return
    h, tick, span = fmt(horizon_s), ts.gap_seconds, trace_span(ts, 0, ts.n_ticks)
    hint = f"pass --horizon {fmt(model_s)} (the model's); "
    if ts.n_ticks >= 2 and tick > 0 and horizon_s < tick:
        hint += f"no model can be trained for {h}: it is shorter than one tick of the trace, "
        hint += f"{fmt(math.ceil(tick))}, the shortest horizon it supports"
    elif span < 2 * horizon_s:
        hint += f"no model can be scored for {h} on this trace: it is more than half of it "
        hint += f"({fmt(span)}), which must hold a training and a test part each that long"
    else:
        hint = f"pass --horizon {fmt(model_s)} (the model's), or train one for {h}: spotwise "
        hint += f"predictor train --traces {trace} --horizon {h} --until {until:g} --out "
        hint += "model.pt, then pass --model model.pt"
    raise SpecError(
        f"--model {model} predicts a {fmt(model_s)} horizon but --horizon is {h}", hint=hint
    )


def check_out(out: str | Path) -> Path:
    """``--out``: a file in an existing, writable folder (never creates folders)."""
    p = Path(out).expanduser()
    if not str(out).strip():
        raise SpecError("--out is empty; name the model file to write, e.g. --out model.pt")
    if p.is_dir():
        raise SpecError(f"--out {out}: is a folder; name the file, e.g. --out {p / 'model.pt'}")
    parent = p.parent
    if parent.exists() and not parent.is_dir():
        raise SpecError(f"--out {out}: {parent} is a file, not a folder; pick another path")
    if not parent.is_dir():
        raise SpecError(
            f"--out {out}: folder {parent} does not exist",
            hint=f"create it first (mkdir -p {parent}), or check the path for a typo",
        )
    existed = p.exists()
    try:  # a real write probe (os.access says yes to root even where nothing can be written)
        with p.open("ab"):
            pass
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise SpecError(f"--out {out}: cannot write there ({why}); pick another path") from None
    if not existed:
        p.unlink(missing_ok=True)
    return p


def check_test_fraction(test_fraction: float) -> None:
    if not 0 < test_fraction < 1:
        raise SpecError(
            f"--test-fraction must be in (0, 1), got {test_fraction:g} (the later share of the "
            "ticks kept for testing; default 0.3)"
        )


def check_split(
    ts: TraceSet, horizon_s: float, test_fraction: float, need_train: bool = True
) -> None:
    """``--test-fraction`` leaves a training and a test part each longer than the horizon."""
    from spotwise.predictors._revfeatures import chrono_split

    h = fmt(horizon_s)
    total = trace_span(ts, 0, ts.n_ticks)
    if need_train and total < 2 * horizon_s:  # no fraction works: the horizon is the fix
        raise SpecError(
            f"--horizon {h} is more than half the trace ({fmt(total)}): no --test-fraction "
            f"leaves a training and a test part each longer than it; pass a --horizon under "
            f"{fmt(total / 2)}"
        )
    test0 = chrono_split(ts, horizon_s, test_fraction=test_fraction).test[0]
    train_s = trace_span(ts, 0, test0)
    if need_train and train_s < horizon_s:
        raise SpecError(
            f"--test-fraction {test_fraction:g} leaves {fmt(train_s)} of the trace "
            f"to train on, less than the --horizon {h}; lower --test-fraction"
        )
    if trace_span(ts, test0, ts.n_ticks) < horizon_s:
        raise SpecError(
            f"--test-fraction {test_fraction:g} keeps {fmt(trace_span(ts, test0, ts.n_ticks))} of "
            f"the trace for testing, less than the --horizon {h}; raise --test-fraction"
        )


def check_forecast_horizon(ts: TraceSet, model_s: float, asked: float | str, trace: str) -> None:
    """Refuse a forecast ``--horizon`` (seconds, or as typed: a bare number is seconds) other
    than the model's; training a model for it is offered only where ``predictor train`` takes
    it on ``trace`` (the shipped one; review-ao F9: ``--horizon 60`` was told to train a 1m one)."""
    h, n = parse_duration(asked, field="--horizon"), str(asked).strip()
    if abs(model_s - h) <= 1e-6:
        return
    bare = isinstance(asked, str) and re.fullmatch(r"[0-9.]+", n) is not None
    hint = f"pass --horizon {fmt(model_s)} (the model's); "
    hint += f"no model can be trained for {fmt(h)}: it is "
    if bare and abs(h * 60 - model_s) <= 1e-6:  # minutes meant: the model's horizon
        hint = f"for {n} minutes write --horizon {n}m ({fmt(model_s)}, the model's)"
    elif h < ts.gap_seconds:
        hint += f"shorter than one tick of the trace ({fmt(math.ceil(ts.gap_seconds))})"
    elif h > (span := trace_span(ts, 0, ts.n_ticks)):
        hint += f"longer than the trace ({fmt(span)})"
    else:
        hint = f"spotwise predictor train --traces {trace} --horizon {fmt(h)} --out model.pt, "
        hint += "then pass --model model.pt"
    said = f"{n} is {fmt(h)} (a bare number is seconds)" if bare else fmt(h)
    raise SpecError(f"--horizon {said}: the model predicts a {fmt(model_s)} horizon", hint=hint)
