"""The last local-start paths that escaped as bare OSErrors (helper N's notes, s24).

* Opening the trial's log (``logs_dir``) was outside any handler: EMFILE or ENOSPC there left
  ``launch`` as a bare OSError, which the CLI treats as a bug (exit 70). It is now this
  machine's shortage (:class:`MachineShortError`, naming the limit) or, for anything else, a
  ProviderError; nothing is started and nothing is recorded.
* A full disk that failed the trial's start also failed the note written to its log, whose
  OSError replaced the MachineShortError.
* ``write_record`` left its ``.tmp-PID`` file behind on ENOSPC (or any failure).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spotwise.errors import MachineShortError, ProviderError
from spotwise.providers import local, local_records, local_start
from spotwise.providers.base import LaunchRequest, Market, our_tags
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.local_records import ProcRecord, write_record
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.traces import TraceSet

T0 = 1_700_000_000.0


@pytest.fixture
def prov(tmp_path: Path) -> Iterator[LocalProvisioner]:
    traces = TraceSet(
        ["us-east-1a"], T0 + 10.0 * np.arange(4), np.ones((1, 4), dtype=bool),
        np.full((1, 4), 1.0), instance_type="p3.2xlarge", on_demand_price=5.0, gap_seconds=10.0,
    )  # fmt: skip
    p = LocalProvisioner(
        ReplayMarket(traces), MarketClock(T0, 100.0), notice_lead_s=20.0,
        logs_dir=tmp_path / "logs", kill_grace_s=0.5, records_dir=tmp_path / "records",
    )  # fmt: skip
    yield p
    p.shutdown()


def _request(prov: LocalProvisioner, tmp_path: Path) -> LaunchRequest:
    (offer,) = prov.market.offers(at=T0, market=Market.ON_DEMAND)
    tags = our_tags("job-1", "trial-1", "tok")
    return LaunchRequest(offer, (sys.executable, "-c", "pass"), {}, tags, "tok", str(tmp_path))


def _count_popen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    real, calls = local_start.subprocess.Popen, [0]

    def popen(*a: Any, **kw: Any) -> Any:
        calls[0] += 1
        return real(*a, **kw)

    monkeypatch.setattr(local_start.subprocess, "Popen", popen)
    return calls


def _log_open_fails(monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    real = builtins.open

    def fake(file: Any, *a: Any, **kw: Any) -> Any:
        if str(file).endswith(".log"):
            raise OSError(err, os.strerror(err), str(file))
        return real(file, *a, **kw)

    monkeypatch.setattr(local, "open", fake, raising=False)  # the module's name for open


def _records(tmp_path: Path) -> list[Path]:
    root = tmp_path / "records"
    return sorted(root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize(
    ("err", "limit"), [(errno.EMFILE, "ulimit -n"), (errno.ENOSPC, "disk space")]
)
def test_a_log_this_machine_cannot_open_is_its_shortage(
    prov: LocalProvisioner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    err: int,
    limit: str,
) -> None:
    calls = _count_popen(monkeypatch)
    _log_open_fails(monkeypatch, err)
    with pytest.raises(MachineShortError) as got:  # was a bare OSError (the CLI's exit 70)
        prov.launch(_request(prov, tmp_path))
    log = tmp_path / "logs" / "local-tok.log"
    assert str(got.value) == f"local: cannot open the log {log}: {os.strerror(err)}"
    assert limit in got.value.limit and "\n" not in str(got.value)
    assert calls == [0] and prov.describe() == [] and _records(tmp_path) == []


def test_a_logs_folder_the_full_disk_refuses_is_a_shortage_too(
    prov: LocalProvisioner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_: Any, **__: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "mkdir", full)
    with pytest.raises(MachineShortError) as got:
        prov.launch(_request(prov, tmp_path))
    assert "disk space" in got.value.limit and prov.describe() == []


def test_another_failure_to_open_the_log_is_a_provider_error(
    prov: LocalProvisioner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_popen(monkeypatch)
    _log_open_fails(monkeypatch, errno.EACCES)
    with pytest.raises(ProviderError) as got:
        prov.launch(_request(prov, tmp_path))
    assert not isinstance(got.value, MachineShortError)
    assert str(got.value).endswith(f"local-tok.log: {os.strerror(errno.EACCES)}")
    assert calls == [0] and prov.describe() == []


class _FullLog(io.BufferedWriter):
    """A log on a full disk: what the provider writes to it fails with ENOSPC."""

    def write(self, b: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_at_start_stays_the_shortage_not_the_logs_error(
    prov: LocalProvisioner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = builtins.open
    opened: list[_FullLog] = []

    def fake(file: Any, *a: Any, **kw: Any) -> Any:
        if str(file).endswith(".log"):
            opened.append(_FullLog(io.FileIO(file, "ab")))
            return opened[-1]
        return real(file, *a, **kw)

    def full(*_: Any) -> Path:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(local, "open", fake, raising=False)
    monkeypatch.setattr(local_start, "write_record", full)
    with pytest.raises(MachineShortError) as got:  # was the log's bare OSError
        prov.launch(_request(prov, tmp_path))
    assert "disk space" in got.value.limit and "cannot record local-tok" in str(got.value)
    assert opened and opened[0].closed and prov.describe() == []


def _rec() -> ProcRecord:
    return ProcRecord("local-tok", "job-1", 1, 1, "s", {}, ["true"], 1, 0.0)


@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_a_record_the_full_disk_refuses_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    def full(*_: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(local_records.os, where, full)
    with pytest.raises(OSError) as got:
        write_record(tmp_path, _rec())
    assert got.value.errno == errno.ENOSPC
    assert sorted(p.name for p in (tmp_path / "job-1").iterdir()) == []  # was .tmp-PID left


def test_a_record_written_leaves_only_itself(tmp_path: Path) -> None:
    path = write_record(tmp_path, _rec())
    assert sorted(p.name for p in path.parent.iterdir()) == ["local-tok.json"]
