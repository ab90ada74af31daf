"""A cron that chains its report windows on the previous line's `until` counts each bill once
(review-ah F3): the JSON gives `until` in epoch seconds, and `--since 1795560328.81` was read as
a duration of that many seconds, so every window started in 1970 and counted the whole history
again. A number from 1e9 on is now a time; the text report's own form of a time is accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shared_helpers import record_life
from typer.testing import CliRunner

from spotwise import costs
from spotwise.cli.app import app
from spotwise.store import Store

NOW = 1_790_000_000.0
H = 3600.0


def _store(tmp_path: Path) -> str:
    """One finished AWS job with lives whose bills were written 3 h, 2 h and 1 h ago."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = json.dumps({"providers": [{"name": "aws"}]})
    with Store.open(db) as s:
        s.create_job("j", spec, "job.yaml", "spot-greedy", "maximize", job_id="j-1")
        s.update_job("j-1", state="succeeded", cost_usd=6.0)
        for n, (ago, usd) in enumerate([(3 * H, 1.0), (2 * H, 2.0), (H, 3.0)], 1):
            record_life(
                s, "j-1", n, f"l-{n}", requested_at=NOW - ago - H, launched_at=NOW - ago - H,
                state="terminated", ended_at=NOW - ago, cost_usd=usd, market_seconds=H,
            )  # fmt: skip
    return db


def test_chaining_on_the_json_until_counts_each_bill_once(tmp_path: Path) -> None:
    db = _store(tmp_path)
    first = costs.report(since="60m", by="provider", db=db, now=NOW - 90 * 60)  # 2 h ago
    assert first["totals"]["cost_usd"] == pytest.approx(2.0)
    second = costs.report(since=repr(first["until"]), by="provider", db=db, now=NOW)
    assert second["since"] == pytest.approx(first["until"])  # was 2.59 (1970)
    assert second["totals"]["cost_usd"] == pytest.approx(3.0)  # was 6.0: everything again


def test_the_text_reports_own_form_of_a_time_is_a_time(tmp_path: Path) -> None:
    db = _store(tmp_path)
    out = costs.report(since="2026-09-21 11:33:20 UTC", by="provider", db=db, now=NOW)
    assert out["since"] == pytest.approx(NOW - 3 * H + 1200.0)  # 20 min after the first bill
    assert out["totals"]["cost_usd"] == pytest.approx(5.0)


def test_a_small_bare_number_is_still_seconds(tmp_path: Path) -> None:
    db = _store(tmp_path)
    res = CliRunner().invoke(app, ["report", "--since", "5400", "--db", db, "--json"])
    assert res.exit_code == 0, res.output  # the last 90 minutes: the bill written 1 h ago
    assert json.loads(res.stdout)["since"] == pytest.approx(json.loads(res.stdout)["until"] - 5400)


def test_the_text_shows_a_window_that_holds_only_a_later_part_of_a_bill(tmp_path: Path) -> None:
    """review-ah F10: an instance found after its record closed, billed $3.06 more a minute ago:
    --json counted it, the text said "no instance life ended in this window" and no table."""
    db = _store(tmp_path)
    with Store.open_existing(db) as s:  # a part dated a minute before the report
        s.update_instance("l-1", cost_usd=1.0 + 3.06, market_seconds=2 * H, billed_at=NOW - 60)
    out = costs.report(since="10m", by="provider", db=db, now=NOW)
    assert (out["totals"]["lives"], out["totals"]["cost_usd"]) == (0, pytest.approx(3.06))
    res = CliRunner().invoke(
        app, ["report", "--since", repr(NOW - 600), "--until", repr(NOW), "--db", db]
    )
    assert res.exit_code == 0, res.output
    assert "3.0600" in res.stdout and "nothing billed" not in res.stdout


def test_a_bill_at_midnight_is_the_ending_days_in_both_windows_and_day_groups(
    tmp_path: Path,
) -> None:
    """review-ah F7: windows are (since, until], so a bill written at exactly 00:00 UTC is in
    the day that ends then; `--by day` labelled it the new day."""
    midnight = 1_795_564_800.0  # 2026-11-25T00:00:00Z
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        s.create_job("j", json.dumps({"providers": [{"name": "aws"}]}), "job.yaml", "spot-greedy",
                     "maximize", job_id="j-1")  # fmt: skip
        record_life(
            s, "j-1", 1, "l-1", requested_at=midnight - H, launched_at=midnight - H,
            state="terminated", ended_at=midnight, cost_usd=4.0, market_seconds=H,
        )  # fmt: skip
    now = midnight + 3 * 86400
    day24 = costs.report(since="2026-11-24", until="2026-11-25", by="day", db=db, now=now)
    assert [(g["key"], g["cost_usd"]) for g in day24["groups"]] == [("2026-11-24", 4.0)]
    every = costs.report(since="all", by="day", db=db, now=now)
    assert [g["key"] for g in every["groups"]] == ["2026-11-24"]  # was 2026-11-25
