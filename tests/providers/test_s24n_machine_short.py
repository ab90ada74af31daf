"""This machine's own shortage at a local trial's start (EMFILE, ENFILE, EAGAIN, ENOMEM from
the fork; ENOSPC writing the process record) is not the trial's failure (review-bf BF2).

It was wrapped in a plain ProviderError, which the orchestrator counts as the trial's: two
failed it at $0, a 9-trial job under `ulimit -n 16` ended `succeeded` with 7 trials failed
that never ran, and `spotwise resume` refused it (nothing left to run). Now the start raises
:class:`MachineShortError` naming the limit; the orchestrator pauses launches and tries again,
and only when none of the job runs (nothing will free it) and the refusals go on does the
job end, failed, its error naming the limit and `spotwise resume JOB`, its trial resumable.
"""

from __future__ import annotations

import csv
import errno
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise import jobs
from spotwise.errors import MachineShortError, ProviderError
from spotwise.planner import actions, machine_short
from spotwise.providers import local_exec, local_start
from spotwise.providers.base import LaunchRequest, Market, Offer
from spotwise.providers.local_start import start_trial
from spotwise.store import Store

TINY = Path(__file__).parents[1] / "orchestrator" / "scripts" / "tiny_trial.py"
T0 = datetime(2023, 3, 1, tzinfo=UTC)


def _failing_popen(monkeypatch: pytest.MonkeyPatch, err: int, times: int) -> list[int]:
    """The exec helper's first ``times`` starts fail with ``err``; returns the calls' count."""
    real = subprocess.Popen
    calls = [0]

    def popen(args: Any, *a: Any, **kw: Any) -> Any:
        if local_exec.__file__ in list(args):
            calls[0] += 1
            if calls[0] <= times:
                raise OSError(err, os.strerror(err))
        return real(args, *a, **kw)

    monkeypatch.setattr(local_start.subprocess, "Popen", popen)
    return calls


def _request(tmp_path: Path) -> LaunchRequest:
    offer = Offer("local", "here", "here-a", "cpu", Market.SPOT, 1.0, 2.0)
    tags = {"spotwise:job": "j-1", "spotwise:trial": "t-1", "spotwise:launch": "l-1"}
    return LaunchRequest(offer, ["true"], {}, tags, "l-1", str(tmp_path))


@pytest.mark.parametrize(
    ("err", "limit"),
    [(errno.EMFILE, "ulimit -n"), (errno.EAGAIN, "ulimit -u"), (errno.ENOMEM, "memory")],
)
def test_a_start_this_machine_refuses_names_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, limit: str
) -> None:
    _failing_popen(monkeypatch, err, times=1)
    with pytest.raises(MachineShortError) as got:
        start_trial(_request(tmp_path), "local-l-1", {}, None, tmp_path / "rec")
    assert limit in got.value.limit and os.strerror(err) in str(got.value)
    assert not (tmp_path / "rec").exists() or not list((tmp_path / "rec").rglob("*.json"))


def test_a_record_the_full_disk_refuses_is_a_shortage_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_: Any) -> Path:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(local_start, "write_record", full)
    with pytest.raises(MachineShortError) as got:
        start_trial(_request(tmp_path), "local-l-1", {}, None, tmp_path / "rec")
    assert "disk" in got.value.limit


def test_a_trials_own_failure_to_start_stays_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_popen(monkeypatch, errno.ENOENT, times=1)
    with pytest.raises(ProviderError) as got:
        start_trial(_request(tmp_path), "local-l-1", {}, None, tmp_path / "rec")
    assert not isinstance(got.value, MachineShortError)


