"""Recorded learning curves as the simulator replays them.

A :class:`RecordedCurve` is one trial configuration's whole training: the metric after each
step and how long each step took. The simulator draws the *same sequence* of curves for every
policy (seeded), so policies differ only in what they do with them.

:func:`load_curve_pool` reuses the predictors' loader (``spotwise.predictors.curves``, which
also resolves a folder and ``builtin:lcbench-subset``): the LCBench layout (epochs 1..50 of one
metric, default ``val_balanced_accuracy``, :data:`LCBENCH_METRIC`) or the long CSV of
``spotwise curve eval`` (metric: ``value``, else its only metric column, as ``curve eval``
picks it). Step times:

* LCBench records cumulative seconds per epoch (``time``): a step lasts the difference.
* The long CSV may carry ``seconds`` (cumulative, like LCBench; then every curve needs them);
  without it every step lasts the throughput prior's seconds per step
  (:data:`DEFAULT_STEP_SECONDS` unless given) and the pool is not ``timed``.

Recorded seconds are then multiplied by ``time_scale`` (see docs/simulation.md: LCBench's tiny
MLPs train in about a minute on a CPU; the scale turns them into GPU trials of hours, keeping
their relative lengths) and divided by the instance's speed (the throughput prior; every offer
of one replayed trace is the same instance type, so the factor is 1 there). The prior of a pool
without recorded time is already market seconds: it is not scaled (the suite runs such a pool
at scale 1, :func:`spotwise.planner.sim_suite.run_suite`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spotwise.errors import SpecError

DEFAULT_STEP_SECONDS = 60.0  # per-step prior when a curve carries no time at all


@dataclass(frozen=True)
class RecordedCurve:
    curve_id: str
    values: tuple[float, ...]  # metric after step 1..n
    step_seconds: tuple[float, ...]  # duration of step 1..n (recorded units, before scaling)

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"curve {self.curve_id}: no steps")
        if len(self.values) != len(self.step_seconds):
            raise ValueError(
                f"curve {self.curve_id}: {len(self.values)} values but "
                f"{len(self.step_seconds)} step times"
            )

    @property
    def steps(self) -> int:
        return len(self.values)

    @property
    def final(self) -> float:
        return self.values[-1]

    @property
    def seconds(self) -> float:
        return float(sum(self.step_seconds))


@dataclass(frozen=True)
class CurvePool:
    curves: tuple[RecordedCurve, ...]
    metric: str
    direction: str  # "maximize" | "minimize"
    source: str = ""
    time_note: str = ""
    timed: bool = True  # step times are recorded seconds (scaled); False: the prior, unscaled

    def __post_init__(self) -> None:
        if not self.curves:
            raise SpecError(f"--curves: {self.source or 'the pool'} holds no curve")

    def __len__(self) -> int:
        return len(self.curves)

    def common_length(self) -> int:
        """Curves in one tuning job share a step budget: the most common length."""
        from collections import Counter

        return Counter(c.steps for c in self.curves).most_common(1)[0][0]

    def uniform(self) -> CurvePool:
        """The curves with the common length (a job has one step budget)."""
        n = self.common_length()
        return CurvePool(
            tuple(c for c in self.curves if c.steps == n),
            self.metric,
            self.direction,
            self.source,
            self.time_note,
            self.timed,
        )


def curve_from_cumulative(
    curve_id: str,
    steps: Sequence[int],
    values: Sequence[float],
    seconds: Sequence[float] | None,
    default_step_s: float = DEFAULT_STEP_SECONDS,
) -> RecordedCurve:
    """Build a curve from (step, value[, cumulative seconds]) rows; step 0 (before training) is
    used only as the time origin."""
    rows = sorted(
        zip(steps, values, seconds if seconds is not None else [None] * len(steps), strict=True)
    )
    t_prev = 0.0
    vals: list[float] = []
    durs: list[float] = []
    last_step = 0
    for s, v, t in rows:
        if s <= 0:
            t_prev = float(t) if t is not None else 0.0
            continue
        if s == last_step:  # duplicate step (LCBench repeats its last epoch): keep the first
            continue
        width = s - last_step
        if t is None:
            dur = default_step_s * width
        else:
            dur = max(float(t) - t_prev, 1e-6)
            t_prev = float(t)
        vals.append(float(v))
        durs.append(dur)
        last_step = s
    return RecordedCurve(str(curve_id), tuple(vals), tuple(durs))


def load_curve_pool(
    path: str | Path,
    *,
    metric: str | None = None,
    direction: str | None = None,
    limit: int | None = None,
) -> CurvePool:
    """The curves under ``path`` (LCBench folder or long CSV, ``builtin:lcbench-subset``), read by
    the predictors' loader (:func:`spotwise.predictors.curves.load_curves`) and turned into timed
    curves."""
    from spotwise.predictors.curves import (
        curves_file,
        dataset_direction,
        is_lcbench,
        load_curves,
        resolve_metric,
    )

    p = curves_file(path)
    lcbench = is_lcbench(p)
    name = resolve_metric(p, metric, lcbench_default=LCBENCH_METRIC)
    curves = load_curves(p, metric=name)
    if direction is None:
        direction = "maximize" if dataset_direction(curves, name) == "max" else "minimize"
    elif direction not in ("maximize", "minimize"):
        raise SpecError(f"--direction: maximize or minimize, got {direction!r}")
    out: list[RecordedCurve] = []
    chosen = list(curves.values())[: limit or None]
    timed = any(c.seconds is not None for c in chosen)
    for c in chosen:
        secs = None if c.seconds is None else [float(x) for x in c.seconds]
        if timed and secs is None:  # one global --time-scale cannot apply to recorded and prior
            raise SpecError(
                f"--curves: {p}: curve {c.curve_id!r} has no recorded seconds at some step while "
                "other curves have them: fill them in, or drop the column to use the prior"
            )
        if secs is not None and not lcbench:
            secs = _cumulative(secs)
        values = [float(x) for x in c.values]
        steps = [int(x) for x in c.steps]
        bad = next(
            ((k, v) for k, v in zip(steps, values, strict=True) if not math.isfinite(v)), None
        )
        if bad is not None:  # a replayed metric must be a number: regret and ranks need it
            raise SpecError(
                f"--curves: {p}: curve {c.curve_id!r} has {bad[1]} at step {bad[0]}; the "
                "simulator replays every value as recorded: drop that curve or fill the value"
            )
        try:
            out.append(curve_from_cumulative(c.curve_id, steps, values, secs))
        except ValueError as e:  # no step >= 1 (a step-0 row only), or a length mismatch
            raise SpecError(f"--curves: {p}: {e}; a curve needs steps 1, 2, ...") from None
    if lcbench:
        note = "LCBench recorded seconds per epoch (cumulative 'time' column)"
    elif timed:
        note = "recorded seconds (per-step or cumulative 'seconds' column)"
    else:
        note = f"no recorded time: {DEFAULT_STEP_SECONDS:g} s per step (the prior, not scaled)"
    return CurvePool(tuple(out), name, direction, str(p), note, timed)


# simulate's LCBench metric (curve fit/eval default to val_accuracy): the documented simulation
# results (docs/simulation.md, bench/results/simulate*.json) are of this one
LCBENCH_METRIC = "val_balanced_accuracy"


def _cumulative(secs: list[float]) -> list[float]:
    """``seconds`` of the long CSV: cumulative if it never falls, else per-step durations."""
    rising = all(b >= a for a, b in itertools.pairwise(secs))
    if rising and len(secs) > 1 and secs[-1] > secs[0]:
        return secs
    return list(itertools.accumulate(secs))
