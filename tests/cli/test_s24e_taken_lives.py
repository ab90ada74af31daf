"""Which life each ``revoked`` event says the replayed market took
(:func:`~spotwise.release_local.taken_lives`, review-bc F1): an event from before b8d0d89 names
none, and is matched to its trial's latest life in its zone, exactly: never a life of another
trial, never two events' times for one life, never a life launched after it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from spotwise.release_local import taken_lives

EAST, WEST = "us-east-1f", "us-west-2c"


def _event(n: int, kind: str, trial: str | None, at: float, **detail: Any) -> SimpleNamespace:
    life = detail.pop("life", None)
    return SimpleNamespace(
        id=n, kind=kind, trial_id=trial, instance_id=life, time=at, detail=detail
    )


def _launched(n: int, trial: str, life: str, zone: str, at: float) -> SimpleNamespace:
    return _event(n, "launch", trial, at, life=life, offer=f"local:{zone}:p3.2xlarge:spot")


def test_an_old_event_takes_only_its_own_trials_latest_life_in_its_zone() -> None:
    events = [
        _launched(1, "t-a", "a0", EAST, 100.0),
        _launched(2, "t-b", "b0", WEST, 150.0),
        # t-a's: its latest life is a0 (east), never b0 (t-b's, in the event's zone, later)
        _event(3, "revoked", "t-a", 400.0, zone=WEST),  # another zone than a0's: none
        _event(4, "revoked", "t-b", 500.0, zone=WEST),  # b0
        _event(5, "revoked", "t-b", 600.0, zone=WEST),  # b0 again: a life is taken once
        _launched(6, "t-a", "a1", EAST, 700.0),
        _event(7, "revoked", "t-a", 650.0, zone=EAST),  # before a1's launch on the market clock
        _event(8, "revoked", None, 800.0, zone=EAST),  # no trial: no life
    ]
    assert taken_lives(events, {}) == {"b0": 500.0}


def test_an_event_naming_its_life_keeps_it_and_mixes_with_old_ones() -> None:
    """A job an old spotwise started and HEAD resumed holds both shapes: the named life is
    the newer event's; an unnamed event whose trial's latest life is that one takes none."""
    events = [
        _launched(1, "t-a", "a0", EAST, 100.0),
        _event(2, "revoked", "t-a", 300.0, zone=EAST),  # old shape: a0
        _launched(3, "t-a", "a1", WEST, 300.0),
        _event(4, "revoked", "t-a", 900.0, zone=WEST, launch="a1"),  # HEAD's shape
        _event(5, "revoked", "t-a", 950.0, zone=WEST),  # old shape, a1 taken already
        _event(6, "revoked", "t-a", 990.0, zone=WEST, life="a1"),  # a1 by its instance id
    ]
    assert taken_lives(events, {}) == {"a0": 300.0, "a1": 900.0}


def test_a_launch_whose_offer_names_no_zone_is_matched_by_its_record() -> None:
    events = [
        _event(1, "launch", "t-a", 100.0, life="a0", offer="?"),
        _event(2, "revoked", "t-a", 300.0, zone=EAST),
    ]
    assert taken_lives(events, {"a0": EAST}) == {"a0": 300.0}
    assert taken_lives(events, {"a0": WEST}) == {}
    assert taken_lives(events, {}) == {}
