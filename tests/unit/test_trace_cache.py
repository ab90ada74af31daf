"""The cache of read SkyNomad grids (spotwise.trace_cache): a large trace is parsed once, and
a cached grid is never stale, never hides a refusal, and never breaks a command when the cache
itself is broken or unwritable."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from spotwise import trace_cache, trace_csv
from spotwise.errors import SpecError
from spotwise.traces import TraceSet, load_traces

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "spotwise" / "data" / "skynomad-v100-2023"
HEADER = (
    "timestamp,availability_zone,instance_type,spot_available,"
    "spot_price_usd_per_hour,on_demand_price_usd_per_hour\n"
)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """A private cache folder, every file cached whatever its size, and the list of the files
    the strict reader really parsed."""
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(trace_cache, "MIN_BYTES", 0)
    parsed: list[Path] = []
    real = trace_csv.read_skynomad_grid

    def counting(path: Path, *, field: str = "--traces") -> trace_csv.SkyGrid:
        parsed.append(path)
        return real(path, field=field)

    monkeypatch.setattr(trace_csv, "read_skynomad_grid", counting)
    return parsed


def _write(path: Path, ticks: int = 4, price: str = "1.5", avail: str = "1") -> Path:
    rows = [
        f"2023-03-01 00:00:{10 * i:02d},{z},p3.2xlarge,{avail if z.endswith('b') else '1'},"
        f"{price},3.06"
        for i in range(ticks)
        for z in ("us-east-1a", "us-east-1b")
    ]
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def _same(a: TraceSet, b: TraceSet) -> None:
    assert (a.zones, a.instance_type, a.on_demand_price, a.gap_seconds, a.source) == (
        b.zones, b.instance_type, b.on_demand_price, b.gap_seconds, b.source,
    )  # fmt: skip
    for x, y in ((a.times, b.times), (a.available, b.available), (a.price, b.price)):
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)


def _entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "home" / "cache" / "traces").glob("*.npz"))


def test_a_trace_is_parsed_once_and_read_back_the_same(tmp_path: Path, reads: list[Path]) -> None:
    path = _write(tmp_path / "t.csv", avail="0", price="")  # NaN prices survive the round trip
    first = load_traces(path)
    again = load_traces(path)
    assert reads == [path]
    _same(first, again)
    assert np.isnan(first.price).all() and not first.available[1].any()
    assert len(_entries(tmp_path)) == 1


def test_a_changed_file_is_parsed_again(tmp_path: Path, reads: list[Path]) -> None:
    path = _write(tmp_path / "t.csv")
    assert load_traces(path).available.all()
    _write(path, avail="0")  # same name, same size, other bytes
    assert not load_traces(path).available[1].any()
    assert reads == [path, path] and len(_entries(tmp_path)) == 2


def test_a_refused_file_is_not_cached_and_is_refused_again(
    tmp_path: Path, reads: list[Path]
) -> None:
    path = _write(tmp_path / "t.csv", price="-1")
    for _ in range(2):
        with pytest.raises(SpecError, match="spot_price_usd_per_hour is -1"):
            load_traces(path)
    assert reads == [path, path] and _entries(tmp_path) == []


def test_an_unreadable_entry_is_a_miss_and_is_rewritten(tmp_path: Path, reads: list[Path]) -> None:
    path = _write(tmp_path / "t.csv")
    want = load_traces(path)
    (entry,) = _entries(tmp_path)
    entry.write_bytes(entry.read_bytes()[:100])  # cut off
    _same(load_traces(path), want)
    _same(load_traces(path), want)
    assert reads == [path, path]  # parsed again once, then read from the rewritten entry


def test_an_unwritable_cache_costs_only_the_speed_up(tmp_path: Path, reads: list[Path]) -> None:
    blocker = tmp_path / "home"
    blocker.write_text("a file where the cache folder would be")
    path = _write(tmp_path / "t.csv")
    _same(load_traces(path), load_traces(path))
    assert reads == [path, path]


def test_small_files_are_not_cached(
    tmp_path: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_cache, "MIN_BYTES", 10_000)
    path = _write(tmp_path / "t.csv")
    load_traces(path)
    load_traces(path)
    assert reads == [path, path] and _entries(tmp_path) == []


def test_the_least_recently_used_entries_are_removed(
    tmp_path: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_cache, "KEEP", 2)
    paths = [_write(tmp_path / f"t{i}.csv", ticks=2 + i) for i in range(3)]
    load_traces(paths[0])
    load_traces(paths[1])
    for e in _entries(tmp_path):
        os.utime(e, (1000.0, 1000.0))  # both long unused
    load_traces(paths[0])  # used again: now the newest
    load_traces(paths[2])  # a third entry: the least recently used (t1's) goes
    assert len(_entries(tmp_path)) == 2
    reads.clear()
    load_traces(paths[0])
    load_traces(paths[2])
    assert reads == []
    load_traces(paths[1])
    assert reads == [paths[1]]


def test_the_shipped_trace_reads_the_same_from_the_cache(tmp_path: Path, reads: list[Path]) -> None:
    parsed = load_traces(SHIPPED)
    cached = load_traces(SHIPPED)
    assert len(reads) == 1
    _same(parsed, cached)
    h = hashlib.sha256()
    for a in (cached.times, cached.available, cached.price):
        h.update(np.ascontiguousarray(a).tobytes())
    assert h.hexdigest()[:16] == "ea9aa76c200acf04"  # test_trace_input's pin


def test_a_cache_folder_that_cannot_be_looked_in_is_only_a_miss(
    tmp_path: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Path.is_file`` raises for a folder one may not enter or a name too long (a root user
    cannot be refused a folder, so the name too long stands for both): the command failed with
    an internal error."""
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / ("x" * 300)))
    path = _write(tmp_path / "t.csv")
    _same(load_traces(path), load_traces(path))
    assert reads == [path, path]


