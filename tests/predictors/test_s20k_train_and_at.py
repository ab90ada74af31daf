"""review-am F6, F7: ``predictor train`` refuses a training part without one revocation (the
model would always say ~0), exit 2 naming the trace; ``--at``'s range in hours is rounded down,
so that the number it names is accepted (the check and the message agree)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pred_helpers import T0
from typer.testing import CliRunner

from spotwise.cli import predictor
from spotwise.errors import SpecError
from spotwise.predictors import service
from spotwise.traces import TraceSet

runner = CliRunner()


def _cbl_folder(folder: Path, rows: list[list[int]]) -> Path:
    folder.mkdir(parents=True)
    for zone, data in zip(("us-west-2a", "us-west-2b"), rows, strict=False):
        doc = {"metadata": {"gap_seconds": 600}, "data": data}
        (folder / f"{zone}_v100_1.json").write_text(json.dumps(doc))
    return folder


def test_train_on_a_trace_without_revocation_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = _cbl_folder(tmp_path / "always", [[1] * 200, [1] * 200])
    out = tmp_path / "m.pt"
    res = runner.invoke(
        predictor.app,
        ["train", "--traces", str(folder), "--out", str(out), "--model", "base-rate"],
        env={"COLUMNS": "200"},
    )
    err = res.exception  # the entry point prints it as one "error:" line, exit 2
    assert isinstance(err, SpecError) and err.exit_code == 2, res.output
    assert "\n" not in err.message
    assert err.message.startswith(
        f"--traces {folder}: 0 revocations in its 388 labelled zone-ticks (ticks 0..200: "
    ), err.message
    assert "nothing to learn, the model would always say p_revoke ~ 0" in err.message
    assert not out.exists()


def test_until_is_named_when_a_longer_part_could_hold_revocations(tmp_path: Path) -> None:
    folder = _cbl_folder(tmp_path / "late", [[1] * 200, [1] * 150 + [0, 1] * 25])
    with pytest.raises(SpecError, match="raise --until or train on a trace with revocations"):
        service.train_model(folder, 3600.0, tmp_path / "m.pt", "base-rate", until=0.5)
    res = service.train_model(folder, 3600.0, tmp_path / "m.pt", "base-rate", until=1.0)
    assert res["train_ticks"] == [0, 200] and (tmp_path / "m.pt").is_file()


def _span(hours: float, n: int = 10) -> TraceSet:
    gap = hours * 3600 / n  # the replayed span is the ticks plus the last one's gap
    return TraceSet(
        zones=["z"],
        times=T0 + gap * np.arange(n),
        available=np.ones((1, n), dtype=bool),
        price=np.ones((1, n)),
        gap_seconds=gap,
    )


@pytest.mark.parametrize(("hours", "shown"), [(1093.83, "1093.8"), (24.0, "24"), (2.99, "2.9")])
def test_the_hours_named_by_the_at_range_are_accepted(hours: float, shown: str) -> None:
    ts = _span(hours)
    with pytest.raises(SpecError, match=rf"or 0 to {shown} hours after its start$"):
        service.parse_at(str(hours + 0.1), ts)
    assert service.parse_at(shown, ts) == pytest.approx(T0 + float(shown) * 3600)
