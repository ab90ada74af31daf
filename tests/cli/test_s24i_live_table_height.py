"""`tune`'s live table of a big job (review-bd BD2): with more trials than terminal lines it
showed trials 0-18 (all finished) then "...", never the running ones nor the progress bar, and
drew every trial on each of Live's 4 refreshes a second, in the orchestrator's process.

Now it fits the terminal's height: every unfinished trial first (running, waiting, pending),
then the best few finished, then a line saying how many more and the command listing them all;
a job whose trials fit looks as before. The table is drawn once per snapshot that changes it."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from spotwise.cli import render

JOB = "j-0123456789abcdef"


def _trial(n: int, state: str, metric: float | None = None) -> dict[str, Any]:
    on = state in ("running", "waiting")
    return {
        "number": n,
        "trial": f"t-{n:08x}",
        "params": {"x": round(0.001 * n - 0.5, 3), "y": round(0.3 - 0.002 * n, 3)},
        "step": 12 if on else (0 if state == "pending" else 30),
        "steps": 30,
        "metric": metric,
        "state": state,
        "instance": "us-east-1f/spot" if state == "running" else "",
        "cost_usd": 0.42,
        "revocations": 0,
    }


def _snap(trials: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {
        "job_id": JOB,
        "policy": "spot-greedy",
        "trials": trials,
        "market_time": 1.68e9,
        "cost_usd": 63.2,
        "revocations": 40,
        "migrations": 40,
        "progress": 4000,
        "total": 30 * len(trials),
        "direction": "maximize",
        **kw,
    }


def _big(n: int = 150, running: int = 12) -> dict[str, Any]:
    """``n`` trials, the last ``running`` of them running; trial k's metric: k/1000, so the
    best completed trials are the latest completed ones (maximize)."""
    return _snap(
        [_trial(k, "running" if k >= n - running else "completed", k / 1000) for k in range(n)]
    )


def _plain(text: str) -> list[str]:
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")
    return text.split("\n")


@contextmanager
def _terminal(
    monkeypatch: pytest.MonkeyPatch, width: int = 80, height: int = 24
) -> Iterator[io.StringIO]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, height=height, force_terminal=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    yield buf


def _frame(live: render.LiveJob, buf: io.StringIO) -> list[str]:
    """What one of Live's refreshes draws now (the terminal's lines), as `tune` shows it."""
    before = len(buf.getvalue())
    live.live.refresh()
    return _plain(buf.getvalue()[before:])


def _live(snap: dict[str, Any], buf: io.StringIO) -> tuple[render.LiveJob, list[str]]:
    live = render.LiveJob()
    live.live.auto_refresh = False  # refreshed by the test, not by Live's thread
    live.update(snap)
    return live, _frame(live, buf)


def _numbers(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.match(r"\s*(\d+)\s+[a-z_]+=", line))]


def test_a_150_trial_job_at_80x24_shows_every_running_trial_and_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _terminal(monkeypatch) as buf:
        live, frame = _live(_big(), buf)
        live.__exit__(None, None, None)
    text = "\n".join(frame)
    assert len(frame) <= 24, text
    assert "..." not in text, text  # nothing cut by Live's ellipsis
    shown = _numbers(frame)
    # every running trial first, in number order, then the 5 best completed (best first)
    assert shown == [*range(138, 150), 137, 136, 135, 134, 133], text
    running = [line for line in frame if re.search(r"\b12/30\b.*us-east-1f\s+spot\s+running", line)]
    assert len(running) == 12, text
    assert f"133 more finished (spotwise trials {JOB})" in text
    assert re.search(r"tuning .*4000/4500 steps", text), text  # the progress bar is drawn


def test_unfinished_trials_that_overflow_show_as_many_as_fit_and_say_how_many_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trials = (
        [_trial(k, "completed", 0.5) for k in range(100)]
        + [_trial(k, "pending") for k in range(100, 130)]
        + [_trial(k, "waiting") for k in range(130, 135)]
        + [_trial(k, "running") for k in range(135, 150)]
    )
    with _terminal(monkeypatch) as buf:
        live, frame = _live(_snap(trials), buf)
        live.__exit__(None, None, None)
    text = "\n".join(frame)
    assert len(frame) <= 24 and "..." not in text, text
    shown = _numbers(frame)
    # running first, then waiting, then pending: as many as fit (no finished one has room)
    assert len(shown) >= 17, text
    assert shown == [*range(135, 150), *range(130, 135), *range(100, 130)][: len(shown)]
    hidden = 50 - len(shown)
    assert f"{hidden} more unfinished and 100 more finished (spotwise trials {JOB})" in text


def test_rows_that_wrap_in_a_narrow_terminal_still_fit_its_height(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snap = _big(60, running=8)
    for t in snap["trials"]:  # four parameters: three lines a row at 70 columns
        t["params"] = {"lr": 0.0122, "hidden": 31, "weight_decay": 1.11e-05, "dropout": 0.4}
    with _terminal(monkeypatch, width=70, height=20) as buf:
        live, frame = _live(snap, buf)
        live.__exit__(None, None, None)
    text = "\n".join(frame)
    assert len(frame) <= 20 and "..." not in text, text
    assert _numbers(frame)[:4] == [52, 53, 54, 55], text  # the running trials come first
    words = " ".join(text.split())  # the line wraps between its words
    assert f"4 more unfinished and 52 more finished (spotwise trials {JOB})" in words, text
    assert "4000/1800 steps" in text, text


def test_a_job_whose_trials_fit_looks_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = _big(8, running=3)
    with _terminal(monkeypatch) as buf:
        live, frame = _live(snap, buf)
        live.__exit__(None, None, None)
    table = Console(width=80, record=True, color_system=None, file=io.StringIO())
    table.print(render.live_table(snap, 80))
    expected = [line.rstrip() for line in table.export_text().splitlines()]
    assert [line.rstrip() for line in frame[: len(expected)]] == expected
    assert _numbers(frame) == list(range(8))  # every trial, in number order
    assert "more" not in "\n".join(frame)


def test_the_best_finished_follow_the_direction_and_without_it_the_latest() -> None:
    from spotwise.cli.render_cells import BEST_FINISHED, live_rows

    trials = [_trial(k, "completed", m) for k, m in enumerate([0.3, 0.9, 0.1, 0.5, 0.2, 0.7])]
    trials += [
        _trial(6, "failed"),
        _trial(7, "stopped_early", 0.01),
        _trial(8, "completed", float("nan")),
        _trial(9, "running", 0.0),
    ]
    room = 1 + 1 + BEST_FINISHED  # the running trial, 5 finished, the line
    rows, more = live_rows(_snap(trials, direction="minimize"), room)
    assert [r["number"] for r in rows] == [9, 2, 4, 0, 3, 5]
    assert more == f"4 more finished (spotwise trials {JOB})"
    rows, _ = live_rows(_snap(trials, direction="maximize"), room)
    assert [r["number"] for r in rows] == [9, 1, 5, 3, 0, 4]
    rows, _ = live_rows(_snap(trials, direction=None), room)  # no rank by metric
    assert [r["number"] for r in rows] == [9, 8, 7, 6, 5, 4]
    rows, more = live_rows(_snap(trials), 10)  # they all fit: as today
    assert [r["number"] for r in rows] == list(range(10)) and more is None


def test_the_table_is_drawn_once_per_change_not_on_every_refresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn: list[int] = []
    draw = Table.__rich_console__

    def counted(self: Table, console: Any, options: Any) -> Any:
        if str(self.title).startswith("job "):  # the trials' table, not the progress bar's
            drawn.append(len(self.rows))
        return draw(self, console, options)

    monkeypatch.setattr(Table, "__rich_console__", counted)
    snap = _big()
    with _terminal(monkeypatch) as buf:
        live, _ = _live(snap, buf)
        for _ in range(3):
            _frame(live, buf)
            live.update(_snap(snap["trials"]))  # a new snapshot, the same trials
        assert drawn == [17]  # once, for 17 rows (not 150, four times)
        # a change within TABLE_EVERY_S waits, but the last picture shows it
        trials = [dict(t) for t in snap["trials"]]
        trials[149] = {**trials[149], "step": 29}
        live.update(_snap(trials))
        before = len(buf.getvalue())
        live.__exit__(None, None, None)
    last = "\n".join(_plain(buf.getvalue()[before:]))
    assert re.search(r"^149 .*29/30", last, re.M), last
    assert drawn == [17, 17]


def test_not_a_terminal_the_last_picture_fits_the_default_height(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buf = io.StringIO()  # `tune > log`: Live draws only its last picture
    console = Console(file=buf, width=80, height=25, color_system=None)
    monkeypatch.setattr(render, "console", console)
    live = render.LiveJob()
    live.update(_big(400))
    live.__exit__(None, None, None)
    lines = _plain(buf.getvalue().rstrip("\n"))
    text = "\n".join(lines)
    assert len(lines) <= 25, text
    assert _numbers(lines)[:12] == list(range(388, 400)), text
    assert f"383 more finished (spotwise trials {JOB})" in text