def test_a_file_that_changes_while_it_is_read_is_not_cached(
    tmp_path: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its grid is of whichever bytes the reader saw: stored under the name of the bytes hashed
    before, it would be read back for those bytes later."""
    path = _write(tmp_path / "t.csv")
    before = path.read_bytes()
    real = trace_csv.read_skynomad_grid

    def rewritten_meanwhile(p: Path, *, field: str = "--traces") -> trace_csv.SkyGrid:
        _write(p, avail="0")  # a collector rewrites the trace as it is read
        return real(p, field=field)

    monkeypatch.setattr(trace_csv, "read_skynomad_grid", rewritten_meanwhile)
    assert not load_traces(path).available[1].any()
    assert _entries(tmp_path) == []
    monkeypatch.setattr(trace_csv, "read_skynomad_grid", real)
    path.write_bytes(before)
    assert load_traces(path).available.all()


def test_the_same_bytes_under_a_gz_name_are_still_refused(
    tmp_path: Path, reads: list[Path]
) -> None:
    """The reader opens a ``.gz`` name with gzip: plain bytes so named are refused, cached
    or not."""
    plain = _write(tmp_path / "t.csv")
    load_traces(plain)
    named_gz = tmp_path / "u.csv.gz"
    named_gz.write_bytes(plain.read_bytes())
    with pytest.raises(SpecError, match="cannot be read as a SkyNomad CSV"):
        load_traces(named_gz)


def test_a_refused_small_file_is_read_once(
    tmp_path: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader's refusal is the answer: it was caught as a cache trouble and read again."""
    monkeypatch.setattr(trace_cache, "MIN_BYTES", 10_000)
    path = _write(tmp_path / "t.csv", price="-1")
    with pytest.raises(SpecError, match="spot_price_usd_per_hour is -1"):
        load_traces(path)
    assert reads == [path]
