"""A relaunch that resumed at its trial's last step from a checkpoint another copy saved.

A lost launch's instance ran a copy of the trial (attempt 0) beside its relaunch (attempt 1) on
the trial's one checkpoint folder; the copy saved the last step first, so the relaunch loaded
it, reported nothing, wrote ``done 6`` and exited 0. Before: read as a crash at step 0 ("it
never reported val_acc"), relaunched on one more instance that did the same, and failed, the
copy's result lost. Now the copy's events file (``events-0.jsonl``: the trial's folder, or its
artifacts folder on a cloud) gives the result, or the trial fails once saying what happened.

On a TrialBook alone here; the whole run on the local provider is the last test, and on the
GCP fake in ``tests/providers/test_s23d_copy_finished_first.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from spotwise import jobs
from spotwise.planner.policy import Phase
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trialbook import TrialBook
from spotwise.providers.base import InstanceState, Market, Offer
from spotwise.spec import ProviderSpec
from spotwise.store import Store

OFFER = Offer("local", "local", "local-a", "cpu", Market.SPOT, 0.05, 0.2)
GCE = Offer("gcp", "us-central1", "us-central1-a", "e2-standard-2", Market.SPOT, 0.02, 0.07)
STEPS = 6
DONE = {"type": "done", "step": STEPS, "time": 1.7e9}


def metric(step: int) -> float:
    return round(1.0 - 1.0 / (step + 1), 6)


def reports(first: int, last: int, checkpoint_every: int = 2) -> list[dict[str, Any]]:
    """What the SDK writes for steps ``first``..``last`` of a trial that checkpoints every 2."""
    out: list[dict[str, Any]] = []
    for step in range(first, last + 1):
        out.append({"type": "report", "step": step, "metric": metric(step), "time": 1.7e9 + step})
        if step % checkpoint_every == 0:
            out.append({"type": "checkpoint", "step": step, "uri": f"/c/{step}", "seconds": 0.1})
    return out


class _Search:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: self.calls.append(name)


class Book(TrialBook):
    def __init__(self, tmp_path: Path, providers: tuple[ProviderSpec, ...] = ()) -> None:
        self.store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
        self.job_id = self.store.create_job("copy", "{}", "", "spot-greedy", "maximize").id
        self.run_dir = tmp_path / "runs" / self.job_id
        metric_ = SimpleNamespace(name="val_acc", direction="maximize")
        self.spec = SimpleNamespace(metric=metric_, providers=providers)  # type: ignore[assignment]
        self.revocations = self.early_stopped = 0
        self.search = _Search()  # type: ignore[assignment]
        self.records: list[dict[str, Any]] = []  # what the life's own events file holds
        provisioner = SimpleNamespace(progress=lambda iid: self.records)
        self.backend = SimpleNamespace(speedup=1.0, provisioner=provisioner)  # type: ignore[assignment]

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.store.add_event(self.job_id, kind, now, trial_id=t.trial_id if t else None, **detail)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.store.events(self.job_id)]


def _relaunch(book: Book, offer: Offer = OFFER, start_step: int = 0) -> TrialRun:
    """Trial 0 on its relaunch (attempt 1), launched to resume from ``start_step``."""
    row = book.store.add_trial(book.job_id, 0, {"lr": 0.01})
    t = TrialRun(row.id, 0, {"lr": 0.01}, STEPS, 2)
    t.phase, t.state, t.attempt = Phase.RUNNING, "running", 1
    t.step = t.checkpoint_step = start_step
    t.life = Life("launch-1", "i-1", offer, 0.0, start_step, 1)
    return t


def _write(folder: Path, attempt: int, records: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (folder / f"events-{attempt}.jsonl").write_text(lines)


def _exit(book: Book, t: TrialRun, code: int = 0) -> Any:
    assert t.life is not None
    book.records = [DONE]  # it resumed at step 6: nothing to run, nothing reported
    book._read_progress(t, t.life, 9.0)
    return book._on_exit(t, code, InstanceState.TERMINATED, 10.0)


def test_the_copys_reports_give_the_relaunch_its_result(tmp_path: Path) -> None:
    book = Book(tmp_path)
    t = _relaunch(book)
    _write(book.run_dir / t.trial_id, 0, [*reports(1, STEPS), DONE])

    ev = _exit(book, t)

    assert (t.state, t.phase, t.failures, t.final_metric) == ("completed", Phase.DONE, 0, 0.857143)
    assert getattr(ev, "finished", False)
    row = book.store.get_trial(t.trial_id)
    assert (row.state.value, row.final_metric, row.step, row.checkpoint_step) == (
        "completed",
        0.857143,
        6,
        6,
    )
    assert row.best_metric == 0.857143
    obs = [(o.step, o.metric, o.wall_time) for o in book.store.observations(t.trial_id)]
    assert obs == [(s, metric(s), 1.7e9 + s) for s in range(1, 7)]
    assert book.kinds() == ["result_recovered", "completed"]
    (said,) = book.store.events(book.job_id, kind="result_recovered")
    assert said.detail == {
        "attempt": 1,
        "from_attempt": 0,
        "step": 6,
        "metric": 0.857143,
        "reports": 6,
        "message": (
            "attempt 1 resumed at step 6 of 6 from a checkpoint another copy of the trial "
            "saved, with no step left to run; its result is attempt 0's report at step 6"
        ),
    }
    assert book.search.calls == ["tell"]


def test_only_the_steps_after_the_trials_own_are_taken(tmp_path: Path) -> None:
    """Its own lives reported up to 4 (checkpoint 4); the copy resumed from 4 too and ran on."""
    book = Book(tmp_path)
    t = _relaunch(book, start_step=4)
    t.curve = {s: 0.1 for s in range(1, 5)}  # its own values: kept
    _write(book.run_dir / t.trial_id, 0, [*reports(3, STEPS)])

    _exit(book, t)

    assert t.state == "completed"
    assert t.curve == {1: 0.1, 2: 0.1, 3: 0.1, 4: 0.1, 5: metric(5), 6: metric(6)}
    assert [o.step for o in book.store.observations(t.trial_id)] == [5, 6]


def test_the_newest_copy_that_saved_the_last_step_is_the_one_read(tmp_path: Path) -> None:
    """Attempts 0 and 2 (two lost launches) both reported step 6; only 0 saved it: its value.
    (The relaunch is attempt 3 here.)"""
    book = Book(tmp_path)
    t = _relaunch(book)
    t.attempt = 3
    assert t.life is not None
    t.life.attempt = 3
    folder = book.run_dir / t.trial_id
    _write(folder, 0, reports(1, STEPS))
    _write(folder, 2, [{"type": "report", "step": 6, "metric": 0.5}])

    _exit(book, t)

    assert (t.state, t.final_metric) == ("completed", metric(6))
    (said,) = book.store.events(book.job_id, kind="result_recovered")
    assert (said.detail["attempt"], said.detail["from_attempt"]) == (3, 0)


def test_no_report_of_the_last_step_fails_the_trial_once_without_a_relaunch(
    tmp_path: Path,
) -> None:
    """The copy saved step 6 and said it was done, but its report there is not in its events
    (a script that skips it): the relaunch resumed there, and so would another. (A copy that
    has not said done is awaited first: test_s23i_copy_report_awaited.)"""
    book = Book(tmp_path)
    t = _relaunch(book)
    copy = [r for r in reports(1, STEPS) if not (r["type"] == "report" and r["step"] == 6)]
    _write(book.run_dir / t.trial_id, 0, [*copy, DONE])

    ev = _exit(book, t)

    why = (
        "attempt 1 resumed at step 6 of 6 from a checkpoint another copy of the trial saved "
        "(attempt 0, at step 6), with no step left to run, and no report of val_acc at step 6 "
        "was found in the events of attempt 0; the trial's result is lost, and it is not "
        "launched again (a relaunch would resume there too)"
    )
    assert (t.state, t.phase, t.failures, t.last_error) == ("failed", Phase.DONE, 1, why)
    assert not getattr(ev, "finished", True)
    assert book.kinds() == ["error", "failed"]
    (error,) = book.store.events(book.job_id, kind="error")
    assert error.detail["error"] == why
    assert (error.detail["exit_code"], error.detail["last_reported_step"]) == (0, 5)
    assert (error.detail["from_attempt"], error.detail["resumed_step"]) == (0, 6)
    row = book.store.get_trial(t.trial_id)
    assert (row.state.value, row.final_metric, row.checkpoint_step) == ("failed", None, 6)
    assert book.search.calls == ["forget"]  # not its point's fault: it may be proposed again


def test_a_copy_that_ended_on_nan_gives_a_diverged_end(tmp_path: Path) -> None:
    book = Book(tmp_path)
    t = _relaunch(book)
    copy = [*reports(1, 5), {"type": "report", "step": 6, "metric": None, "invalid": True}]
    _write(book.run_dir / t.trial_id, 0, [*copy, {"type": "checkpoint", "step": 6}])

    _exit(book, t)

    assert (t.state, t.final_metric, t.metric_invalid) == ("completed", None, True)
    assert book.kinds() == ["invalid_metric", "result_recovered", "completed"]
    assert book.search.calls == ["tell_failure"]


@pytest.mark.parametrize(
    "case", ["only_done", "reported", "exit_1", "launched_at_the_end", "first_attempt"]
)
def test_other_exits_keep_their_rules(tmp_path: Path, case: str) -> None:
    """A script that only writes ``done`` (no attempt saved or reported step 6), a life that
    reported steps itself, a non-zero exit, a relaunch launched at a checkpoint at the end
    that we saw, and a first attempt: not a copy's end, decided as before."""
    book = Book(tmp_path)
    t = _relaunch(book, start_step=STEPS if case == "launched_at_the_end" else 0)
    folder = book.run_dir / t.trial_id
    _write(folder, 0, [DONE] if case == "only_done" else reports(1, STEPS))
    assert t.life is not None
    if case == "reported":
        t.life.first_report_at = 5.0
    if case == "first_attempt":
        t.attempt = t.life.attempt = 0
        (folder / "events-0.jsonl").rename(folder / "events-1.jsonl")
    _exit(book, t, code=1 if case == "exit_1" else 0)

    assert "result_recovered" not in book.kinds()
    if case == "launched_at_the_end":  # its work was done when launched: the script's fault
        assert (t.state, t.unreported) == ("failed", True)
    else:  # a crash: retried
        assert (t.state, t.failures, t.retrying) == ("waiting", 1, True)
        assert t.curve == {}


