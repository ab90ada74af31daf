"""A failed trial's error quotes the last line of its output, and its output is in the job's
``logs`` folder as ``<instance id>.log`` on every provider: the local provisioner writes it
there as the trial runs; a cloud trial's agent uploads its tail to the trial's artifacts folder
and the orchestrator fetches it when the instance life ends (here: a GCP trial whose folder is
a shared ``file://`` one, so no cloud is needed)."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise import jobs
from spotwise.errors import ProviderError
from spotwise.planner.policy import Phase
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trialbook import LAST_LINE_CHARS, TrialBook, last_line
from spotwise.providers import blobs_open
from spotwise.providers.base import InstanceState, Market, Offer
from spotwise.providers.file_blobs import FileBlobs
from spotwise.spec import ProviderSpec
from spotwise.store import Store

MARKER = "RuntimeError: REVIEW-MARKER: the training script crashed here"
CRASHES = (
    "from spotwise import sdk\n"
    "sdk.report(1, 0.5)\n"
    "print('step 1 done', flush=True)\n"
    "raise RuntimeError('REVIEW-MARKER: the training script crashed here')\n"
)


# ---- the local provider, the real loop ------------------------------------------------------
def _write_trace(path: Path, ticks: int = 900) -> None:
    t0 = datetime(2023, 3, 1, tzinfo=UTC)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["timestamp", "availability_zone", "instance_type", "spot_available",
             "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"]
        )  # fmt: skip
        for i in range(ticks):
            stamp = (t0 + timedelta(seconds=30 * i)).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([stamp, "us-east-1b", "p3.2xlarge", 1, "2.0", "5.0"])


@pytest.mark.timeout(180)
def test_a_crashed_local_trial_names_its_last_output_line(tmp_path: Path) -> None:
    _write_trace(tmp_path / "trace.csv")
    script = tmp_path / "fail.py"
    script.write_text(CRASHES)
    spec = {
        "name": "crash",
        "command": ["python", str(script)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": 5,
        "trials": 1,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [
            {"name": "local", "replay": {"trace": str(tmp_path / "trace.csv"), "speedup": 30.0}}
        ],
        "checkpoint": {"every": 1, "location": str(tmp_path / "ckpt")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(path, db=db, run_root=tmp_path / "runs")
    assert summary["state"] == "failed", summary
    logs = (tmp_path / "runs" / summary["job_id"] / "logs").resolve()
    assert summary["error"] == (
        "every trial failed (1); the last error: the trial exited with code 1 at step 1 of 5; "
        f"its last output line: {MARKER}; see the trial logs in {logs}"
    )
    with Store.open_existing(db) as store:
        errors = store.events(summary["job_id"], kind="error")
    assert [e.detail["last_output"] for e in errors] == [MARKER, MARKER]
    for e in errors:  # each error names its own life's log, which holds the traceback
        log = Path(e.detail["log"])
        assert log.parent == logs and log.name.startswith("local-")
        assert log.read_text().endswith(MARKER + "\n")


# ---- a cloud life: its output fetched from the artifacts folder ------------------------------
OFFER = Offer("gcp", "us-central1", "us-central1-a", "n2-standard-4", Market.SPOT, 0.05, 0.2)


class _Null:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: None


class _Spec:
    def __init__(self, options: dict[str, str]) -> None:
        self.providers = [ProviderSpec(name="gcp", options=options)]


class Book(TrialBook):
    """A TrialBook with a recording store and search, and a GCP job's spec."""

    def __init__(self, tmp_path: Path, options: dict[str, str] | None = None) -> None:
        self.run_dir = tmp_path / "runs" / "j-1"
        self.job_id = "j-1"
        self.spec = _Spec(options or {})  # type: ignore[assignment]
        self.revocations = self.early_stopped = 0
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.store = _Null()
        self.search = _Null()  # type: ignore[assignment]

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.events.append((kind, detail))


def _running(tmp_path: Path, steps: int = 10) -> TrialRun:
    t = TrialRun("t-1", 0, {}, steps_total=steps, checkpoint_every=1)
    t.checkpoint_uri = f"file://{tmp_path}/ckpt/j-1/t-1"
    t.life = Life("l1", "vm-1", OFFER, 0.0, 0, 2)
    t.phase, t.state, t.step = Phase.RUNNING, "running", 3
    return t


