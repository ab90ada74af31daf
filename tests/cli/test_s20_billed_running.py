"""`status` splits a job's ``cost_usd`` into ``billed_usd`` (its closed lives' bills: final)
and ``running_usd`` (the rest: lives still held, estimated), adding up to ``cost_usd``
exactly; ``cost_is_estimate`` only said that some of it was an estimate, not how much.

A running job's ``cost_usd`` is its orchestrator's last save (every 2 s): the bills written
by then plus its running lives as if they ended then. A life closed after that save has its
bill on its record, but only its estimate in ``cost_usd``: it counts as running until the next
save (its bill in ``billed_usd`` would count it twice, and ``running_usd`` could go below 0).
The save carries the heartbeat, so a bill written after ``heartbeat_at`` is such a one.

The store's rows are written directly (no job runs); the real loop's saves are read in
tests/orchestrator/test_s20_billed_running_saves.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from rich.console import Console
from shared_helpers import record_launch
from typer.testing import CliRunner

from spotwise import jobs
from spotwise.cli import render
from spotwise.cli.app import app
from spotwise.store import Store

H = 1_790_000_000.0  # the running job's last save (its heartbeat)
SPEC = json.dumps({"name": "digits", "providers": [{"name": "aws"}]})


def _store(tmp_path: Path) -> str:
    """``j-run``: running (here, as far as status can tell: another machine's), saved at
    :data:`H` with $1.20: two lives billed by then ($0.30 + $0.20), one closed 1 s after
    ($0.55, an estimate of $0.50 in the save), one running (its estimate $0.20 in the save).
    ``j-done``: succeeded, three lives whose bills add up, in another order, to 0.6 give or
    take the float's last digit. ``j-left``: failed, one life closed ($1.00) and one its end
    could not terminate, billed $0.25 up to then, still open. ``j-old``: running, no
    heartbeat (a spotwise before revision 0004): every closed bill counts. ``j-idle``:
    running, no life held at its save, its bills added in another order than the store's."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    lives = {
        "j-run": [("terminated", H - 50, 0.3), ("revoked", H - 2, 0.2),
                  ("terminated", H + 1, 0.55), ("running", None, 0.0)],
        "j-done": [("terminated", H - 30, 0.1), ("terminated", H - 20, 0.2),
                   ("terminated", H - 10, 0.3)],
        "j-left": [("terminated", H - 30, 1.0), ("running", None, 0.25)],
        "j-old": [("terminated", H - 30, 0.4), ("running", None, 0.0)],
        "j-idle": [("terminated", H - 30, 0.3), ("terminated", H - 20, 0.2),
                   ("terminated", H - 10, 0.1)],
    }  # fmt: skip
    jobs_ = {
        "j-run": ("running", 0.3 + 0.2 + 0.5 + 0.2, H),
        "j-done": ("succeeded", 0.3 + 0.2 + 0.1, H - 5),
        "j-left": ("failed", 1.25, H - 5),
        "j-old": ("running", 0.65, None),
        "j-idle": ("running", 0.1 + 0.2 + 0.3, H),  # between two trials: nothing runs
    }
    with Store.open(db) as s:
        for job_id, (state, cost, beat) in jobs_.items():
            s.create_job("digits", SPEC, "job.yaml", "spot-greedy", "maximize", job_id=job_id)
            s.update_job(job_id, state=state, cost_usd=cost, on_demand_cost_usd=3 * cost,
                         heartbeat_at=beat, pid=4242, host="another-machine")  # fmt: skip
            t = s.add_trial(job_id, 0, {"lr": 0.1})
            for n, (life, ended, usd) in enumerate(lives[job_id]):
                record_launch(
                    s, job_id, t.id, price_per_hour=0.9, id=f"l-{job_id}-{n}", state=life,
                    requested_at=H - 100 + n, ended_at=ended, cost_usd=usd,
                    end_reason=None if ended is None else "completed",
                )  # fmt: skip
    return db


