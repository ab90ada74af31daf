"""`spotwise report`'s window bounds (review-as AS2, AS3).

AS2: the text report printed its `until` cut to the millisecond while the window ended at `now`
(sub-millisecond digits); chained on that text, as the README says, a bill written in the cut
fraction was counted in both windows. The window now ends at `now` to the whole millisecond
below, so its text is its end; an explicit end with microseconds is printed with them.

AS3: `--since inf`, `1e12` (an epoch in milliseconds), `1e300` or a time past the year 9999
exited 70 ("internal error"); `--until 1e12` was read as now. Both are refused when read: one
line naming the option and the fix, exit 2, before the database is opened."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest
from shared_helpers import cli_env_isolated, main_in_process, record_life

from spotwise import units
from spotwise.cli import report as report_cli
from spotwise.errors import SpecError
from spotwise.store import Store
from spotwise.units import parse_time, window

BASE = 1_795_596_550.0  # 2026-11-25 08:49:10 UTC
BILL = BASE + 0.7803  # a $1 bill, written 0.3 ms before window A's `now`
NOW_A = BASE + 0.7806


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cli_env_isolated(monkeypatch, tmp_path)


def _store(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        spec = json.dumps({"providers": [{"name": "aws", "regions": ["us-east-1"]}]})
        s.create_job("j-aws", spec, "job.yaml", "spot-greedy", "maximize", job_id="j-aws")
        s.update_job("j-aws", state="succeeded")
        record_life(
            s, "j-aws", 0, "l-0", requested_at=BILL - 3600, launched_at=BILL - 3600,
            state="terminated", ended_at=BILL, cost_usd=1.0, on_demand_cost_usd=3.0,
            market_seconds=3600.0,
        )  # fmt: skip
    return db


def _report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], now: float, *args: str
) -> tuple[int, str, list[str]]:
    """`spotwise report ARGS` run at wall time ``now``."""
    with pytest.MonkeyPatch.context() as clock:
        clock.setattr(time, "time", lambda: now)
        return main_in_process(monkeypatch, capsys, "report", *args)


# --- AS2 ------------------------------------------------------------------------------------


def test_chaining_on_the_text_reports_until_counts_a_bill_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The finding's repro: window A (until = now) holds the bill; B, started on A's text
    `until`, held it again ($1 + $1 of a $1 bill)."""
    db = _store(tmp_path)
    # each run SETTLE_S after the instant its window ends at (the default holds the end back)
    settle = units.SETTLE_S
    code, text, err = _report(monkeypatch, capsys, NOW_A + settle, "--since", "1h", "--db", db)
    assert code == 0, err
    found = re.search(r"^bills written from .* to (\S+ \S+) UTC$", text, re.MULTILINE)
    assert found is not None, text
    shown = f"{found.group(1)} UTC"
    assert shown == "2026-11-25 08:49:10.780 UTC"
    code, out, err = _report(
        monkeypatch, capsys, NOW_A + settle, "--since", "1h", "--db", db, "--json"
    )
    a = json.loads(out)
    later = BASE + 60.0 + settle
    code, out, err = _report(monkeypatch, capsys, later, "--since", shown, "--db", db, "--json")
    b = json.loads(out)
    code, out, err = _report(monkeypatch, capsys, later, "--since", "all", "--db", db, "--json")
    every = json.loads(out)
    # was $1 + $1: the bill, 0.3 ms before A's now, was after A's text end and before A's end
    assert (a["totals"]["cost_usd"], b["totals"]["cost_usd"]) == (0.0, 1.0)
    assert every["totals"]["cost_usd"] == 1.0
    assert b["since"] == a["until"] == parse_time(shown, field="--since", now=0.0)
    assert a["until"] <= NOW_A  # A ends at its now to the millisecond below


def test_a_window_ending_now_ends_on_a_whole_millisecond_never_after_now() -> None:
    assert window("24h", "now", NOW_A) == (BASE + 0.780 - 86400.0, BASE + 0.780)
    assert window("24h", None, NOW_A)[1] == BASE + 0.780 - units.SETTLE_S  # held back, whole
    assert window("all", "now", NOW_A) == (None, BASE + 0.780)
    assert window("all", "1h", NOW_A) == (None, BASE + 0.780 - 3600.0)
    assert window("all", "2030-01-01", NOW_A) == (None, BASE + 0.780 - units.SETTLE_S)  # None
    # an explicit end keeps its digits: the next window is chained on it as given
    assert window("all", repr(BASE + 0.5), NOW_A) == (None, BASE + 0.5)
    rng = random.Random(7)
    for _ in range(5_000):
        now = rng.uniform(1.7e9, 1.9e9)
        end = units.whole_ms(now)
        assert end <= now and now - end < 0.001 + 5e-7  # (float rounding of a difference)
        text = report_cli._when(end)
        assert re.fullmatch(r"\S+ \d\d:\d\d:\d\d(\.\d{3})?", text), text
        assert parse_time(f"{text} UTC", field="--since", now=0.0) == end


def test_the_text_gives_an_end_with_microseconds_all_its_digits() -> None:
    until = parse_time("2026-11-25T08:49:10.780612Z", field="--until", now=0.0)
    assert report_cli._when(until) == "2026-11-25 08:49:10.780612"
    line = report_cli._window_line(BASE, until)
    assert line == "bills written from 2026-11-25 08:49:10 to 2026-11-25 08:49:10.780612 UTC"
    # digits past the microsecond (an epoch typed so): the epoch seconds are given too
    odd = BASE + 0.7806123
    assert report_cli._window_line(None, odd).endswith(f" UTC (epoch s: all to {odd!r})")


# --- AS3 ------------------------------------------------------------------------------------

FAR = [
    ("inf", "past the year 9999"),
    ("infinity", "past the year 9999"),
    ("1e300", "past the year 9999"),
    ("99999999999999999999", "past the year 9999"),
    ("9999-12-31T23:00-05:00", "past the year 9999"),
    ("1e12", "an epoch in milliseconds? divide it by 1000: 1000000000"),
    ("1795596550780", "an epoch in milliseconds? divide it by 1000: 1795596550.78"),
]


@pytest.mark.parametrize(("text", "says"), FAR)
@pytest.mark.parametrize("option", ["--since", "--until"])
def test_a_bound_past_the_year_9999_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    option: str,
    text: str,
    says: str,
) -> None:
    """Was exit 70 "internal error: OverflowError/ValueError" for --since; --until was taken
    as now (an epoch in ms read as a window ending now)."""
    db = _store(tmp_path)
    args = ["--since", text] if option == "--since" else ["--since", "all", "--until", text]
    code, out, err = _report(monkeypatch, capsys, NOW_A, *args, "--check", "--json", "--db", db)
    assert (code, out) == (2, ""), err
    assert len(err) == 1 and err[0].startswith(f"error: {option}: {text!r} "), err
    assert says in err[0]


def test_an_end_before_the_year_1_is_refused_and_a_start_there_is_every_bill() -> None:
    with pytest.raises(SpecError, match=r"^--until: '99999999999w' is before the year 1"):
        window("all", "99999999999w", NOW_A)
    assert window("99999999999w", "now", NOW_A) == (None, BASE + 0.780)  # as `all`, as before
    assert units._utc(float("inf")) == "inf (epoch s)"  # a message never fails on its time
