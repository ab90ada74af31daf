"""At 80 columns (a cron log) `spotwise status` keeps a short job name whole and folds the job
ids instead (review-ah F13).

Before: with a job whose orchestrator is gone, the listing did not fit 80 columns; the ids
folded (``j-5b87c4d94ca1f`` / ``a96``) and the name column, whose floor was 8 columns whatever
its words, broke the 10-letter name ``digits-mlp`` as ``digits-m`` / ``lp``; without such a
job the spare columns went half to the name, half to a wrapped date, and the name still broke
(``digits-ml`` / ``p``). A name's word of up to 12 letters now breaks only where the ids fold
as narrow; a longer word (already folded) folds before an id does, as it did.
"""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.table import Table

from spotwise.cli import render
from spotwise.cli.output import SHORT_WORD, fit, listing

WIDTH = 80
IDS = ["j-5b87c4d94ca1fa96", "j-1db4ae1f34415ce2"]


def _rows(name: str, gone: bool) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for n, job_id in enumerate(IDS):
        rows.append(
            {
                "job_id": job_id,
                "name": name,
                "state": "running" if gone and n == 0 else "succeeded",
                "policy": "spot-greedy",
                "best_metric": 0.9512345,
                "cost_usd": 2.0336,
                "cost_is_estimate": gone and n == 0,
                "simulated": True,
                "created_at": 1_795_408_362.0 - n,
                **({"orchestrator": "gone"} if gone and n == 0 else {}),
            }
        )
    return rows


def _listing(monkeypatch: pytest.MonkeyPatch, name: str, gone: bool) -> list[str]:
    """The table of `status` (no job id) at 80 columns: the header line and the lines under
    the rule, up to its caption."""
    console = Console(width=WIDTH, record=True, color_system=None, highlight=False)
    monkeypatch.setattr(render, "console", console)
    render.print_jobs(_rows(name, gone))
    text = console.export_text()
    assert "…" not in text, text
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, text
    head = next(i for i, line in enumerate(lines) if line.startswith("job "))
    end = next(i for i, line in enumerate(lines) if "times in UTC" in line)
    return [lines[head], *lines[head + 2 : end]]


def _column(table: list[str], name: str) -> list[list[str]]:
    """Each row's pieces (one a line) in the column ``name``; a row starts with a job id."""
    header, body = table[0], table[1:]
    start = header.index(name)
    end = start + len(name)
    while end < len(header) and header[end] == " ":
        end += 1
    cells: list[list[str]] = []
    for line in body:
        piece = line[start:end].strip()
        if line.startswith("j-"):
            cells.append([piece])
        elif piece:
            cells[-1].append(piece)
    return cells


@pytest.mark.parametrize("gone", [True, False], ids=["orchestrator-gone", "all-finished"])
def test_a_ten_letter_name_stays_whole_at_80_columns(
    monkeypatch: pytest.MonkeyPatch, gone: bool
) -> None:
    table = _listing(monkeypatch, "digits-mlp", gone)
    assert _column(table, "name") == [["digits-mlp"], ["digits-mlp"]], "\n".join(table)
    ids = _column(table, "job")
    assert ["".join(cell) for cell in ids] == IDS  # folded or not, every character kept
    if gone:  # the ids gave way (they may fold), not the name
        assert all(len(cell) == 2 for cell in ids), "\n".join(table)
    else:  # it fits with the date wrapped: nothing folds
        assert ids == [[IDS[0]], [IDS[1]]], "\n".join(table)


def test_a_long_name_still_folds_before_an_id_does(monkeypatch: pytest.MonkeyPatch) -> None:
    long_name = "resnet50-cifar10-sweep-large"  # one word of 28 letters: folded in any case
    table = _listing(monkeypatch, long_name, gone=False)
    assert _column(table, "job") == [[IDS[0]], [IDS[1]]], "\n".join(table)
    names = _column(table, "name")
    assert ["".join(cell) for cell in names] == [long_name, long_name]
    assert all(len(cell) > 1 for cell in names)


def test_fit_breaks_a_short_word_only_where_the_ids_fold_as_narrow() -> None:
    """A table that must lose 12 columns: the 18-letter ids fold first, down to the name's
    10; then both fold evenly."""

    def draw(width: int) -> list[int]:
        t: Table = listing()
        t.add_column("id", no_wrap=True)
        t.add_column("name", overflow="fold")
        t.add_column("n", justify="right", no_wrap=True)
        t.add_row("x-" + "7" * 16, "abcdefghij", "123456.75")
        fit(t, width)
        return [int(c.width) if c.width is not None else -1 for c in t.columns]

    assert SHORT_WORD >= 10
    assert draw(18 + 10 + 9 + 4) == [-1, 10, -1]  # fits: nothing turned
    assert draw(18 + 10 + 9 + 4 - 6) == [12, 10, -1]  # the id folds, the name stays whole
    assert draw(18 + 10 + 9 + 4 - 8) == [10, 10, -1]
    assert draw(18 + 10 + 9 + 4 - 10) == [9, 9, -1]  # then both, evenly
