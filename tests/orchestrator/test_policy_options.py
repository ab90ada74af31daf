"""A spec's ``policy_options`` reach the policy that runs: ``asha`` with ``min_steps: 3`` judges
a trial first at step 3, so a trial with a poor start that goes on to win is not stopped on its
first report, as it is with the default ``min_steps: 1``; a resumed job rebuilds asha with the
options its stored spec carries.

Real trial processes (a script written here: each trial's curve is picked by the order the
trials start in), a real SQLite store, the local provider on a replayed market."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import skopt  # noqa: F401  (imported before the market clock starts: see test_orchestrator)
from test_orchestrator import spec_dict, write_spec, write_trace

from spotwise import jobs
from spotwise.store import Store

STEPS = 8  # asha's rungs: 3 (min_steps 3); 1 and 3 (min_steps 1)
# the n-th trial to start (SPOTWISE_TRIAL_ID order, kept in $ORDER_FILE) reports curve n:
# 0 steady (step / 100), 1 poor for two steps then the best (step / 10), 2 poor throughout
SCRIPT = """
import os, time
from pathlib import Path
from spotwise import sdk

total = sdk.steps()
order, me = Path(os.environ["ORDER_FILE"]), os.environ["SPOTWISE_TRIAL_ID"]
seen = order.read_text().split() if order.exists() else []
if me not in seen:
    order.write_text("".join(f"{t}\\n" for t in [*seen, me]))
    seen.append(me)
role = seen.index(me)
for step in range(1, total + 1):
    time.sleep(0.1)
    value = {0: step / 100, 1: 0.0 if step < 3 else step / 10}.get(role, 0.0)
    sdk.report(step, value)
    if sdk.should_stop():
        raise SystemExit(0)
sdk.done(total)
"""


def _spec(tmp_path: Path, command: list[str], **changes: Any) -> Path:
    (tmp_path / "curves.py").write_text(SCRIPT)
    spec = spec_dict(
        tmp_path,
        command=command,
        steps=STEPS,
        parallel=1,
        policy="asha",
        search={"optimizer": "random", "seed": 7},
        env={"ORDER_FILE": str(tmp_path / "order.txt")},
        **{"trials": 3, **changes},
    )
    return write_spec(tmp_path, spec)


def _trials(db: str, job_id: str) -> dict[int, tuple[str, list[int], float | None, str | None]]:
    """Trial number → (state, steps observed, final metric, stop reason)."""
    with Store.open_existing(db) as store:
        why = {e.trial_id: e.detail["reason"] for e in store.events(job_id, kind="stop_early")}
        return {
            t.number: (
                t.state.value,
                [o.step for o in store.observations(t.id)],
                t.final_metric,
                why.get(t.id),
            )
            for t in store.list_trials(job_id)
        }


@pytest.mark.timeout(180)
@pytest.mark.parametrize("min_steps", [1, 3])
def test_asha_min_steps_from_the_spec_decides_where_a_trial_is_first_judged(
    tmp_path: Path, min_steps: int
) -> None:
    write_trace(tmp_path / "trace.csv", avail_ticks=900)  # no revocation
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    path = _spec(
        tmp_path, ["python", str(tmp_path / "curves.py")], policy_options={"min_steps": min_steps}
    )
    summary = jobs.tune(path, db=db, run_root=tmp_path / "runs")

    assert summary["state"] == "succeeded", summary
    trials = _trials(db, summary["job_id"])
    steady = trials[0]
    assert steady[:3] == ("completed", list(range(1, 9)), pytest.approx(0.08))
    late, poor = trials[1], trials[2]
    if min_steps == 1:
        # judged on its first report (0.0 < 0.01): stopped before its good steps
        assert late[0] == "stopped_early" and late[3] == "asha rung 1" and late[2] is None
        assert late[1][0] == 1 and max(late[1]) < STEPS
        assert poor[0] == "stopped_early" and poor[3] == "asha rung 1"
        assert summary["early_stopped"] == 2
        assert summary["best"]["metric"] == pytest.approx(0.08)
    else:
        # no judgement before step 3: there it leads (0.3 > 0.03) and it wins the job
        assert late == ("completed", list(range(1, 9)), pytest.approx(0.8), None)
        # the poor one ran to step 3 and was stopped there, not before
        assert poor[0] == "stopped_early" and poor[3] == "asha rung 3"
        assert poor[1][:3] == [1, 2, 3] and poor[2] is None
        assert summary["early_stopped"] == 1
        assert summary["best"]["metric"] == pytest.approx(0.8)


@pytest.mark.timeout(180)
def test_a_resumed_job_rebuilds_asha_with_its_stored_options(tmp_path: Path) -> None:
    """The first run's command is missing: two trials fail and the job stops as broken. Once
    the script exists the job is resumed: the two trials the broken command killed run again
    (review-ao F11), then the last two, under asha as the stored spec set it (min_steps 3), so
    the poor starter is not stopped at step 1 and wins."""
    write_trace(tmp_path / "trace.csv", avail_ticks=900)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit(1)\n")  # broken (a missing one is refused at load)
    path = _spec(tmp_path, ["python", str(script)], trials=4, policy_options={"min_steps": 3})
    first = jobs.tune(path, db=db, run_root=tmp_path / "runs")
    assert first["state"] == "failed" and first["resumable"], first

    script.write_text((tmp_path / "curves.py").read_text())
    path.write_text("policy: asha\n")  # the stored spec is what a resume reads
    out = jobs.resume(first["job_id"], db=db, run_root=tmp_path / "runs")

    assert out["state"] == "succeeded", out
    trials = _trials(db, first["job_id"])
    assert trials[0][:3] == ("completed", list(range(1, 9)), pytest.approx(0.08))
    assert trials[1] == ("completed", list(range(1, 9)), pytest.approx(0.8), None)
    assert [trials[n][3] for n in (2, 3)] == ["asha rung 3", "asha rung 3"]  # poor throughout
    assert out["best"]["metric"] == pytest.approx(0.8)