def test_a_cloud_trials_output_is_fetched_into_the_logs_folder_and_quoted(
    tmp_path: Path,
) -> None:
    out = b"step 3 done\nTraceback (most recent call last):\n  ...\n" + MARKER.encode() + b"\n"
    FileBlobs(tmp_path / "ckpt" / "j-1" / "t-1").put("output-2.log", out)
    book = Book(tmp_path)
    book._on_exit(_running(tmp_path), 1, InstanceState.RUNNING, 100.0)
    log = tmp_path / "runs" / "j-1" / "logs" / "vm-1.log"
    assert log.read_bytes() == out
    kind, detail = book.events[0]
    assert kind == "error"
    assert detail == {"exit_code": 1, "log": str(log), "last_output": MARKER}


def test_a_cloud_life_that_completed_gets_its_log_too(tmp_path: Path) -> None:
    FileBlobs(tmp_path / "ckpt" / "j-1" / "t-1").put("output-2.log", b"all done\n")
    book = Book(tmp_path)
    t = _running(tmp_path, steps=3)
    t.curve = {3: 0.5}  # it reported its last step: a completed life
    book._on_exit(t, 0, InstanceState.RUNNING, 100.0)
    assert t.state == "completed"
    assert (tmp_path / "runs" / "j-1" / "logs" / "vm-1.log").read_text() == "all done\n"


def test_a_cloud_life_without_output_says_so_in_its_log(tmp_path: Path) -> None:
    book = Book(tmp_path)
    book._on_exit(_running(tmp_path), 1, InstanceState.RUNNING, 100.0)
    where = f"file://{tmp_path}/ckpt/j-1/t-1/output-2.log"
    assert (tmp_path / "runs" / "j-1" / "logs" / "vm-1.log").read_text() == (
        f"spotwise: no output of the trial was uploaded to {where} (it printed nothing, or its "
        "agent could not write there)\n"
    )
    _, detail = book.events[0]
    assert "last_output" not in detail


def test_an_unreadable_folder_is_named_in_the_error_of_a_life_without_an_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The missing-bucket case: the agent could report nothing, the instance ended. The error
    said only "without reporting an exit code"; the failed read says which folder is wrong."""

    def gone(uri: str, *, channel: bool = False) -> Any:
        raise ProviderError(
            f"gcp: reading output-2.log from {uri} failed: 404 bucket does not exist",
            hint="create it",
        )

    monkeypatch.setattr(blobs_open, "open_blobs", gone)
    book = Book(tmp_path)
    t = _running(tmp_path)
    book._on_exit(t, None, InstanceState.TERMINATED, 100.0)
    why = (
        f"gcp: reading output-2.log from file://{tmp_path}/ckpt/j-1/t-1 failed: 404 bucket does "
        "not exist (create it)"
    )
    assert t.last_error == (
        f"the instance ended (terminated) without reporting an exit code; its files cannot be "
        f"read: {why}"
    )
    log = tmp_path / "runs" / "j-1" / "logs" / "vm-1.log"
    assert log.read_text() == f"spotwise: cannot read the trial's output: {why}\n"


def test_the_artifacts_option_moves_where_the_output_is_read(tmp_path: Path) -> None:
    FileBlobs(tmp_path / "art" / "j-1" / "t-1").put("output-2.log", b"boom\n")
    book = Book(tmp_path, {"artifacts": f"file://{tmp_path}/art"})
    t = _running(tmp_path)
    book._on_exit(t, 2, InstanceState.RUNNING, 100.0)
    assert (
        t.last_error == "the trial exited with code 2 at step 3 of 10; its last output line: boom"
    )


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"a\nb\n\n  \n", "b"),
        (b"epoch 1 10%\repoch 1 50%\repoch 1 90%\n", "epoch 1 90%"),
        (b"\x1b[31mValueError: bad\x1b[0m\n", "ValueError: bad"),
        (b"caf\xc3\xa9 \xff\n", "caf\u00e9 \ufffd"),
        (b"", ""),
        (b"x" * 1000, "x" * (LAST_LINE_CHARS - 3) + "..."),
    ],
)
def test_last_line(data: bytes, line: str) -> None:
    assert last_line(data) == line