def test_a_cloud_copys_events_are_read_from_the_trials_artifacts_folder(tmp_path: Path) -> None:
    """On a cloud the copy's agent uploaded its events beside the trial's checkpoints."""
    book = Book(tmp_path, providers=(ProviderSpec(name="gcp", options={"project": "p"}),))
    t = _relaunch(book, offer=GCE)
    t.checkpoint_uri = (tmp_path / "ckpt" / book.job_id / t.trial_id).as_uri()
    _write(tmp_path / "ckpt" / book.job_id / t.trial_id, 0, [*reports(1, STEPS), DONE])

    _exit(book, t)

    assert (t.state, t.final_metric) == ("completed", metric(6))


def test_no_copys_events_in_the_artifacts_folder_is_no_copy(tmp_path: Path) -> None:
    """Nothing found (no attempt's events there): the exit is decided as before."""
    book = Book(tmp_path, providers=(ProviderSpec(name="gcp", options={"project": "p"}),))
    t = _relaunch(book, offer=GCE)
    t.checkpoint_uri = (tmp_path / "no-such-folder").as_uri()
    _exit(book, t)
    assert (t.state, t.failures) == ("waiting", 1)


# ---- the whole run on the local provider -----------------------------------------------------
# Attempt 0 leaves a copy of itself running in a session of its own (as a lost launch's
# instance runs one the orchestrator does not follow) and exits 1. The copy waits for the
# relaunch to start, then runs every step (its events in events-0.jsonl) and says done; the
# relaunch waits for that, as if it had found the copy's checkpoint at the last step, and
# says done with nothing to report.
COPY_SCRIPT = """
import json, os, sys, time
from pathlib import Path
from spotwise import sdk

total = sdk.steps()
events = Path(os.environ["SPOTWISE_EVENTS_FILE"])
started = events.with_name("relaunch-started")
copy = events.with_name("events-0.jsonl")


def wait_for(what):
    end = time.monotonic() + 30
    while not what():
        if time.monotonic() > end:
            sys.exit(3)
        time.sleep(0.02)


if sdk.attempt() == 0:
    detached, told = os.pipe()
    if os.fork():
        os.read(detached, 1)  # its copy has left this session: the life ends with this exit
        sys.exit(1)
    os.setsid()
    os.write(told, b"x")
    wait_for(started.exists)
    for step in range(1, total + 1):
        sdk.report(step, 1.0 - 1.0 / (step + 1))
        if step % 2 == 0:
            with open(events, "a") as fh:
                fh.write(json.dumps({"type": "checkpoint", "step": step}) + "\\n")
    sdk.done(total)
    events.with_name("copy-ended").touch()
    os._exit(0)
started.touch()
wait_for(lambda: copy.exists() and '"done"' in copy.read_text())
sdk.done(total)
"""


