"""`spotwise status JOB` as text reads only what it shows (review-af F7 went half way: the text
listed the 50 newest instance lives and every one still held, but ``jobs.status`` still read
every instance row of the job, and every trial, to count them; bench/status_big.py measures
the read of the newest-N path at 0.22x the full read's for 5,000 lives, in one process).
The text now reads the 50 newest, every older one still held and the count
(``jobs.status(newest=50)``); ``--json`` and ``--all`` read every life, as before. The rows,
their order and the "left out" line are what the old path printed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import event
from typer.testing import CliRunner

from spotwise import jobs
from spotwise.cli import render
from spotwise.cli.app import app
from spotwise.store import InstanceRow, Store

T0 = 1_790_000_000.0
LIVES = 120
#: older than the 50 newest, and not ended (an unknown state too): each must still be listed
HELD = {0: "running", 7: "requested", 33: "stopping", 52: "pending"}


def _id(i: int, lives: int = LIVES) -> str:
    """Life ``i``'s launch id: within its second, not in the order of ``i``."""
    return f"l-{(7 * i) % lives:03d}-{i:03d}" if i % 3 else f"l-{999 - i:03d}"


def _stored_order(lives: int = LIVES) -> list[int]:
    """The lives' indexes as the store orders them: by ``requested_at``, then id."""
    return sorted(range(lives), key=lambda i: (i // 3, _id(i, lives)))


def _store(tmp_path: Path, lives: int = LIVES) -> str:
    """Job j-big: ``lives`` lives over 3 trials, three to a second (``requested_at`` ties, put
    in order by id), ids not in the order of their index, so that the tie-break is tested;
    each named by its instance type ``type-NNN`` (NNN: its index); those in :data:`HELD`
    still held. A second job's lives, newer and held, must not show."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = json.dumps({"name": "big", "search_space": {"lr": {"type": "real"}}})
    with Store.open(db) as s:
        for job_id in ("j-big", "j-other"):
            s.create_job("big", spec, "job.yaml", "spot-greedy", "maximize", job_id=job_id)
            s.update_job(job_id, state="succeeded", created_at=T0, cost_usd=1.0)
            for n in range(3):
                s.add_trial(job_id, n, {"lr": 0.1}, trial_id=f"t-{job_id[2:]}{n}")
        s.update_job("j-big", best_trial_id="t-big1")
        s.update_trial("t-big1", state="completed", final_metric=0.9)
        for i in range(lives):
            s.record_launch(
                job_id="j-big", trial_id=f"t-big{i % 3}", provider="local", region="r",
                zone="z", instance_type=f"type-{i:03d}", market="spot", offer_key="k",
                price_per_hour=0.5, requested_at=T0 + i // 3,
                id=_id(i, lives),
                state=HELD.get(i, "revoked" if i % 2 else "terminated"),
                end_reason=None if i in HELD else "revoked" if i % 2 else "completed",
                cost_usd=0.01 * i,
            )  # fmt: skip
        for i in range(3):  # another job's, newer and held
            s.record_launch(
                job_id="j-other", trial_id="t-other0", provider="local", region="r", zone="z",
                instance_type="other", market="spot", offer_key="k", price_per_hour=0.5,
                requested_at=T0 + 10_000 + i, id=f"l-other-{i}", state="running",
            )  # fmt: skip
    return db


def _text(*args: str) -> str:
    saved = render.console
    render.console = Console(width=160, highlight=False, color_system=None)
    try:
        done = CliRunner().invoke(app, ["status", *args], env={"COLUMNS": "160"})
    finally:
        render.console = saved
    assert done.exit_code == 0, done.output
    return done.stdout


def _rendered(out: dict[str, Any], show_all: bool = False) -> str:
    """The text `print_status` prints for ``out``."""
    console = Console(width=160, highlight=False, color_system=None, record=True)
    saved, render.console = render.console, console
    try:
        render.print_status(out, show_all)
    finally:
        render.console = saved
    return console.export_text()


@pytest.fixture
def loaded() -> Iterator[list[str]]:
    """The ids of the instance rows the database hands back while the test runs."""
    ids: list[str] = []

    def on_load(row: InstanceRow, _context: Any) -> None:
        ids.append(row.id)

    event.listen(InstanceRow, "load", on_load)
    try:
        yield ids
    finally:
        event.remove(InstanceRow, "load", on_load)


def test_the_text_is_what_the_old_path_printed_from_every_row(tmp_path: Path) -> None:
    db = _store(tmp_path)
    every = jobs.status("j-big", db=db)  # every life, as the text read before
    assert len(every["instances"]) == LIVES and "instances_total" not in every
    text = _text("j-big", "--db", db)
    assert text == _rendered(every)  # the old path's rows, order, counts and left-out line
    listed = [int(n) for n in re.findall(r"^\s*t-big\d\s+type-(\d{3})\s", text, re.M)]
    order = _stored_order()
    assert order[:3] == [1, 2, 0]  # l-007-001 < l-014-002 < l-999: a second's lives, by id
    newest = order[-50:]
    assert listed == [i for i in order[:-50] if i in HELD] + newest  # oldest first, as stored
    assert (
        f"54 of {LIVES} instances shown (the 50 newest, and every one still held); "
        f"{LIVES - 54} older ones left out: spotwise status j-big --all lists every one"
    ) in " ".join(text.split())
    assert "other" not in text  # another job's lives: not this one's
    assert "best: t-big1 (#1) lr=0.1 → 0.9" in text
    assert "trials 3 · completed 1" in text
    # --all and --json read (and show) every life, as before
    assert _text("j-big", "--db", db, "--all") == _rendered(every, show_all=True)
    out = json.loads(_text("j-big", "--db", db, "--json"))
    assert [i["launch_id"] for i in out["instances"]] == [
        i["launch_id"] for i in every["instances"]
    ]
    assert "instances_total" not in out  # the JSON's keys are docs/json.md's
    assert (out["trials"], out["completed"], out["best"]["trial"]) == (3, 1, "t-big1")


def test_the_text_path_loads_only_the_rows_it_shows(
    tmp_path: Path, loaded: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _store(tmp_path)

    def refused(*a: Any, **kw: Any) -> Any:
        raise AssertionError("the text path read every row")

    with monkeypatch.context() as m:
        m.setattr(Store, "list_instances", refused)
        m.setattr(Store, "list_trials", refused)
        text = _text("j-big", "--db", db)
        assert "54 of 120 instances shown" in " ".join(text.split())
    assert len(loaded) == 54  # the 50 newest and the 4 older ones still held, once each
    loaded.clear()
    assert len(_text("j-big", "--db", db, "--json")) > 0
    assert len(loaded) == LIVES  # --json: every one of the job's
    loaded.clear()
    out = jobs.status("j-big", db=db, newest=50)
    assert (len(out["instances"]), out["instances_total"], len(loaded)) == (54, LIVES, 54)


def test_a_job_with_fewer_lives_than_shown_lists_them_all(tmp_path: Path) -> None:
    db = _store(tmp_path, lives=30)
    out = jobs.status("j-big", db=db, newest=50)
    assert [i["launch_id"] for i in out["instances"]] == [
        i["launch_id"] for i in jobs.status("j-big", db=db)["instances"]
    ]
    assert out["instances_total"] == 30
    text = _text("j-big", "--db", db)
    assert "left out" not in text and len(re.findall(r"type-\d{3}", text)) == 30
    with Store.open_existing(db) as s:  # the store's read on its own: none newest, held only
        rows, total = s.newest_instances("j-big", 0)
    assert ([r.id for r in rows], total) == ([_id(0, 30), _id(7, 30)], 30)
