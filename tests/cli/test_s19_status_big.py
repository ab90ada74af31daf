"""`spotwise status JOB` as text for a job with thousands of instance lives (review-af F7: 5,500
lives printed every row, in 16 s): the text lists the 50 newest and every one still held
(never hidden, whatever its age), then a line saying how many were left out and that
``--json`` lists every one; ``--json`` keeps them all."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from shared_helpers import main_in_process
from typer.testing import CliRunner

from spotwise.cli import render
from spotwise.cli.app import app
from spotwise.store import Store

T0 = 1_790_000_000.0
LIVES = 80
#: older than the 50 newest, and not ended: each must still be listed
HELD = {3: "running", 10: "requested", 20: "stopping", 25: "pending"}


def _store(tmp_path: Path, lives: int = LIVES) -> str:
    """Job j-big: ``lives`` instance lives of one trial, a second apart, each named by its
    instance type ``type-NNN`` (NNN: its index, oldest first); those in :data:`HELD` are
    still held, the others ended."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = json.dumps({"name": "big", "search_space": {"lr": {"type": "real"}}})
    with Store.open(db) as s:
        s.create_job("big", spec, "job.yaml", "spot-greedy", "maximize", job_id="j-big")
        s.update_job("j-big", state="running", created_at=T0, pid=None)
        trial = s.add_trial("j-big", 0, {"lr": 0.1}, trial_id="t-big0")
        for i in range(lives):
            s.record_launch(
                job_id="j-big",
                trial_id=trial.id,
                provider="local",
                region="r",
                zone="z",
                instance_type=f"type-{i:03d}",
                market="spot",
                offer_key="k",
                price_per_hour=0.5,
                requested_at=T0 + i,
                id=f"l-{i:03d}",
                state=HELD.get(i, "revoked" if i % 2 else "terminated"),
                end_reason=None if i in HELD else "revoked" if i % 2 else "completed",
                cost_usd=0.01,
            )
    return db


def _status(*args: str) -> tuple[int, str]:
    saved = render.console
    render.console = Console(width=160, highlight=False, color_system=None)
    try:
        done = CliRunner().invoke(app, ["status", *args], env={"COLUMNS": "160"})
    finally:
        render.console = saved
    return done.exit_code, done.stdout


def _listed(text: str) -> list[int]:
    """The indexes of the instance rows the text shows, in order."""
    return [int(n) for n in re.findall(r"^\s*t-big0\s+type-(\d{3})\s", text, re.M)]


def test_the_text_lists_the_newest_and_every_held_one(tmp_path: Path) -> None:
    db = _store(tmp_path)
    code, text = _status("j-big", "--db", db)
    assert code == 0, text
    newest = list(range(LIVES - 50, LIVES))
    assert _listed(text) == sorted(HELD) + newest  # oldest first, as stored
    shown = len(HELD) + len(newest)
    assert (
        f"{shown} of {LIVES} instances shown (the 50 newest, and every one still held); "
        f"{LIVES - shown} older ones left out: spotwise status j-big --all lists every one"
    ) in " ".join(text.split())
    code, text = _status("j-big", "--db", db, "--all")
    assert code == 0, text
    assert _listed(text) == list(range(LIVES)) and "left out" not in text

    code, out = _status("j-big", "--db", db, "--json")  # the JSON keeps every life
    assert code == 0
    assert [i["launch_id"] for i in json.loads(out)["instances"]] == [
        f"l-{i:03d}" for i in range(LIVES)
    ]


def test_a_job_with_few_lives_lists_them_all(tmp_path: Path) -> None:
    db = _store(tmp_path, lives=50)
    code, text = _status("j-big", "--db", db)
    assert code == 0, text
    assert _listed(text) == list(range(50))
    assert "left out" not in text


def test_shown_instances_never_hides_a_held_one() -> None:
    """Every state that is not ended (an unknown one too) is kept, however old."""
    states = ["requested", "pending", "running", "stopping", "mystery"]
    rows = [{"state": s} for s in states] + [{"state": "terminated"}] * 60
    rows += [{"state": "revoked"}, {"state": "failed"}] * 30
    shown = render.shown_instances(rows)
    assert [r["state"] for r in shown[:5]] == states
    assert len(shown) == 5 + render.NEWEST_INSTANCES
    assert render.shown_instances(rows, show_all=True) == rows


def test_all_without_a_job_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """review-aj F6: `status --all` with no JOB was taken and ignored."""
    db = _store(tmp_path, lives=3)
    code, out, err = main_in_process(monkeypatch, capsys, "status", "--all", "--db", db)
    assert (code, out) == (2, "")
    assert err[0] == (
        "error: --all lists one job's instance lives: give the JOB (spotwise status JOB --all)"
    )
