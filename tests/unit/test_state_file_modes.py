"""spotwise's own state is private under the common umask 022 (review-z F7).

The database holds every job's spec (``env`` included) and its errors; the run folders hold
the trials' logs and events; ``local/`` the records of local trial processes. A new SQLite file
is made 0600 before SQLite opens it (its ``-wal`` and ``-shm`` files take its mode), the folders
0700. An existing database keeps the mode it has. (Checkpoint folders keep their shared modes,
on purpose: not tested here.)"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotwise.store import Store


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_a_new_database_and_its_wal_files_are_private(tmp_path: Path) -> None:
    db = tmp_path / "spotwise.db"
    with Store.open(f"sqlite:///{db}") as store:
        store.create_job("m", '{"env": {"HF_TOKEN": "x"}}', "job.yaml", "spot-greedy", "max")
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files == ["spotwise.db", "spotwise.db-shm", "spotwise.db-wal"]  # WAL mode
        assert {p.name: mode(p) for p in tmp_path.iterdir()} == dict.fromkeys(files, 0o600)


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "spotwise.db"
    with Store.open(f"sqlite:///{db}"):
        pass
    db.chmod(0o640)  # the owner's choice: a group that reads the jobs
    with Store.open(f"sqlite:///{db}") as store:
        assert store.list_jobs() == []
    assert mode(db) == 0o640


def test_a_missing_database_is_not_created_by_a_read_only_command(tmp_path: Path) -> None:
    from spotwise.errors import NotFoundError

    with pytest.raises(NotFoundError):
        Store.open_existing(f"sqlite:///{tmp_path / 'none.db'}")
    assert list(tmp_path.iterdir()) == []


def test_the_default_data_folder_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.store.db import default_url

    monkeypatch.delenv("SPOTWISE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = default_url()
    folder = tmp_path / "data" / "spotwise"
    assert url == f"sqlite:///{folder / 'spotwise.db'}"
    assert mode(folder) == 0o700


def test_the_local_process_records_are_private(tmp_path: Path) -> None:
    from spotwise.providers.local_records import ProcRecord, write_record

    root = tmp_path / "home" / "local"
    rec = ProcRecord("local-l-1", "j-1", 1, 1, "s", {}, ["python"], 1, 0.0)
    path = write_record(root, rec)
    assert (mode(root), mode(path.parent)) == (0o700, 0o700)


def test_the_runs_folder_and_a_jobs_run_folder_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's run folder holds its trials' logs and events: `tune` makes ``$SPOTWISE_HOME/runs``
    and the job's folder 0700. Only the folders matter here: the job's loop is skipped, its
    market is a two-line trace and its search is not built (scikit-optimize takes seconds)."""
    from shared_helpers import preflight_spec, write_job_yaml

    from spotwise import jobs
    from spotwise.planner import orchestrator

    monkeypatch.setattr(orchestrator.Orchestrator, "_loop", lambda self: None)
    monkeypatch.setattr(orchestrator, "Search", lambda *a, **k: None)
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,availability_zone,instance_type,spot_available,spot_price_usd_per_hour,"
        "on_demand_price_usd_per_hour\n"
        "2023-04-01 00:00:00,us-east-1a,p3.2xlarge,1,1.0,5.0\n"
        "2023-04-01 00:10:00,us-east-1a,p3.2xlarge,1,1.0,5.0\n"
    )
    local = {"name": "local", "replay": {"trace": str(trace), "speedup": 600}}
    spec = write_job_yaml(tmp_path, preflight_spec(tmp_path, providers=[local]))
    summary = jobs.tune(spec, db=f"sqlite:///{tmp_path / 'spotwise.db'}")
    runs = tmp_path / "home" / "runs"
    assert [p.name for p in runs.iterdir()] == [summary["job_id"]]
    assert (mode(runs), mode(runs / summary["job_id"])) == (0o700, 0o700)
    assert mode(tmp_path / "spotwise.db") == 0o600