def _cli(*args: str) -> tuple[int, str]:
    saved = render.console
    render.console = Console(width=120, highlight=False, color_system=None)
    try:
        done = CliRunner().invoke(app, list(args), env={"COLUMNS": "120"})
    finally:
        render.console = saved
    return done.exit_code, done.stdout


def test_status_json_splits_the_cost_into_billed_and_running(tmp_path: Path) -> None:
    db = _store(tmp_path)
    expected = {
        "j-run": (0.5, 0.7),  # the life closed after the save: its estimate, running
        "j-done": (0.6, 0.0),  # finished: all billed (its sum's last digit is not running)
        "j-left": (1.0, 0.25),  # still held: billed up to its end, `cancel` bills the rest
        "j-old": (0.4, 0.25),  # no heartbeat: every closed bill
        "j-idle": (0.6, 0.0),
    }
    code, text = _cli("status", "--db", db, "--json")
    assert code == 0, text
    listed = {j["job_id"]: j for j in json.loads(text)["jobs"]}
    for job_id, (billed, running) in expected.items():
        for j in (listed[job_id], json.loads(_cli("status", job_id, "--db", db, "--json")[1])):
            assert (j["billed_usd"], j["running_usd"]) == (
                pytest.approx(billed, abs=1e-12),
                pytest.approx(running, abs=1e-12),
            ), job_id
            assert j["billed_usd"] + j["running_usd"] == j["cost_usd"], job_id  # exactly
            assert j["running_usd"] >= 0.0
    for job_id in ("j-done", "j-idle"):  # 0.0, not 1e-16 either way: nothing runs
        assert listed[job_id]["running_usd"] == 0.0, job_id
        assert listed[job_id]["billed_usd"] == listed[job_id]["cost_usd"], job_id
    # the Python API gives them too, the same
    one = jobs.status("j-run", db=db)
    assert (one["billed_usd"], one["running_usd"]) == (
        listed["j-run"]["billed_usd"],
        listed["j-run"]["running_usd"],
    )


def test_the_text_says_how_much_is_still_running(tmp_path: Path) -> None:
    db = _store(tmp_path)
    flat = " ".join(_cli("status", "j-run", "--db", db)[1].split())
    assert "cost $1.2000 vs $3.6000 on demand an estimate: the job is not finished" in flat
    assert "of which $0.7000 still running, estimated ($0.5000 billed)" in flat
    flat = " ".join(_cli("status", "j-left", "--db", db)[1].split())
    assert "of which $0.2500 still running, estimated ($1.0000 billed)" in flat
    flat = " ".join(_cli("status", "j-done", "--db", db)[1].split())
    assert "still running" not in flat and "billed" not in flat


def test_the_two_parts_add_up_to_the_cost_exactly() -> None:
    """Whatever the sums: ``billed_usd + running_usd == cost_usd`` as floats, neither below 0
    nor above the cost (a life's bill above its estimate: no negative running)."""
    from spotwise.job_rows import bill_split

    rng = random.Random(20)
    for _ in range(20_000):
        cost = rng.uniform(0, 100) * rng.choice([1e-4, 1.0, 1e3])
        closed = cost * rng.uniform(0, 1.2)
        held = cost * rng.uniform(0, 1.2) * rng.choice([0.0, 1e-6, 1.0])
        for finished in (False, True):
            got = bill_split(cost, finished, closed, held)
            assert got["billed_usd"] + got["running_usd"] == cost
            assert 0.0 <= got["running_usd"] <= cost and 0.0 <= got["billed_usd"] <= cost
    assert bill_split(1.0, False, 1.5, 0.0) == {"billed_usd": 1.0, "running_usd": 0.0}
    assert bill_split(0.0, False, 0.0, 0.0) == {"billed_usd": 0.0, "running_usd": 0.0}
    assert bill_split(1.0, True, 0.7, 0.25) == {"billed_usd": 0.75, "running_usd": 0.25}
