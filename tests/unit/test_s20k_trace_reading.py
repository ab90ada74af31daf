"""Spot traces are read as they are, or refused (review-am F1-F4): a Can't Be Late count that is
NaN, negative or not a number, a gap_seconds <= 0, files of one set of different lengths, an
empty file, and a SkyNomad CSV with a hole in time are each refused in one line naming the file
(and the index, the lengths or the two timestamps), never read as revocations or as ticks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spotwise.errors import SpecError
from spotwise.traces import load_traces

HEADER = (
    "timestamp,availability_zone,instance_type,spot_available,spot_price_usd_per_hour,"
    "on_demand_price_usd_per_hour\n"
)


def _cbl(path: Path, data: list[Any], gap: Any = 600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_traces(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("--traces: "), msg
    return msg


# ---- F1: a count is a number >= 0; NaN, -1, "1", true, null are not read as "unavailable" ----
@pytest.mark.parametrize(
    ("value", "shown"),
    [(float("nan"), "NaN"), (-1, "-1"), ("1", '"1"'), (True, "true"), (None, "null")],
)
def test_a_count_that_is_not_a_number_at_least_0_is_refused_naming_file_and_index(
    tmp_path: Path, value: Any, shown: str
) -> None:
    _cbl(tmp_path / "s" / "us-west-2a_v100_1.json", [1, 1, 1, 0, 1, 1])
    bad = _cbl(tmp_path / "s" / "us-west-2b_v100_1.json", [1, 1, value, 1, value, 1])
    msg = _refusal(tmp_path / "s")
    assert f"{bad}: data[2] is {shown} (and 1 more such values); a count must be a number >= 0" in (
        msg
    )
    assert "not 'unavailable'" in msg


def test_counts_0_and_up_still_read_as_before(tmp_path: Path) -> None:
    _cbl(tmp_path / "s" / "us-west-2a_v100_1.json", [0, 3, 16, 0.0, 2.5])
    ts = load_traces(tmp_path / "s")
    assert ts.counts is not None and ts.counts.dtype == np.float64
    np.testing.assert_array_equal(ts.counts, [[0, 3, 16, 0, 2.5]])
    np.testing.assert_array_equal(ts.available, [[False, True, True, False, True]])


# ---- F2: files of different lengths are refused, naming them; an empty file by name ---------
def test_files_of_different_lengths_are_refused_with_their_lengths(tmp_path: Path) -> None:
    _cbl(tmp_path / "s" / "us-east-2b_v100_1.json", [3, 2, 0])
    _cbl(tmp_path / "s" / "us-west-2a_v100_1.json", [16, 16, 15, 14, 0])
    _cbl(tmp_path / "s" / "us-west-2c_v100_1.json", [16, 16, 15, 14, 0])
    msg = _refusal(tmp_path / "s")
    assert (
        "holds files of different lengths (values: us-east-2b_v100_1.json: 3; "
        "us-west-2a_v100_1.json, us-west-2c_v100_1.json: 5)"
    ) in msg
    assert "cut every file to its first 3 values" in msg


def test_an_empty_file_is_refused_by_name(tmp_path: Path) -> None:
    _cbl(tmp_path / "s" / "us-west-2a_v100_1.json", [1, 0, 1])
    empty = _cbl(tmp_path / "s" / "us-west-2b_v100_1.json", [])
    assert f"--traces: {empty}: data is empty (no tick)" in _refusal(tmp_path / "s")


# ---- F3: gap_seconds is a number > 0 --------------------------------------------------------
@pytest.mark.parametrize(
    ("gap", "shown"), [(-600, "-600"), (0, "0"), ("600", '"600"'), (None, "null")]
)
def test_a_gap_that_is_not_a_positive_number_is_refused_naming_the_file(
    tmp_path: Path, gap: Any, shown: str
) -> None:
    bad = _cbl(tmp_path / "s" / "us-west-2a_v100_1.json", [1, 0, 1], gap=gap)
    msg = _refusal(tmp_path / "s")
    assert f"{bad}: metadata.gap_seconds is {shown}; it must be a number of seconds > 0" in msg


# ---- F4: a SkyNomad CSV with a hole in time ------------------------------------------------
def _csv(
    path: Path, seconds: list[int], zones: tuple[str, ...] = ("us-east-1a", "us-east-1b")
) -> Path:
    stamps = [f"2023-03-01T{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}" for s in seconds]
    rows = [f"{t},{z},p3.2xlarge,1,1.5,3.06" for t in stamps for z in zones]
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def test_a_hole_in_time_is_refused_naming_the_two_timestamps(tmp_path: Path) -> None:
    seconds = [195 * i for i in range(20)]
    hole = [*seconds[:8], *[s + 4 * 3600 for s in seconds[8:]]]  # 4 h without any row
    msg = _refusal(_csv(tmp_path / "gap.csv", hole))
    assert (
        "no row between 2023-03-01T00:22:45 and 2023-03-01T04:26:00 (4.1 h, the median step "
        "is 195 s): a hole in time is unknown for every zone, not one long tick"
    ) in msg


def test_steps_that_wander_around_the_median_are_read(tmp_path: Path) -> None:
    """Like the shipped trace (steps of 194 to 280 s about a 195 s median): up to 3x is kept."""
    steps = [195, 194, 280, 195, 196, 585, 195, 195, 194, 195]  # 585 = 3 x 195: still a tick
    seconds = [0, *np.cumsum(steps).tolist()]
    ts = load_traces(_csv(tmp_path / "steady.csv", seconds))
    assert ts.n_ticks == 11 and ts.gap_seconds == 195


def test_the_shipped_trace_has_no_hole() -> None:
    root = Path(__file__).resolve().parents[2]
    ts = load_traces(root / "spotwise" / "data" / "skynomad-v100-2023")
    steps = np.diff(ts.times)
    assert ts.n_ticks == 20158 and steps.max() == 280 and np.median(steps) == 195
