"""The odds behind ``spotwise``'s early stopping (:mod:`~spotwise.planner.policies.ours`): the
probability that a trial's final metric beats the incumbent, and the step-to-step noise of its
recent curve that floors EarlyCurve's band. Pure: no I/O, no clock.
"""

from __future__ import annotations

import itertools
import math

from spotwise.planner.policies._common import BAND_Z
from spotwise.planner.policy import TrialView


def _noise(t: TrialView, last: int = 5) -> float:
    """Step-to-step noise of the recent curve: a floor under EarlyCurve's band."""
    vals = [v for _, v in t.curve[-last:]]
    if len(vals) < 3:
        return 0.0
    diffs = [b - a for a, b in itertools.pairwise(vals)]
    mean = sum(diffs) / len(diffs)
    return math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) / math.sqrt(2.0)


def p_beat(
    final: float, lo: float, hi: float, bar: float, direction: str, noise: float = 0.0
) -> float:
    """P(the final metric ends better than ``bar``) under a normal with EarlyCurve's band."""
    sigma = max((hi - lo) / (2.0 * BAND_Z), noise, 1e-12)
    z = (bar - final) / sigma if direction == "maximize" else (final - bar) / sigma
    return 0.5 * math.erfc(z / math.sqrt(2.0))
