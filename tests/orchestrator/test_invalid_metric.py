"""A trial that reports NaN or inf (a diverged loss) does not crash the job.

The SDK sends such a report with ``metric: null`` (marked invalid). The orchestrator stored it
as an observation of NaN, which SQLite keeps as NULL in a NOT NULL column: the whole job died
with a database error. Now the step counts as progress, the observation is not written (it
holds a number), one ``invalid_metric`` event says so, and a trial that ends on such a value
has no final metric: its point is told to the search as a bad one, and a job where no trial has
a usable final metric is not a success.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_orchestrator import TINY, spec_dict, tiny_spec, write_spec, write_trace

from spotwise import jobs
from spotwise.planner.runstate import TrialRun
from spotwise.planner.trialbook import TrialBook
from spotwise.store import Store


@pytest.mark.timeout(180)
def test_a_nan_in_the_middle_is_skipped_and_the_job_succeeds(tmp_path: Path) -> None:
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = write_spec(tmp_path, tiny_spec(tmp_path, 3, TINY_TRIAL_NAN_STEPS="2"))
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")

    assert summary["state"] == "succeeded", summary
    assert summary["best"]["metric"] == pytest.approx(0.03)
    with Store.open_existing(db) as store:
        (trial,) = store.list_trials(summary["job_id"])
        steps = [(o.step, o.metric) for o in store.observations(trial.id)]
        said = store.events(summary["job_id"], kind="invalid_metric")
    assert steps == [(1, pytest.approx(0.01)), (3, pytest.approx(0.03))]
    assert [(e.detail["step"], e.detail["metric"]) for e in said] == [(2, "None")]


@pytest.mark.timeout(180)
def test_trials_that_end_on_nan_fail_the_job_with_the_reason(tmp_path: Path) -> None:
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    env = {"TINY_TRIAL_NAN_STEPS": "2,3"}
    tiny = ["python", str(TINY)]
    spec = spec_dict(tmp_path, command=tiny, steps=3, trials=2, parallel=1, env=env)
    summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")

    assert summary["state"] == "failed" and summary["best"] is None, summary
    assert summary["completed"] == 2
    assert summary["error"].startswith(
        "no trial reported a usable final metric (2 ended on NaN or inf); see the trial logs in "
    )
    with Store.open_existing(db) as store:
        trials = store.list_trials(summary["job_id"])
        said = store.events(summary["job_id"], kind="invalid_metric")
    assert [t.state for t in trials] == ["completed", "completed"]
    assert [t.final_metric for t in trials] == [None, None]
    # its metric is the last report's, NaN: none, not the last finite value (0.01)
    assert [t.metric for t in trials] == [None, None]
    assert len(said) == 2  # once per trial, not once per step


class _Search:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, float]]] = []

    def tell(self, params: dict[str, float], value: float) -> None:
        self.calls.append(("tell", params))

    def tell_failure(self, params: dict[str, float]) -> None:
        self.calls.append(("tell_failure", params))

    def forget(self, params: dict[str, float]) -> None:
        self.calls.append(("forget", params))


class _Store:
    def __init__(self) -> None:
        self.trials: dict[str, dict[str, object]] = {}

    def update_trial(self, trial_id: str, **fields: object) -> None:
        self.trials.setdefault(trial_id, {}).update(fields)


def test_a_trial_completed_on_nan_is_told_to_the_search_as_a_failure() -> None:
    """Forgotten, a GP proposes the very same diverging point again."""
    book = TrialBook()
    book.search, book.store, book.early_stopped = _Search(), _Store(), 0  # type: ignore[assignment]
    book._event = lambda *a, **k: None  # type: ignore[method-assign]
    t = TrialRun("t-1", 0, {"lr": 10.0}, 3, 1)
    t.curve = {1: 0.5}  # step 3 reported NaN: no final metric
    book._close_trial(t, "completed", 0.0)
    assert book.search.calls == [("tell_failure", {"lr": 10.0})]  # type: ignore[attr-defined]


def test_a_search_that_raises_leaves_the_trial_recorded_as_ended() -> None:
    """skopt raised inside `tell` (a categorical of 1, 1.0 and True): the trial had reached its
    last step but stayed "running" in the store for good, since the drain only closes trials
    that are not done."""

    class Raising(_Search):
        def tell(self, params: dict[str, float], value: float) -> None:
            raise ValueError("Anisotropic kernel must have the same number of dimensions")

    book = TrialBook()
    book.search, book.store, book.early_stopped = Raising(), _Store(), 0  # type: ignore[assignment]
    book._event = lambda *a, **k: None  # type: ignore[method-assign]
    t = TrialRun("t-1", 0, {"c": 1}, 3, 1)
    t.curve, t.step = {3: 0.9}, 3
    with pytest.raises(ValueError, match="Anisotropic"):
        book._close_trial(t, "completed", 0.0)
    assert book.store.trials["t-1"]["state"] == "completed"  # type: ignore[attr-defined]
    assert book.store.trials["t-1"]["final_metric"] == 0.9  # type: ignore[attr-defined]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("policy", ["asha", "spottune", "spotwise"])
def test_an_early_stopping_policy_stops_a_trial_that_went_nan(tmp_path: Path, policy: str) -> None:
    """The policies skipped a None metric when ranking: a diverged trial ran (and was billed) to
    its last step while sound trials were cut."""
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    nan = ",".join(str(k) for k in range(2, 21))
    env = {"TINY_TRIAL_NAN_STEPS": nan, "TINY_TRIAL_STEP_S": "0.2"}
    tiny = ["python", str(TINY)]
    spec = spec_dict(tmp_path, command=tiny, steps=20, trials=1, policy=policy, env=env)
    summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")

    assert summary["early_stopped"] == 1, summary
    # no usable metric at all: not a success a cron job would read as one (it said succeeded)
    assert summary["state"] == "failed" and summary["best"] is None
    assert summary["error"].startswith(
        "no trial reported a usable final metric (1 ended on NaN or inf); "
    )
    with Store.open_existing(db) as store:
        (trial,) = store.list_trials(summary["job_id"])
        (stop,) = store.events(summary["job_id"], kind="stop_early")
    assert trial.state == "stopped_early" and trial.step < 20
    assert stop.detail["reason"] == "invalid metric"
