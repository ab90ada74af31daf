"""Seconds per step of each trial on each instance type offered: what makes the planner's
"cost per step" a cost per step, not a cost per second (a V100 at twice a T4's price does
more than twice its steps).

The :class:`~spotwise.predictors.throughput.ThroughputModel` of the issue that asked for it,
fed with every trial's measured speed on each instance type it ran on: a trial's own
measurement where it has one; its speed elsewhere rescaled by the two types' hardware; the
type's mean over the job's trials; else the hardware prior, anchored to what was measured.
Before anything is measured the prior is centred on the view's guess (``default_s``: 60 s a
step) for the offers' mean GPU speed, so that a market of one instance type sees the guess
itself, as before; a type without a prior (no GPU: see
:mod:`spotwise.predictors.throughput`) counts as fast as what was measured, or the guess.

Pure: no I/O (the planner core).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from spotwise.predictors.throughput import ThroughputModel, known_speed
from spotwise.providers.base import Offer


def step_seconds(
    measured: Mapping[str, Mapping[str, float]],
    offers: Sequence[Offer],
    wanted: Iterable[str],
    default_s: float,
) -> dict[str, tuple[tuple[str, float], ...]]:
    """For each trial id of ``wanted``: (instance type, estimated market seconds per step) for
    every instance type of ``offers``, by type name. ``measured``: trial id → instance type →
    its measured seconds per step there (its latest life on that type)."""
    hardware: dict[str, Offer] = {}
    for o in offers:
        if known_speed(o) is not None:
            hardware.setdefault(o.instance_type, o)
    types = sorted({o.instance_type for o in offers})
    if not any(measured.values()):
        return {tid: _guessed(types, hardware, default_s) for tid in wanted}
    model = ThroughputModel(reference_seconds=default_s)
    for trial_id, by_type in measured.items():
        for itype, sps in by_type.items():
            if sps > 0:
                model.observe(itype, trial_id, sps, hardware=hardware.get(itype))
    return {
        tid: tuple((t, model.estimate(t, tid, hardware.get(t))) for t in types) for tid in wanted
    }


def _guessed(
    types: list[str], hardware: Mapping[str, Offer], default_s: float
) -> tuple[tuple[str, float], ...]:
    """Nothing measured yet: the guess for the offers' mean GPU speed, scaled by each GPU
    type's prior (a type without one: the guess)."""
    speeds = {t: known_speed(hardware[t]) for t in types if t in hardware}
    known = [s for s in speeds.values() if s]
    mean = sum(known) / len(known) if known else 1.0
    return tuple((t, default_s * mean / s if (s := speeds.get(t)) else default_s) for t in types)