@pytest.mark.timeout(120)
def test_on_the_local_provider_the_relaunch_completes_with_the_copys_result(
    tmp_path: Path,
) -> None:
    (tmp_path / "trial.py").write_text(COPY_SCRIPT)
    spec = {
        "name": "copy",
        "command": ["python", str(tmp_path / "trial.py")],
        "metric": {"name": "val_acc", "direction": "maximize"},
        "steps": STEPS,
        "trials": 1,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [{"name": "local", "replay": {"forecast": "none"}}],
        "checkpoint": {"every": 2, "location": str(tmp_path / "ckpt")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"

    summary = jobs.tune(path, db=db, run_root=tmp_path / "runs")

    with Store.open_existing(db) as s:
        (trial,) = s.list_trials(summary["job_id"])
        lives = s.list_instances(summary["job_id"])
        kinds = [e.kind for e in s.events(summary["job_id"]) if e.trial_id == trial.id]
        said = s.events(summary["job_id"], kind="result_recovered")
    assert list((tmp_path / "runs").glob("*/*/copy-ended")), "the copy never ran"
    assert (summary["state"], summary["completed"]) == ("succeeded", 1), summary
    assert trial.state.value == "completed"
    assert math.isclose(trial.final_metric or 0.0, 1.0 - 1.0 / 7)
    assert len(lives) == 2  # the crashed first attempt and its relaunch: no third
    assert kinds.count("error") == 1 and kinds[-2:] == ["result_recovered", "completed"]
    assert [(e.detail["attempt"], e.detail["from_attempt"]) for e in said] == [(1, 0)]
