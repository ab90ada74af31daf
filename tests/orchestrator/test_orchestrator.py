"""The real loop end to end: real trial processes, a real SQLite store, a replayed market.

The market (a SkyNomad-format CSV written here): ``us-east-1a`` spot at $1.00/h, obtainable for
the first AVAIL_TICKS ticks and never again; ``us-east-1b`` spot at $2.00/h, always obtainable;
on-demand $5.00/h; ticks every 30 market seconds; replayed at 30× (one tick per wall second).

Timeline of the revocation test: the one trial starts on us-east-1a (cheapest); the AWS notice
comes 120 market s = 4 wall s before us-east-1a is taken (AVAIL_TICKS wall s after the start);
the trial checkpoints and exits; spot-greedy relaunches it on us-east-1b, where it resumes from
its checkpoint and finishes. The window is wider than the ~8 s a trial strictly needs because a
trial imports torch (for its checkpoints) first, which takes 5-10 s on a busy 2-core machine;
it stays short enough that a trial on a fast machine (60 steps x 0.25 s = 15 s) is still
running when the notice comes. The orchestrator starts the market clock before it builds the
search (which imports scikit-optimize, seconds on a busy machine), so skopt is imported here
first: otherwise those seconds would come out of the window.

The revocation tests run ``revocation_trial.py``: the same trial, whose relaunches step at
0.02 s instead of 0.25 s (nothing they check depends on the pace after the resume, which was
most of their wall time), and which once stopped leaves without tearing its interpreter down
(a wall second with torch loaded on a busy machine, out of the notice window).
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import skopt  # noqa: F401  (see below)
import yaml

from spotwise import jobs
from spotwise.errors import SpecError
from spotwise.planner import policy as policy_registry
from spotwise.planner.policies.greedy import SpotGreedy
from spotwise.planner.policy import (
    Action,
    Event,
    Phase,
    PlannerView,
    Progress,
    SetCheckpointEvery,
)
from spotwise.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "steady_trial.py"
TINY = Path(__file__).parent / "scripts" / "tiny_trial.py"
# steady_trial.py as the revocation tests run it (see the module docstring)
REVOCATION_TRIAL = Path(__file__).parent / "scripts" / "revocation_trial.py"
STEPS = 60
GAP_S = 30
AVAIL_TICKS = 16
TRACE_TICKS = 900  # 450 wall seconds: longer than any run of this test
SPEEDUP = 30.0
T0 = datetime(2023, 3, 1, tzinfo=UTC)


def metric(step: int) -> float:
    return 1.0 - 1.0 / (step + 1)


def write_trace(path: Path, avail_ticks: int = AVAIL_TICKS, ticks: int = TRACE_TICKS) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["timestamp", "availability_zone", "instance_type", "spot_available",
             "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"]
        )  # fmt: skip
        for i in range(ticks):
            stamp = (T0 + timedelta(seconds=GAP_S * i)).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([stamp, "us-east-1a", "p3.2xlarge", int(i < avail_ticks), "1.0", "5.0"])
            w.writerow([stamp, "us-east-1b", "p3.2xlarge", 1, "2.0", "5.0"])


def spec_dict(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "e2e-revocation",
        "command": ["python", str(SCRIPT)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": STEPS,
        "trials": 1,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [
            {
                "name": "local",
                "replay": {
                    "trace": str(tmp_path / "trace.csv"),
                    "speedup": SPEEDUP,
                    "notice_floor_s": 1.0,
                },
            }
        ],
        "checkpoint": {"every": 2, "location": str(tmp_path / "ckpt")},
        "env": {"STEADY_TRIAL_STEP_S": "0.25"},
    }
    spec.update(changes)
    return spec


def write_spec(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_revoked_trial_resumes_elsewhere_and_the_bill_is_honest(tmp_path: Path) -> None:
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = spec_dict(tmp_path, command=["python", str(REVOCATION_TRIAL)])
    summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")

    assert summary["state"] == "succeeded", summary
    assert (summary["trials"], summary["completed"], summary["early_stopped"]) == (1, 1, 0)
    assert summary["revocations"] == 1
    assert summary["migrations"] == 1
    assert summary["best"]["metric"] == pytest.approx(metric(STEPS))
    assert set(summary["best"]["params"]) == {"lr"}
    assert 0 < summary["cost_usd"] < summary["on_demand_cost_usd"]
    assert summary["wall_seconds"] < 400

    with Store.open_existing(db) as store:
        job = store.get_job(summary["job_id"])
        (trial,) = store.list_trials(job.id)
        instances = store.list_instances(job.id)
        observations = store.observations(trial.id)
        launch_events = store.events(job.id, kind="launch")

    assert job.state.value == "succeeded" and job.error is None
    assert trial.state.value == "completed"
    assert trial.final_metric == pytest.approx(metric(STEPS))
    assert (trial.revocations, trial.migrations) == (1, 1)
    assert trial.checkpoint_step == STEPS  # every 2 steps, the last one included

    # two instance lives: taken in us-east-1a, then finished in us-east-1b
    assert len(instances) == 2, [(i.zone, i.state, i.end_reason) for i in instances]
    first, second = instances
    assert (first.zone, first.market, first.state, first.end_reason) == (
        "us-east-1a", "spot", "revoked", "revoked",
    )  # fmt: skip
    assert (second.zone, second.market, second.state, second.end_reason) == (
        "us-east-1b", "spot", "terminated", "completed",
    )  # fmt: skip
    assert first.price_per_hour == 1.0 and second.price_per_hour == 2.0
    # AWS: interrupted by the provider within the first hour → free
    assert 0 < first.market_seconds <= AVAIL_TICKS * GAP_S < 3600
    assert first.cost_usd == 0.0
    # the second life is billed per started second at $2/h (60 s minimum); it is the whole bill
    billed_s = max(math.ceil(second.market_seconds), 60)
    assert second.cost_usd == pytest.approx(billed_s * 2.0 / 3600, abs=1e-9)
    assert summary["cost_usd"] == pytest.approx(second.cost_usd, abs=1e-6)
    assert job.cost_usd == pytest.approx(summary["cost_usd"], abs=1e-6)

    # the second attempt resumed from the checkpoint taken before the revocation
    assert [e.detail["attempt"] for e in launch_events] == [0, 1]
    resume = launch_events[1].detail["resume_step"]
    assert launch_events[0].detail["resume_step"] == 0
    assert resume > 0
    steps_by_life: dict[str | None, list[int]] = defaultdict(list)
    for obs in observations:
        steps_by_life[obs.instance_id].append(obs.step)
        assert obs.metric == pytest.approx(metric(obs.step))
    assert set(steps_by_life) == {first.id, second.id}
    before, after = steps_by_life[first.id], steps_by_life[second.id]
    assert before == list(range(1, len(before) + 1))
    assert resume <= before[-1]
    assert after == list(range(resume + 1, STEPS + 1))
    assert job.on_demand_cost_usd == pytest.approx(summary["on_demand_cost_usd"], abs=1e-6)


SWITCH_AT, OLD_EVERY, NEW_EVERY, LIVE_STEPS = 9, 2, 5, 40


class LiveEvery:
    """spot-greedy, plus: once the running trial has reported step SWITCH_AT (odd, so that no
    checkpoint is due there under either interval), set its checkpoint interval to NEW_EVERY."""

    name = "test-live-every"

    def __init__(self) -> None:
        self.greedy = SpotGreedy()

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        actions = self.greedy.decide(view, event)
        if isinstance(event, Progress) and event.step >= SWITCH_AT:
            t = view.trial(event.trial_id)
            if t.phase is Phase.RUNNING and t.checkpoint_every != NEW_EVERY:
                actions.append(SetCheckpointEvery(t.trial_id, NEW_EVERY))
        return actions


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_set_checkpoint_every_reaches_a_running_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new interval reaches the trial through its control file within the same attempt:
    checkpoints every OLD_EVERY steps up to some step after SWITCH_AT, every NEW_EVERY after.

    Steps of 0.1 wall s: the new interval has 25 steps (2.5 s, steps 10 to 34) to reach the
    trial for a step saved only under it (15, 25 or 35) to come; it takes a poll or two."""
    monkeypatch.setitem(policy_registry._POLICIES, LiveEvery.name, LiveEvery)
    write_trace(tmp_path / "trace.csv", avail_ticks=TRACE_TICKS)  # never revoked
    spec = spec_dict(tmp_path, steps=LIVE_STEPS, checkpoint={
        "every": OLD_EVERY, "location": str(tmp_path / "ckpt")
    }, env={"STEADY_TRIAL_STEP_S": "0.1"})  # fmt: skip
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(
        write_spec(tmp_path, spec), db=db, policy=LiveEvery.name, run_root=tmp_path / "runs"
    )

    assert summary["state"] == "succeeded", summary
    assert (summary["completed"], summary["revocations"], summary["migrations"]) == (1, 0, 0)
    with Store.open_existing(db) as store:
        (trial,) = store.list_trials(summary["job_id"])
        (instance,) = store.list_instances(summary["job_id"])
        launches = store.events(summary["job_id"], kind="launch")
        changes = store.events(summary["job_id"], kind="checkpoint_every")
    assert [e.detail["attempt"] for e in launches] == [0]  # one attempt: no relaunch
    assert [(e.detail["every"], e.instance_id) for e in changes] == [(NEW_EVERY, instance.id)]
    assert trial.checkpoint_step == LIVE_STEPS

    trial_dir = tmp_path / "runs" / summary["job_id"] / trial.id
    assert json.loads((trial_dir / "control-0.json").read_text()) == {"checkpoint_every": NEW_EVERY}
    assert sorted(p.name for p in trial_dir.glob("events-*.jsonl")) == ["events-0.jsonl"]
    records = [json.loads(line) for line in (trial_dir / "events-0.jsonl").read_text().splitlines()]
    saved = [r["step"] for r in records if r["type"] == "checkpoint"]
    assert not any(r["type"] == "stopping" for r in records)
    # every OLD_EVERY steps from the start, then (from the first step the new value was read)
    # every NEW_EVERY steps to the end
    n_old = next(i for i, step in enumerate([*saved, -1]) if step != OLD_EVERY * (i + 1))
    before, after = saved[:n_old], saved[n_old:]
    assert before == list(range(OLD_EVERY, OLD_EVERY * n_old + 1, OLD_EVERY))
    assert before[-1] >= SWITCH_AT - 1  # nothing changed before the policy asked
    first_new = (before[-1] // NEW_EVERY + 1) * NEW_EVERY
    assert after == list(range(first_new, LIVE_STEPS + 1, NEW_EVERY)), saved
    # the new interval was in force for a while: some step saved only an interval of 5 saves
    assert any(step % OLD_EVERY for step in after), saved


def tiny_spec(tmp_path: Path, steps: int, **env: str) -> dict[str, Any]:
    return spec_dict(tmp_path, command=["python", str(TINY)], steps=steps, env=env)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_after_the_free_first_hour_a_noticed_instance_is_released_at_once(tmp_path: Path) -> None:
    """Past AWS's first hour a provider revocation is billed to the second, so once the trial has
    checkpointed and left, terminating the noticed instance ourselves is cheaper than paying for
    the rest of the notice: the orchestrator must do that (the simulator's rule).

    At 120x, us-east-1a is taken 140 ticks (4,200 market s, 35 wall s) after the start: past
    the first hour, while the trial (200 steps x 0.25 wall s: 50 s) still runs. The notice comes
    120 market s = 1 wall s before, time for the trial to checkpoint and leave and for the
    orchestrator to release the instance before the provider's deadline (it took ~7 market s
    here, quiet; ~36 with two busy loops on the 2 cores, so a faster market would leave too
    little of that window). The trial is ``revocation_trial.py``: it leaves at once when stopped
    (tearing down an interpreter with torch loaded took a wall second, under load), and its
    relaunch on us-east-1b steps fast: the ~85 steps left after the revocation (it was ~190 at
    400 x 0.125 s, 4 more wall s for nothing checked here). At 60x this test took 75 s.
    """
    avail, steps = 140, 200
    write_trace(tmp_path / "trace.csv", avail_ticks=avail, ticks=avail + 900)
    spec = spec_dict(tmp_path, steps=steps, command=["python", str(REVOCATION_TRIAL)])
    spec["providers"][0]["replay"]["speedup"] = 120.0
    spec["env"]["STEADY_TRIAL_STEP_S"] = "0.25"
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")

    assert summary["state"] == "succeeded", summary
    assert summary["revocations"] == 1
    with Store.open_existing(db) as store:
        job = store.get_job(summary["job_id"])
        (trial,) = store.list_trials(job.id)
        first, second = store.list_instances(job.id)
    assert trial.revocations == 1 and trial.final_metric == pytest.approx(metric(steps))
    assert (first.zone, first.state, first.end_reason) == (
        "us-east-1a", "terminated", "released on notice",
    )  # fmt: skip
    # ended by us after the first hour and before the provider's deadline (avail·GAP after the
    # start of the trace; the launch came a little after the start)
    assert 3600 < first.market_seconds < avail * GAP_S
    # billed to the second at $1/h like any terminated life: no refund, no notice tail
    assert first.cost_usd == pytest.approx(math.ceil(first.market_seconds) * 1.0 / 3600, abs=1e-9)
    assert (second.zone, second.end_reason) == ("us-east-1b", "completed")


@pytest.mark.timeout(180)
def test_a_trial_that_exits_0_before_its_last_step_fails_instead_of_looping(
    tmp_path: Path,
) -> None:
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = write_spec(tmp_path, tiny_spec(tmp_path, 10, TINY_TRIAL_LAST_STEP="3"))
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    assert (summary["trials"], summary["completed"], summary["revocations"]) == (1, 0, 0)
    assert summary["migrations"] == 0  # a retry after a crash is not a migration
    assert summary["best"] is None
    # a job whose every trial failed is a failed job, not a success with nothing in it
    assert summary["state"] == "failed"
    logs = tmp_path / "runs" / summary["job_id"] / "logs"
    assert summary["error"] == (
        "every trial failed (1); the last error: the trial exited with code 0 at step 3 of 10 "
        f"without being asked to stop; see the trial logs in {logs.resolve()}"
    )
    with Store.open_existing(db) as store:
        (trial,) = store.list_trials(summary["job_id"])
        instances = store.list_instances(summary["job_id"])
        errors = store.events(summary["job_id"], kind="error")
    assert trial.state.value == "failed"
    assert len(instances) == 2  # MAX_FAILURES attempts, then it is given up
    assert [e.detail["exit_code"] for e in errors] == [0, 0]


@pytest.mark.timeout(180)
@pytest.mark.timeout(120)
def test_a_command_that_cannot_start_says_why_the_job_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cause was only in the event table (the trial logs are empty: nothing started). (A
    program missing when the spec loads is refused there: here it goes missing after.)"""
    monkeypatch.setattr("spotwise.spec_local.command_problem", lambda *a: "")
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = write_spec(tmp_path, spec_dict(tmp_path, command=["nonexistent-prog-xyz"]))
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    assert summary["state"] == "failed"
    logs = tmp_path / "runs" / summary["job_id"] / "logs"
    assert summary["error"] == (
        "every trial failed (1); the last error: local: cannot start 'nonexistent-prog-xyz': "
        f"No such file or directory; see the trial logs in {logs.resolve()}"
    )
    # and the logs it points to say so (they were empty)
    texts = {p.read_text() for p in logs.glob("*.log")}
    assert texts == {
        "spotwise: local: cannot start 'nonexistent-prog-xyz': No such file or directory\n"
    }


@pytest.mark.timeout(120)
def test_a_broken_command_stops_the_job_after_two_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every trial of a typo'd command was tried, twice each: 16 launches for 8 trials (16
    short-lived VMs on a cloud). Once two trials have failed and none ever made a step, no new
    trial starts. (A local program missing when the spec loads is refused there: a cloud's is
    only found missing on its instances, as here.)"""
    monkeypatch.setattr("spotwise.spec_local.command_problem", lambda *a: "")
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = spec_dict(tmp_path, command=["nonexistent-prog-xyz"], trials=6, parallel=2)
    summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    assert (summary["state"], summary["trials"], summary["trials_planned"]) == ("failed", 2, 6)
    with Store.open_existing(db) as store:
        assert len(store.list_instances(summary["job_id"])) == 4  # 2 tries for each of 2


def test_a_relative_run_root_reaches_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial runs in the spec's folder; its events file must still be the one read."""
    write_trace(tmp_path / "trace.csv")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(write_spec(tmp_path, tiny_spec(tmp_path, 3)), db=db, run_root=Path("runs"))
    assert summary["completed"] == 1
    assert summary["best"]["metric"] == pytest.approx(0.03)
    assert list((elsewhere / "runs").glob("*/*/events-0.jsonl"))


def test_a_bad_spec_writes_nothing(tmp_path: Path) -> None:
    db_file = tmp_path / "spotwise.db"
    spec = write_spec(tmp_path, spec_dict(tmp_path, steps="sixty"))
    with pytest.raises(SpecError) as info:
        jobs.tune(spec, db=f"sqlite:///{db_file}", run_root=tmp_path / "runs")
    assert "'steps'" in str(info.value) and "\n" not in str(info.value)
    assert not db_file.exists()
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("where", ["spec", "argument"])
def test_an_unknown_policy_lists_the_valid_ones_and_writes_nothing(
    tmp_path: Path, where: str
) -> None:
    db_file = tmp_path / "spotwise.db"
    if where == "spec":
        spec, policy = write_spec(tmp_path, spec_dict(tmp_path, policy="spot-greedyy")), None
    else:
        spec, policy = write_spec(tmp_path, spec_dict(tmp_path)), "cheapest"
    with pytest.raises(SpecError) as info:
        jobs.tune(spec, db=f"sqlite:///{db_file}", policy=policy, run_root=tmp_path / "runs")
    message = str(info.value)
    assert "valid:" in message
    assert "spot-greedy" in message and "on-demand" in message
    if where == "spec":
        assert "did you mean 'spot-greedy'" in message
    assert not db_file.exists()
    assert not (tmp_path / "runs").exists()


def test_a_missing_trace_writes_nothing(tmp_path: Path) -> None:
    """The market is opened (and what the spec names in it checked) before the job is recorded."""
    from spotwise.store import Store

    db_file = tmp_path / "spotwise.db"
    spec = write_spec(tmp_path, spec_dict(tmp_path))  # no trace.csv written
    with pytest.raises(SpecError, match=r"replay\.trace"):
        jobs.tune(spec, db=f"sqlite:///{db_file}", run_root=tmp_path / "runs")
    store = Store.open(f"sqlite:///{db_file}")
    assert store.list_jobs() == []
    store.close()
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("provider", ["gcp", "azure", "aws"])
def test_tune_on_a_cloud_its_trials_cannot_report_from_is_refused_and_writes_nothing(
    tmp_path: Path, provider: str
) -> None:
    """A cloud trial reports through its artifacts folder; with a plain local checkpoint folder
    and no ``artifacts`` option it could not, and the orchestrator would take each finished
    trial for a lost one. `tune` must refuse before any cloud call and before anything exists."""
    spec = spec_dict(tmp_path, providers=[{"name": provider, "regions": ["us-east1"]}])
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with pytest.raises(SpecError) as info:  # a spec error (exit 2), naming the field
        jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    msg = str(info.value)
    assert msg.startswith(
        f"spec field 'checkpoint.location': {provider}: the trial's checkpoint location"
    )
    assert "options.artifacts" not in msg
    assert "\n" not in msg
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    if (tmp_path / "spotwise.db").exists():
        with Store.open_existing(db) as store:
            assert store.list_jobs() == []


@pytest.mark.parametrize(
    ("provider", "artifacts"),
    [("gcp", "gs://bkt/runs"), ("azure", "az://acct/cont/runs"), ("aws", "s3://bkt/runs")],
)
def test_an_artifacts_folder_does_not_excuse_a_local_checkpoint_folder(
    tmp_path: Path, provider: str, artifacts: str
) -> None:
    """``artifacts`` only moves the trial's events: with a plain local checkpoint folder the
    trials would checkpoint to their VM's own disk, which goes with it, and a "resume" would
    start again from step 0 (paid twice). Refused with one line, before anything is written."""
    opts = {"artifacts": artifacts}
    spec = spec_dict(tmp_path, providers=[{"name": provider, "options": opts}])
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with pytest.raises(SpecError) as info:
        jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    msg = str(info.value)
    assert msg.startswith(
        f"spec field 'checkpoint.location': {provider}: the trial's checkpoint location"
    )
    assert "for events only" not in msg and "\n" not in msg
    assert "options.artifacts only moves the trial's events" in msg
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    if (tmp_path / "spotwise.db").exists():
        with Store.open_existing(db) as store:
            assert store.list_jobs() == []


def test_local_mixed_with_a_cloud_is_refused_with_one_line_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """``local`` runs on the replayed market's clock: it cannot share a job with a cloud."""
    spec = spec_dict(tmp_path)
    spec["providers"] = [*spec["providers"], {"name": "gcp", "regions": ["us-central1"]}]
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with pytest.raises(SpecError) as info:
        jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    msg = str(info.value)
    assert "providers: local" in msg and "cannot be mixed with a cloud" in msg
    assert "name only clouds, or run the local job on its own" in msg
    assert "\n" not in msg
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "spotwise.db").exists()


def test_every_cloud_of_a_job_must_have_a_reachable_trial_channel(tmp_path: Path) -> None:
    """Several clouds: each is checked before anything is bought or written; the one its
    trials could not report from is named."""
    spec = spec_dict(
        tmp_path,
        providers=[
            {"name": "gcp", "regions": ["us-central1"], "options": {"artifacts": "gs://bkt/runs"}},
            {"name": "azure", "regions": ["eastus"]},
        ],
        checkpoint={"every": 2, "location": "gs://bkt/ckpt"},  # GCS: GCP's VMs only
    )
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with pytest.raises(SpecError) as info:
        jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    assert str(info.value).startswith(
        "spec field 'checkpoint.location': azure: the trial's checkpoint location"
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    if (tmp_path / "spotwise.db").exists():
        with Store.open_existing(db) as store:
            assert store.list_jobs() == []
