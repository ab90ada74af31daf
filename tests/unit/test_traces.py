"""Trace loading: the shipped SkyNomad trace, tiny hand-written CSV / Can't Be Late files, and
bad files (always a SpecError, never a stray ValueError)."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from spotwise.errors import SpecError
from spotwise.providers.replay import BUILTIN_TRACES, load_market_traces
from spotwise.traces import CBL_EPOCH, TraceSet, load_traces

HEADER = (
    "timestamp,availability_zone,instance_type,spot_available,"
    "spot_price_usd_per_hour,on_demand_price_usd_per_hour\n"
)


@pytest.fixture(scope="module")
def shipped() -> TraceSet:
    return load_market_traces("builtin:skynomad-v100-2023")


def test_shipped_skynomad_trace_shape_and_numbers(shipped: TraceSet) -> None:
    assert shipped.zones == [
        "us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f",
        "us-east-2a", "us-east-2b", "us-west-2a", "us-west-2b", "us-west-2c",
    ]  # fmt: skip
    assert shipped.n_ticks == 20_158
    assert shipped.available.shape == shipped.price.shape == (9, 20_158)
    assert shipped.instance_type == "p3.2xlarge"
    assert shipped.on_demand_price == 3.06
    assert shipped.times[0] == datetime(2023, 2, 15, 22, 8, 16, tzinfo=UTC).timestamp()
    assert np.all(np.diff(shipped.times) > 0)
    assert shipped.gap_seconds == pytest.approx(195, abs=5)
    frac = dict(zip(shipped.zones, shipped.available.mean(axis=1), strict=True))
    assert frac["us-west-2b"] == pytest.approx(0.905, abs=0.002)
    assert frac["us-east-1a"] == pytest.approx(0.167, abs=0.002)
    assert not np.isnan(shipped.price).any()
    assert shipped.price.min() == pytest.approx(0.918)
    assert shipped.price.max() == pytest.approx(1.8464)
    assert shipped.counts is None


def test_the_folder_and_the_csv_inside_it_load_the_same(shipped: TraceSet) -> None:
    folder = BUILTIN_TRACES["skynomad-v100-2023"]
    (csv_gz,) = folder.glob("*.csv.gz")
    direct = load_traces(csv_gz)
    assert direct.zones == shipped.zones
    np.testing.assert_array_equal(direct.available, shipped.available)
    np.testing.assert_array_equal(direct.price, shipped.price)


def test_tiny_skynomad_csv(tmp_path: Path) -> None:
    rows = [
        # zone b has no price at 00:00:00 and 00:00:20 (unknown: filled from its neighbours);
        # a missing row is refused (tests/unit/test_trace_input.py)
        "2023-03-01 00:00:00,us-east-1a,p3.2xlarge,1,1.10,3.06",
        "2023-03-01 00:00:00,us-east-1b,p3.2xlarge,0,,3.06",
        "2023-03-01 00:00:10,us-east-1a,p3.2xlarge,0,1.20,3.06",
        "2023-03-01 00:00:10,us-east-1b,p3.2xlarge,1,2.00,3.06",
        "2023-03-01 00:00:20,us-east-1a,p3.2xlarge,1,1.30,3.06",
        "2023-03-01 00:00:20,us-east-1b,p3.2xlarge,0,,3.06",
    ]
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    ts = load_traces(path)
    assert ts.zones == ["us-east-1a", "us-east-1b"]
    t0 = datetime(2023, 3, 1, tzinfo=UTC).timestamp()
    np.testing.assert_array_equal(ts.times, [t0, t0 + 10, t0 + 20])
    assert ts.gap_seconds == 10.0 and ts.duration_s == 30.0
    np.testing.assert_array_equal(ts.available, [[True, False, True], [False, True, False]])
    # b's leading blank price is back-filled, its blank last price forward-filled
    np.testing.assert_allclose(ts.price, [[1.10, 1.20, 1.30], [2.00, 2.00, 2.00]])
    assert ts.on_demand_price == 3.06 and ts.instance_type == "p3.2xlarge"
    assert ts.tick_at(t0 - 100) == 0 and ts.tick_at(t0 + 15) == 1 and ts.tick_at(t0 + 999) == 2

    gz = tmp_path / "trace.csv.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write(HEADER + "\n".join(rows) + "\n")
    np.testing.assert_array_equal(load_traces(gz).available, ts.available)


def _cbl(path: Path, gap: float, data: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))


def test_tiny_cant_be_late_folder(tmp_path: Path) -> None:
    _cbl(tmp_path / "aws" / "us-west-2a_v100_1.json", 600, [1, 1, 0, 2, 0])
    _cbl(tmp_path / "aws" / "us-west-2b_v100_1.json", 600, [0, 1, 1, 1, 1])
    ts = load_traces(tmp_path)
    # the zones keep the file stem (zone and instance key), which the predictors parse
    assert ts.zones == ["us-west-2a_v100_1", "us-west-2b_v100_1"]
    assert ts.instance_type == "v100_1"
    assert ts.gap_seconds == 600.0 and ts.n_ticks == 5
    np.testing.assert_array_equal(ts.times, CBL_EPOCH + 600 * np.arange(5))
    np.testing.assert_array_equal(
        ts.available, [[True, True, False, True, False], [False, True, True, True, True]]
    )
    assert ts.counts is not None
    np.testing.assert_array_equal(ts.counts, [[1, 1, 0, 2, 0], [0, 1, 1, 1, 1]])
    assert np.isnan(ts.price).all() and ts.price.shape == (2, 5)

    single = load_traces(tmp_path / "aws" / "us-west-2b_v100_1.json")
    assert single.zones == ["us-west-2b_v100_1"] and single.available.shape == (1, 5)


def test_slice_keeps_everything_aligned(tmp_path: Path) -> None:
    _cbl(tmp_path / "us-west-2a_v100_1.json", 60, [1, 0, 1, 1])
    part = load_traces(tmp_path).slice(1, 3)
    assert part.n_ticks == 2 and part.counts is not None and part.counts.shape == (1, 2)
    np.testing.assert_array_equal(part.available, [[False, True]])


def test_trace_arrays_that_disagree_are_refused() -> None:
    with pytest.raises(ValueError, match="disagree"):
        TraceSet(["a"], np.arange(3.0), np.ones((2, 3), bool), np.ones((2, 3)))


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("no_columns.csv", "a,b,c\n1,2,3\n", "lacks columns"),
        ("empty.csv", "", "lacks columns"),
        ("header_only.csv", HEADER, "no rows"),
        ("bad_time.csv", HEADER + "yesterday,us-east-1a,p3.2xlarge,1,1.0,3.06\n", "bad_time.csv"),
        ("bad_price.csv", HEADER + "2023-03-01 00:00:00,us-east-1a,p3,1,cheap,3.06\n", "cheap"),
        ("short_row.csv", HEADER + "2023-03-01 00:00:00,us-east-1a\n", "short_row.csv"),
        ("not_gzip.csv.gz", "plain text, not gzip", "not_gzip.csv.gz"),
        ("bad.json", '{"metadata": {}, "data": [1]}', "Can't Be Late"),
        ("broken.json", "{not json", "Can't Be Late"),
    ],
)
def test_bad_files_raise_spec_error(tmp_path: Path, name: str, content: str, words: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(SpecError) as info:
        load_traces(path)
    assert words in str(info.value)


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_traces(tmp_path / "nope")
    with pytest.raises(SpecError, match="holds no"):
        load_traces(tmp_path)


def test_a_folder_of_several_trace_sets_is_refused_with_the_list(tmp_path: Path) -> None:
    # like the Can't Be Late root: sets of other dates side by side, and an index file
    _cbl(tmp_path / "availability" / "1-node" / "aws-a" / "us-west-2a_v100_1.json", 600, [1, 0])
    _cbl(tmp_path / "availability" / "1-node" / "aws-b" / "us-east-1a_v100_1.json", 195, [1, 1])
    (tmp_path / "trace_index.csv").write_text("path,start_date\n")
    with pytest.raises(SpecError) as info:
        load_traces(tmp_path)
    msg = str(info.value)
    assert "holds 2 trace sets" in msg and "availability/1-node/aws-a" in msg
    assert "pass one of those folders" in msg and "\n" not in msg
    # one of them loads
    assert load_traces(tmp_path / "availability" / "1-node" / "aws-b").gap_seconds == 195


def test_a_trace_index_gives_the_set_its_real_start(tmp_path: Path) -> None:
    folder = tmp_path / "availability" / "1-node" / "aws-10-26-2022"
    _cbl(folder / "us-west-2a_v100_1.json", 600, [1, 0, 1])
    _cbl(folder / "us-west-2b_v100_1.json", 600, [1, 1, 1])
    (tmp_path / "trace_index.csv").write_text(
        "path,kind,start_date\n"
        "availability/1-node/aws-10-26-2022/us-west-2a_v100_1.json,availability,2022-10-26\n"
        "availability/1-node/aws-10-26-2022/us-west-2b_v100_1.json,availability,2022-10-26\n"
    )
    ts = load_traces(folder)
    start = datetime(2022, 10, 26, tzinfo=UTC).timestamp()
    np.testing.assert_array_equal(ts.times, start + 600 * np.arange(3))
    # an index that does not list the files leaves the documented default
    (tmp_path / "trace_index.csv").write_text("path,start_date\nother.json,2021-01-01\n")
    assert load_traces(folder).times[0] == CBL_EPOCH


def test_files_of_one_set_of_different_lengths_or_gaps_are_refused(
    tmp_path: Path,
) -> None:
    _cbl(tmp_path / "a" / "us-east-2b_v100_1.json", 300, [3, 2, 0])
    _cbl(tmp_path / "a" / "us-west-2a_v100_1.json", 300, [16, 16, 15, 14, 0])
    with pytest.raises(SpecError, match="holds files of different lengths"):
        load_traces(tmp_path / "a")  # review-am F2: no longer cut to the shortest silently
    _cbl(tmp_path / "b" / "us-east-2b_v100_1.json", 300, [1, 1])
    _cbl(tmp_path / "b" / "us-west-2a_v100_1.json", 600, [1, 1])
    with pytest.raises(SpecError, match="mixes tick gaps"):
        load_traces(tmp_path / "b")


def test_errors_name_the_option_that_gave_the_path(tmp_path: Path) -> None:
    what = "pass a SkyNomad CSV (file or folder) or a folder of Can't Be Late JSON files"
    with pytest.raises(SpecError) as info:
        load_traces(tmp_path / "nope", field="--train-on")
    assert str(info.value) == f"--train-on: {tmp_path / 'nope'} does not exist; {what}"
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(SpecError, match=r"^--train-on: .*bad\.csv lacks columns"):
        load_traces(bad, field="--train-on")
    _cbl(tmp_path / "set" / "a" / "us-west-2a_v100_1.json", 600, [1, 0])
    _cbl(tmp_path / "set" / "b" / "us-west-2a_v100_1.json", 600, [1, 0])
    with pytest.raises(SpecError, match=r"^--train-on: .* holds 2 trace sets"):
        load_traces(tmp_path / "set", field="--train-on")


def test_an_empty_path_is_refused_not_read_as_the_current_folder() -> None:
    what = "pass a SkyNomad CSV (file or folder) or a folder of Can't Be Late JSON files"
    with pytest.raises(SpecError) as info:
        load_traces("")
    assert str(info.value) == f"--traces is empty; {what}"


def test_a_path_under_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _cbl(tmp_path / "cbl" / "us-west-2a_v100_1.json", 600, [1, 0, 1])
    assert load_traces("~/cbl").n_ticks == 3