def _tune(tmp_path: Path, trials: int = 1) -> tuple[dict[str, Any], str]:
    with (tmp_path / "trace.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["timestamp", "availability_zone", "instance_type", "spot_available",
             "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"]
        )  # fmt: skip
        for i in range(900):
            stamp = (T0 + timedelta(seconds=30 * i)).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([stamp, "us-east-1a", "p3.2xlarge", 1, "1.0", "5.0"])
    spec = {
        "name": "machine-short",
        "command": ["python", str(TINY)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": 3,
        "trials": trials,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [
            {"name": "local", "replay": {"trace": str(tmp_path / "trace.csv"), "speedup": 30.0}}
        ],
        "checkpoint": {"every": 2, "location": str(tmp_path / "ckpt")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    return jobs.tune(path, db=db, run_root=tmp_path / "runs"), db


@pytest.mark.timeout(120)
def test_refused_starts_do_not_fail_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(actions, "THROTTLE_PAUSE_WALL_S", 0.05)
    calls = _failing_popen(monkeypatch, errno.EMFILE, times=3)  # two failed a trial before

    summary, db = _tune(tmp_path)

    assert summary["state"] == "succeeded", summary
    assert summary["completed"] == 1 and calls[0] == 4
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        (trial,) = store.list_trials(job)
        refused = store.events(job, kind="launch_refused_here")
        assert store.events(job, kind="launch_failed") == []
    assert trial.state == "completed"
    assert [("Too many open files" in e.detail["error"]) for e in refused] == [True] * 3


@pytest.mark.timeout(120)
def test_a_shortage_that_lasts_ends_the_job_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(actions, "THROTTLE_PAUSE_WALL_S", 0.05)
    calls = _failing_popen(monkeypatch, errno.EMFILE, times=10**6)

    with pytest.raises(ProviderError) as got:
        _tune(tmp_path)

    said = str(got.value)
    job = got.value.job_id
    assert job is not None and "\n" not in said
    assert "ulimit -n" in said and f"`spotwise resume {job}`" in said
    assert calls[0] == machine_short.MACHINE_SHORT_TRIES  # then no more tries
    with Store.open_existing(f"sqlite:///{tmp_path / 'spotwise.db'}") as store:
        stored = store.get_job(job)
        (trial,) = store.list_trials(job)
    assert stored.state == "failed" and stored.error == said
    assert trial.state == "cancelled"  # what a resume queues again

    monkeypatch.undo()  # the limit raised: the resume runs the trial
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    again = jobs.resume(job, db=db, run_root=tmp_path / "runs")
    assert again["state"] == "succeeded" and again["completed"] == 1, again


def test_while_some_of_the_job_runs_the_pause_stays_short() -> None:
    """review-bg BG4: each refusal doubled the whole local provider's pause up to 5 minutes
    even while trials ran, so a slot their end freed waited out the rest (25 market hours at
    300x). While some of the job runs, the pause is RUNNING_PAUSE_WALL_S, not doubled; with
    nothing running it doubles as a throttled API's."""
    from types import SimpleNamespace

    from spotwise.planner.actions import Actions

    calls: list[str] = []
    run = SimpleNamespace(
        job_id="j-1",
        throttled={},
        lives={"i-0": (None, SimpleNamespace(exited=False))},
        backend=SimpleNamespace(speedup=300.0, now=lambda: 1000.0),
        machine_short=0,
        _event=lambda *a, **k: calls.append("event"),
        _close_failed_launch=lambda *a, **k: calls.append("closed"),
    )
    run._refused_at = lambda now: Actions._refused_at(run, now)  # type: ignore[arg-type]
    run._throttle = lambda provider, now: Actions._throttle(run, provider, now)  # type: ignore[arg-type]
    p = SimpleNamespace(
        offer=SimpleNamespace(provider="local", key="local:z:t:spot"),
        trial=None,
        launch_id="l-1",
        asked_at=1000.0,
    )
    e = MachineShortError("local: cannot start 'python': Too many open files", limit="open files")
    for _ in range(4):
        machine_short.short_of(run, p, e, 1000.0)
    assert run.throttled["local"] == (1000.0 + 5.0 * 300.0, 0.0)  # short, not doubled
    assert run.machine_short == 0  # the job runs: no count toward its end
    run.lives = {}
    for _ in range(3):
        machine_short.short_of(run, p, e, 1000.0)
    assert run.throttled["local"] == (1000.0 + 20.0 * 300.0, 20.0)  # 5, 10, 20: doubling
    assert run.machine_short == 3 and calls.count("closed") == 7
