"""Instance lives that end without the trial reporting an exit code.

A cloud VM whose identity cannot write the artifacts folder runs its trial, fails every upload
and powers itself off: the controller sees the instance TERMINATED with no exit code, no notice
and no stop asked for. That is a failure like a crash (MAX_FAILURES, then the trial is failed);
relaunched without a cap it would be bought again and again. Lives that end without a code for
a known reason (revoked, noticed, rebalanced, asked to stop) still resume elsewhere.
"""

from __future__ import annotations

import csv
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise import jobs
from spotwise.planner import orchestrator as orchestrator_module
from spotwise.planner.backend import Backend
from spotwise.planner.policy import InstanceLost, Phase, TrialExited
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trialbook import MAX_FAILURES, TrialBook
from spotwise.providers.base import Instance, InstanceState, LaunchRequest, Market, Offer
from spotwise.store import Store

TINY = Path(__file__).parent / "scripts" / "tiny_trial.py"
NO_CODE = "without reporting an exit code"


# ---- the real loop on the local provider ----------------------------------------------------
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


class Mute:
    """The local provisioner as a cloud whose trials cannot write their channel: nothing they
    report arrives, and an instance whose trial ended is seen TERMINATED with no exit code
    (the agent powered the VM off). More than 2 x MAX_FAILURES launches: relaunched forever."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.launches = 0

    def launch(self, request: LaunchRequest) -> Instance:
        self.launches += 1
        if self.launches > 2 * MAX_FAILURES:
            raise RuntimeError(f"a silent trial was launched {self.launches} times")
        return self.inner.launch(request)  # type: ignore[no-any-return]

    def describe(self, tags: dict[str, str] | None = None) -> list[Instance]:
        out = []
        for inst in self.inner.describe(tags):
            if inst.exit_code is not None:
                end = inst.ended_at if inst.ended_at is not None else inst.launched_at
                inst = dataclasses.replace(
                    inst, state=InstanceState.TERMINATED, exit_code=None, ended_at=end
                )
            out.append(inst)
        return out

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        self.inner.progress(instance_id)  # read and dropped: the uploads failed
        return []

    def notices(self) -> list[Any]:
        return self.inner.notices()  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.timeout(180)
def test_an_instance_that_ends_without_an_exit_code_is_a_failure_not_a_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_trace(tmp_path / "trace.csv")
    spec = {
        "name": "silent",
        "command": ["python", str(TINY)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": 3,
        "trials": 1,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [
            {
                "name": "local",
                "replay": {"trace": str(tmp_path / "trace.csv"), "speedup": 30.0},
            }
        ],
        "checkpoint": {"every": 1, "location": str(tmp_path / "ckpt")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    mutes: list[Mute] = []
    real_open = orchestrator_module.open_backend

    def open_mute(*args: Any, **kw: Any) -> Backend:
        backend = real_open(*args, **kw)
        mutes.append(Mute(backend.provisioner))
        backend.provisioner = mutes[-1]  # type: ignore[assignment]
        return backend

    monkeypatch.setattr(orchestrator_module, "open_backend", open_mute)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(path, db=db, run_root=tmp_path / "runs")

    assert mutes[0].launches == MAX_FAILURES
    assert summary["state"] == "failed", summary
    assert (summary["trials"], summary["completed"], summary["revocations"]) == (1, 0, 0)
    assert summary["migrations"] == 0  # a retry after a failure is not a migration
    with Store.open_existing(db) as store:
        (trial,) = store.list_trials(summary["job_id"])
        instances = store.list_instances(summary["job_id"])
        errors = store.events(summary["job_id"], kind="error")
        launches = store.events(summary["job_id"], kind="launch")
    assert trial.state.value == "failed"
    assert len(instances) == len(launches) == MAX_FAILURES
    assert [e.detail["exit_code"] for e in errors] == [None] * MAX_FAILURES
    assert all(NO_CODE in e.detail["error"] for e in errors), [e.detail for e in errors]
    assert all("terminated" in e.detail["error"] for e in errors)


# ---- _on_exit itself ------------------------------------------------------------------------
OFFER = Offer("local", "us-east-1", "us-east-1b", "p3.2xlarge", Market.SPOT, 2.0, 5.0)


class Book(TrialBook):
    """A TrialBook with a recording store and search, and nothing else."""

    def __init__(self, tmp_path: Path) -> None:
        self.run_dir, self.job_id = tmp_path, "j-lost"  # a failure's text names the job
        self.revocations = self.early_stopped = 0
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.store = _Null()
        self.search = _Null()  # type: ignore[assignment]

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.events.append((kind, detail))


class _Null:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: None


def _running(t: TrialRun, n: int) -> Life:
    t.life = Life(f"l{n}", f"i{n}", OFFER, 0.0, t.checkpoint_step, n)
    t.phase, t.state = Phase.RUNNING, "running"
    return t.life


def test_a_life_ended_unasked_without_a_code_counts_as_a_failure(tmp_path: Path) -> None:
    book = Book(tmp_path)
    t = TrialRun("t1", 0, {}, steps_total=10, checkpoint_every=1)
    for n in range(MAX_FAILURES):
        _running(t, n)
        ev = book._on_exit(t, None, InstanceState.TERMINATED, 100.0)
        assert isinstance(ev, TrialExited) and not ev.finished
        assert t.failures == n + 1
        kind, detail = book.events[-1 if n + 1 < MAX_FAILURES else -2]
        assert kind == "error" and detail["exit_code"] is None and NO_CODE in detail["error"]
        if n + 1 < MAX_FAILURES:
            assert (t.phase, t.state, t.retrying) == (Phase.WAITING, "waiting", True)
    assert (t.phase, t.state) == (Phase.DONE, "failed")
    assert [k for k, _ in book.events] == ["error"] * MAX_FAILURES + ["failed"]
    assert book.revocations == 0


@pytest.mark.parametrize("why", ["revoked", "noticed", "rebalanced", "asked to stop"])
def test_a_life_ended_without_a_code_for_a_known_reason_resumes_elsewhere(
    tmp_path: Path, why: str
) -> None:
    book = Book(tmp_path)
    t = TrialRun("t1", 0, {}, steps_total=10, checkpoint_every=1)
    life = _running(t, 0)
    state = InstanceState.REVOKED if why == "revoked" else InstanceState.TERMINATED
    if why == "noticed":
        life.notice_deadline = 130.0
    elif why == "rebalanced":
        life.rebalanced = True
    elif why == "asked to stop":
        t.stopping = "migrate"
    ev = book._on_exit(t, None, state, 100.0)
    assert (t.phase, t.state, t.failures, t.retrying) == (Phase.WAITING, "waiting", 0, False)
    assert "error" not in [k for k, _ in book.events]
    lost = why in ("revoked", "noticed")
    assert isinstance(ev, InstanceLost if lost else TrialExited)
    assert book.revocations == int(lost)
