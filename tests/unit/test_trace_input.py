"""SkyNomad CSV input that used to be misread silently: missing rows read as "unavailable",
timestamps grouped by their text, "no"/"false" read as available, only the first CSV of a
folder read, non-positive prices, conflicting duplicate rows. Each is now read right or refused
with one line naming the place to fix."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from spotwise.errors import SpecError
from spotwise.traces import load_traces

ROOT = Path(__file__).resolve().parents[2]
HEADER = (
    "timestamp,availability_zone,instance_type,spot_available,"
    "spot_price_usd_per_hour,on_demand_price_usd_per_hour\n"
)
T0 = datetime(2023, 3, 1, tzinfo=UTC).timestamp()


def _write(path: Path, rows: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def _grid(ticks: int = 3, zones: tuple[str, ...] = ("us-east-1a", "us-east-1b")) -> list[str]:
    """A complete grid, every zone available at 1.5 USD/h, 10 s ticks from 2023-03-01 00:00."""
    return [
        f"2023-03-01 00:00:{10 * i:02d},{z},p3.2xlarge,1,1.5,3.06"
        for i in range(ticks)
        for z in zones
    ]


def _refusal(path: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_traces(path)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


# ---- 1. a missing (zone, tick) row is unknown, not "unavailable" ---------------------------
def test_a_missing_row_is_refused_naming_the_zone_the_time_and_the_count(tmp_path: Path) -> None:
    rows = _grid(ticks=4)
    rows.remove("2023-03-01 00:00:10,us-east-1b,p3.2xlarge,1,1.5,3.06")
    path = _write(tmp_path / "trace.csv", rows)
    assert _refusal(path) == (
        f"--traces: {path} has no row for zone us-east-1b at 2023-03-01 00:00:10 "
        "(1 zone/timestamp row missing); every zone needs a row at every timestamp "
        "(a missing row is not read as unavailable): add the missing rows or remove the zone"
    )


def test_several_missing_rows_name_the_first_and_count_them_all(tmp_path: Path) -> None:
    rows = [
        r
        for r in _grid(ticks=5, zones=("a", "b", "c"))
        if not r.startswith(
            ("2023-03-01 00:00:30,b", "2023-03-01 00:00:10,c", "2023-03-01 00:00:20,c")
        )
    ]
    path = _write(tmp_path / "trace.csv", rows)
    with pytest.raises(SpecError, match=r"^--train-on: .* has no row for zone c at 2023-03-01 "
                       r"00:00:10 \(3 zone/timestamp rows missing in 2 zones\); "):  # fmt: skip
        load_traces(path, field="--train-on")


def test_a_file_cut_off_in_its_last_tick_is_refused_and_says_so(tmp_path: Path) -> None:
    rows = _grid(ticks=3, zones=("a", "b", "c"))[:-2]  # the last tick has zone a only
    path = _write(tmp_path / "trace.csv", rows)
    assert _refusal(path) == (
        f"--traces: {path} has no row for zone b at 2023-03-01 00:00:20 "
        "(2 zone/timestamp rows missing in 2 zones); the file looks cut off: its last "
        "timestamp 2023-03-01 00:00:20 has rows for 1 of 3 zones; delete the rows at "
        "2023-03-01 00:00:20 or add the missing ones"
    )


def test_a_missing_row_is_refused_by_the_cli_in_one_line_with_exit_2(tmp_path: Path) -> None:
    rows = _grid(ticks=4)
    rows.remove("2023-03-01 00:00:20,us-east-1a,p3.2xlarge,1,1.5,3.06")
    path = _write(tmp_path / "t" / "trace.csv", rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    done = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "predictor", "eval", "--traces",
         str(path.parent), "--models", "base-rate"],
        env={**env, "COLUMNS": "80"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: --traces: {path} has no row for zone us-east-1a at 2023-03-01 00:00:20 "
        "(1 zone/timestamp row missing)"
    )
    assert done.stdout == ""


# ---- 2. ticks are instants, not strings ----------------------------------------------------
def test_timestamps_are_grouped_and_sorted_by_the_instant_they_name(tmp_path: Path) -> None:
    rows = [
        "2023-03-01 00:00:00,us-east-1a,p3.2xlarge,1,1.1,3.06",
        "2023-03-01T00:00:00+00:00,us-east-1b,p3.2xlarge,0,2.1,3.06",
        "2023-03-01T01:00:10+01:00,us-east-1a,p3.2xlarge,0,1.2,3.06",
        "2023-03-01T00:00:10Z,us-east-1b,p3.2xlarge,1,2.2,3.06",
        # 00:00:20 UTC, which sorts before all of the above as text
        "2023-02-28T23:00:20-01:00,us-east-1a,p3.2xlarge,1,1.3,3.06",
        "2023-03-01 00:00:20,us-east-1b,p3.2xlarge,1,2.3,3.06",
    ]
    ts = load_traces(_write(tmp_path / "trace.csv", rows))
    np.testing.assert_array_equal(ts.times, [T0, T0 + 10, T0 + 20])
    np.testing.assert_array_equal(ts.available, [[True, False, True], [False, True, True]])
    np.testing.assert_allclose(ts.price, [[1.1, 1.2, 1.3], [2.1, 2.2, 2.3]])
    assert ts.gap_seconds == 10.0


def test_a_timestamp_that_does_not_parse_names_its_line(tmp_path: Path) -> None:
    rows = _grid(ticks=2)
    rows[2] = "yesterday,us-east-1a,p3.2xlarge,1,1.5,3.06"
    path = _write(tmp_path / "trace.csv", rows)
    assert _refusal(path) == (
        f"--traces: {path} line 4: timestamp 'yesterday' is not an ISO date-time "
        "(e.g. 2023-02-15 22:08:16, read as UTC, or 2023-02-15T22:08:16+00:00)"
    )


# ---- 3. spot_available -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (("1", "0", "1"), [True, False, True]),
        (("yes", "no", "YES"), [True, False, True]),
        (("true", "False", " TRUE "), [True, False, True]),
        (("1.0", "0.0", "No"), [True, False, False]),
    ],
)
def test_spot_available_spellings(
    tmp_path: Path, texts: tuple[str, ...], expected: list[bool]
) -> None:
    rows = [f"2023-03-01 00:00:{10 * i:02d},a,p3,{v},1.0,3.06" for i, v in enumerate(texts)]
    ts = load_traces(_write(tmp_path / "trace.csv", rows))
    np.testing.assert_array_equal(ts.available, [expected])


@pytest.mark.parametrize("value", ["nan", "maybe", "", "2", "-1", "n"])
def test_any_other_spot_available_is_refused_naming_line_and_value(
    tmp_path: Path, value: str
) -> None:
    rows = _grid(ticks=3, zones=("a",))
    rows[1] = f"2023-03-01 00:00:10,a,p3.2xlarge,{value},1.5,3.06"
    path = _write(tmp_path / "trace.csv", rows)
    assert _refusal(path) == (
        f"--traces: {path} line 3: spot_available is {value!r}; use 1 or 0 (or true/false, yes/no)"
    )


# ---- 4. a folder of several CSVs -----------------------------------------------------------
def test_a_folder_of_several_csvs_is_refused_with_their_list(tmp_path: Path) -> None:
    _write(tmp_path / "a_east.csv", _grid(zones=("us-east-1a",)))
    _write(tmp_path / "b_west.csv", _grid(zones=("us-west-2a",)))
    (tmp_path / "v100_summary.csv").write_text("zone,mean\n")  # side files still do not count
    (tmp_path / "trace_index.csv").write_text("path,start_date\n")
    assert _refusal(tmp_path) == (
        f"--traces: {tmp_path} holds 2 CSV files (a_east.csv, b_west.csv); pass the one trace "
        f"CSV, e.g. {tmp_path / 'a_east.csv'} (join the parts of one trace into one file first)"
    )
    assert load_traces(tmp_path / "b_west.csv").zones == ["us-west-2a"]
    (tmp_path / "b_west.csv").unlink()
    assert load_traces(tmp_path).zones == ["us-east-1a"]


# ---- 5. prices -------------------------------------------------------------------------------
@pytest.mark.parametrize("price", ["-1", "0", "0.0", "inf"])
def test_a_price_that_is_not_positive_is_refused_naming_the_line(
    tmp_path: Path, price: str
) -> None:
    rows = _grid(ticks=3)
    rows[3] = f"2023-03-01 00:00:10,us-east-1b,p3.2xlarge,1,{price},3.06"
    path = _write(tmp_path / "trace.csv", rows)
    assert _refusal(path) == (
        f"--traces: {path} line 5: spot_price_usd_per_hour is {price}; a price must be a "
        "number > 0 (leave the cell empty where it is unknown)"
    )


def test_a_price_that_is_not_a_number_is_refused_without_python_words(tmp_path: Path) -> None:
    rows = _grid(ticks=2)
    rows[1] = "2023-03-01 00:00:00,us-east-1b,p3.2xlarge,1,cheap,3.06"
    path = _write(tmp_path / "trace.csv", rows)
    assert _refusal(path) == (
        f"--traces: {path} line 3: spot_price_usd_per_hour 'cheap' is not a number"
    )


def test_empty_and_nan_prices_are_unknown_and_carried_forward(tmp_path: Path) -> None:
    rows = [
        "2023-03-01 00:00:00,a,p3,1,,3.06",
        "2023-03-01 00:00:10,a,p3,1,1.2,3.06",
        "2023-03-01 00:00:20,a,p3,1,nan,3.06",
    ]
    ts = load_traces(_write(tmp_path / "trace.csv", rows))
    np.testing.assert_allclose(ts.price, [[1.2, 1.2, 1.2]])


# ---- 6. duplicate rows -----------------------------------------------------------------------
def test_conflicting_duplicate_rows_are_refused_naming_zone_and_time(tmp_path: Path) -> None:
    rows = [*_grid(ticks=3), "2023-03-01 00:00:10,us-east-1a,p3.2xlarge,0,1.5,3.06"]
    path = _write(tmp_path / "trace.csv", rows)
    assert _refusal(path) == (
        f"--traces: {path} line 8: zone us-east-1a at 2023-03-01 00:00:10 already has a row "
        "(line 4) with other values (spot_available 1 vs 0); keep one row per zone and timestamp"
    )
    rows[-1] = "2023-03-01T00:00:10+00:00,us-east-1a,p3.2xlarge,1,1.7,3.06"
    _write(path, rows)
    assert "(spot_price_usd_per_hour 1.5 vs 1.7)" in _refusal(path)


def test_exact_duplicate_rows_are_accepted(tmp_path: Path) -> None:
    rows = _grid(ticks=3)
    rows += [rows[2], rows[3].replace("2023-03-01 00:00:10", "2023-03-01T00:00:10+00:00")]
    ts = load_traces(_write(tmp_path / "trace.csv", rows))
    assert ts.n_ticks == 3 and ts.available.all()


# ---- the shipped trace reads exactly as before -----------------------------------------------
def test_the_shipped_trace_arrays_are_unchanged() -> None:
    ts = load_traces(ROOT / "spotwise" / "data" / "skynomad-v100-2023")
    h = hashlib.sha256()
    for a in (ts.times, ts.available, ts.price):
        h.update(np.ascontiguousarray(a).tobytes())
    assert h.hexdigest()[:16] == "ea9aa76c200acf04"


# ---- 7. one instance type per trace; a positive on-demand price -----------------------------
def test_rows_of_a_second_instance_type_are_refused(tmp_path: Path) -> None:
    """They were merged into the first type's zones (same zone names), mixing two markets."""
    rows = _grid(ticks=2)
    rows.append("2023-03-01 00:00:00,us-east-1c,g4dn.xlarge,1,0.2,0.53")
    path = _write(tmp_path / "trace.csv", rows)
    assert _refusal(path) == (
        f"--traces: {path} line 6: instance_type g4dn.xlarge after p3.2xlarge; a trace is one "
        "instance type's zones: split the file by instance_type"
    )


@pytest.mark.parametrize("od", ["0", "-3.06", "inf"])
def test_an_on_demand_price_that_is_not_positive_is_refused(tmp_path: Path, od: str) -> None:
    rows = [r.rsplit(",", 1)[0] + f",{od}" for r in _grid(ticks=2)]
    path = _write(tmp_path / "trace.csv", rows)
    shown = f"{float(od):g}"
    assert _refusal(path) == (
        f"--traces: {path} line 2: on_demand_price_usd_per_hour is {shown}; it must be > 0"
    )
