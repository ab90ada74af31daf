"""The "no word" limit itself (:mod:`spotwise.planner.no_word`) and the start-up floor's cap
(helper E, s22): a silent life counted in the floor with its own age kept it "starting" for
ever; it now counts up to the limit (where it is released), a life heard from in full."""

from __future__ import annotations

from spotwise.planner.no_word import no_word_limit_s
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.startup_floor import startup_floor_s
from spotwise.providers.base import Market, Offer


def _life(at: float, heard: bool = False) -> TrialRun:
    offer = Offer("aws", "r", "z", "p3.2xlarge", Market.SPOT, 1.0, 3.0)
    t = TrialRun("t", 0, {}, 10, 5)
    t.life = Life("l", "i", offer, at, 0, 0, heard=heard)
    return t


def test_a_silent_life_counts_in_the_start_up_floor_up_to_the_limit_only() -> None:
    silent, heard = _life(0.0), _life(0.0, heard=True)
    assert startup_floor_s([silent], 5000.0, None, 1800.0) == 1800.0
    assert startup_floor_s([silent], 1000.0, None, 1800.0) == 1000.0
    assert startup_floor_s([heard], 5000.0, None, 1800.0) == 5000.0  # a long start-up: kept


def test_the_limit() -> None:
    t = TrialRun("t", 0, {}, 10, 5)
    assert no_word_limit_s(None, [t], 1.0) == 1800.0
    assert no_word_limit_s(None, [t], 600.0) == 600.0 * 600  # 10 wall minutes of a replay
    assert no_word_limit_s(2.0, [t], 600.0) == 120.0  # set: market minutes, as written
    t.restart_overhead_s = 1000.0
    assert no_word_limit_s(2.0, [t], 1.0) == 3000.0
