"""review-am's messages about curve CSVs and price histories: a row with an empty curve_id is
refused with the file and line (it was read as a curve called ''), and ``prices --history``
titles its table from the first point shown, not from a window start before the trace."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from spotwise.cli import cloud as cloud_cli
from spotwise.errors import SpecError
from spotwise.predictors.curves import load_curves


# ---- item 4: an empty curve_id ---------------------------------------------------------------
@pytest.mark.parametrize("cid", ["", "  "])
def test_an_empty_curve_id_is_refused_with_file_and_line(tmp_path: Path, cid: str) -> None:
    path = tmp_path / "emptyid.csv"
    path.write_text(f"curve_id,step,value\na,1,0.5\na,2,0.6\n{cid},1,0.7\n")
    with pytest.raises(SpecError) as e:
        load_curves(path, label="FILE")
    assert str(e.value) == (
        "FILE: emptyid.csv line 4: empty curve_id; give every row its curve's curve_id"
    )
    assert e.value.exit_code == 2


def test_an_lcbench_file_names_its_own_id_column(tmp_path: Path) -> None:
    path = tmp_path / "lc.csv"
    path.write_text("trial,epoch,val_accuracy\n1,1,0.5\n,2,0.6\n")
    with pytest.raises(SpecError, match=r"^--curves: lc.csv line 3: empty trial; "):
        load_curves(path)


def test_a_row_without_a_step_is_still_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ok.csv"
    path.write_text("curve_id,step,value\na,1,0.5\n,,\na,2,0.6\n")
    assert list(load_curves(path)) == ["a"]


# ---- item 5: the history's title -------------------------------------------------------------
def _ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp()


def _history(start: str, times: list[str]) -> dict[str, Any]:
    rows = [
        {"observed_at": _ts(t), "zone": "us-west-2a", "instance_type": "p3.2xlarge",
         "price_per_hour": 1.0}
        for t in times
    ]  # fmt: skip
    return {
        "provider": "local",
        "source": "replay",
        "history": {"start": _ts(start), "end": _ts("2023-04-02 11:54")},
        "prices": rows,
        "total": len(rows),
    }


def test_a_window_before_the_trace_is_titled_from_its_first_point(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cloud_cli._print_prices(_history("1995-11-15 11:54", ["2023-02-15 22:08", "2023-04-02 11:54"]))
    out = " ".join(capsys.readouterr().out.split())  # the title wraps to the table's width
    assert "local spot price history, 2023-02-15 22:08 → 2023-04-02 11:54 UTC" in out
    assert "1995" not in out


def test_an_empty_history_keeps_the_window(capsys: pytest.CaptureFixture[str]) -> None:
    cloud_cli._print_prices(_history("2023-04-02 10:54", []))
    out = " ".join(capsys.readouterr().out.split())
    assert "local spot price history, 2023-04-02 10:54 → 11:54 UTC" in out


def test_a_point_older_than_the_window_does_not_move_its_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The price in effect when the window opens is listed from when it was set."""
    cloud_cli._print_prices(_history("2023-04-02 10:54", ["2023-04-02 10:53", "2023-04-02 11:54"]))
    out = " ".join(capsys.readouterr().out.split())
    assert "local spot price history, 2023-04-02 10:54 → 11:54 UTC" in out
