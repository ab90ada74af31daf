"""At cron's width (no terminal, no COLUMNS: rich prints 80 columns) no table crops a job id,
an instance id, a state or a number (review-af F6).

`report`'s held table (8 columns, 18-character job ids) and `status`'s listing with a job
whose orchestrator is gone did not fit 80 columns even with their wrapping columns at their
narrowest, and rich then shrank every column, cutting the ``no_wrap`` ones with "…"
(``j-a0000000000000…``, ``succeed…``, ``1234.…``). :func:`spotwise.cli.output.fit` now lets
those columns give way instead: values with spaces wrap between words, ids fold onto more
lines (every character kept), numbers fold last.

The store's rows are written directly (no job runs).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from spotwise.cli import render
from spotwise.cli.app import app
from spotwise.cli.output import fit, listing
from spotwise.store import Store

WIDTH = 80
DEAD_PID = 2**22 + 12345  # no process has it
JOB = "j-a000000000000000"  # 18 characters, as spotwise names jobs
INSTANCES = ("i-0123456789abcdef0", "i-0fedcba9876543210")


def _table(lines: list[str]) -> tuple[str, list[str]]:
    """The header line of the table whose header starts with "job", and its lines under the
    rule, up to a blank line, its caption or a line saying something (``: ``)."""
    head = next(i for i, line in enumerate(lines) if line.startswith("job "))
    body: list[str] = []
    for line in lines[head + 2 :]:
        if not line.strip() or ": " in line or "times in UTC" in line:
            break
        body.append(line)
    return lines[head], body


def _rows(lines: list[str]) -> list[str]:
    """The first line of each row of that table (a job id starts it)."""
    return [line for line in _table(lines)[1] if line.startswith("j-")]


def _cells(lines: list[str], name: str) -> list[str]:
    """The cells of that table's column ``name`` (left-aligned), a folded cell joined back."""
    header, body = _table(lines)
    pos = header.index(name)
    cells: list[str] = []
    for line in body:
        piece = line[pos:].split()[0] if len(line) > pos and line[pos] != " " else ""
        if line.startswith("j-"):
            cells.append(piece)
        else:
            cells[-1] += piece
    return cells


def _fits(text: str) -> list[str]:
    lines = text.splitlines()
    assert "…" not in text, text
    assert max(len(line) for line in lines) <= WIDTH, text
    return lines


def _held_store(tmp_path: Path) -> str:
    """A finished aws job (id 18 characters) whose record still holds two instances launched
    1234.5 h ago: a p3.16xlarge at $24.48/h and a g5.48xlarge at $16.288/h."""
    db = f"sqlite:///{tmp_path / 'held.db'}"
    spec = json.dumps({"name": "big", "providers": [{"name": "aws"}]})
    started = time.time() - 1234.5 * 3600
    with Store.open(db) as s:
        s.create_job("big", spec, "job.yaml", "spot-greedy", "maximize", job_id=JOB)
        s.update_job(JOB, state="succeeded")
        for n, (iid, itype, price) in enumerate(
            zip(INSTANCES, ("p3.16xlarge", "g5.48xlarge"), (24.48, 16.288), strict=True)
        ):
            t = s.add_trial(JOB, n, {"lr": 0.1})
            s.record_launch(
                job_id=JOB, trial_id=t.id, provider="aws", region="us-east-1",
                zone="us-east-1a", instance_type=itype, market="on-demand",
                offer_key=f"aws:us-east-1a:{itype}:on-demand", price_per_hour=price,
                id=f"l-{n}", state="running", launched_at=started, provider_instance_id=iid,
            )  # fmt: skip
    return db


def test_the_held_table_of_a_cron_report_crops_no_id_state_or_hours(tmp_path: Path) -> None:
    db = _held_store(tmp_path)
    # a cron job: stdout is no terminal and COLUMNS is unset (rich's default: 80)
    done = CliRunner().invoke(app, ["report", "--check", "--db", db], env={"COLUMNS": None})
    assert done.exit_code == 1, done.stdout  # held by a finished job
    lines = _fits(done.stdout)
    assert _cells(lines, "job") == [JOB, JOB]  # folded, every character kept
    assert _cells(lines, "instance") == list(INSTANCES)
    assert _cells(lines, "state") == ["succeeded", "succeeded"]
    rows = _rows(lines)
    assert [line.split()[-1] for line in rows] == ["1234.50", "1234.50"]  # on one line
    assert [line.split()[-2] for line in rows] == ["24.4800", "16.2880"]
    # the headers stay whole too
    header = next(line for line in lines if line.startswith("job "))
    assert header.split() == [
        "job",
        "state",
        "provider",
        "zone",
        "type",
        "instance",
        "$/h",
        "hours",
    ]


def test_the_status_listing_at_80_columns_crops_no_id_or_metric(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = json.dumps({"name": "digits-mlp", "providers": [{"name": "local"}]})
    ids = ["j-5b87c4d94ca1fa96", "j-1db4ae1f34415ce2"]
    with Store.open(db) as s:
        for n, job_id in enumerate(ids):
            s.create_job("digits-mlp", spec, "job.yaml", "spot-greedy", "maximize", job_id=job_id)
            s.update_job(job_id, state="succeeded", best_metric=0.9512345, cost_usd=2.0336,
                         created_at=1_795_408_362.0 - n)  # fmt: skip
        s.update_job(ids[0], state="running", pid=DEAD_PID)  # its orchestrator is gone
    saved = render.console
    render.console = Console(width=WIDTH, highlight=False, color_system=None)
    try:
        done = CliRunner().invoke(app, ["status", "--db", db], env={"COLUMNS": None})
    finally:
        render.console = saved
    assert done.exit_code == 0, done.stdout
    lines = _fits(done.stdout)
    assert _cells(lines, "job") == ids
    rows = _rows(lines)
    assert all("0.9512" in line.split() for line in rows), rows
    assert "~2.0336*" in rows[0].split() and "2.0336*" in rows[1].split()


def test_fit_folds_rather_than_lets_rich_crop_and_keeps_a_table_that_fits_as_it_was() -> None:
    def table() -> Table:
        t = listing()
        t.add_column("id", no_wrap=True)
        t.add_column("when", no_wrap=True)
        t.add_column("note")
        t.add_column("n", justify="right", no_wrap=True)
        for i in range(2):
            t.add_row(f"x-{'7' * 30}{i}", "11-23 04:32", "a few words here", "123456.75")
        return t

    def draw(width: int) -> str:
        console = Console(width=width, record=True, color_system=None)
        console.print(fit(table(), width))
        return console.export_text()

    wide = draw(120)  # everything fits: one line a row, as before
    assert [line.split() for line in wide.splitlines() if line.startswith("x-")] == [
        [f"x-{'7' * 30}{i}", "11-23", "04:32", "a", "few", "words", "here", "123456.75"]
        for i in range(2)
    ]
    narrow = draw(40)  # 33 + 11 + 5 + 9 + 6 > 40: the date wraps, the id folds, nothing cut
    lines = narrow.splitlines()
    assert "…" not in narrow and max(len(line) for line in lines) <= 40, narrow
    ids = [line.split()[0] for line in lines[2:] if line[:1] != " "]
    assert "".join(ids) == f"x-{'7' * 30}0x-{'7' * 30}1", narrow  # folded, whole
    assert sum("123456.75" in line for line in lines) == 2, narrow  # numbers whole, one line
