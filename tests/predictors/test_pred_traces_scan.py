"""``--traces FOLDER`` looks for Can't Be Late JSON files only a bounded depth down
(:data:`spotwise.traces.CBL_DEPTH` folder levels, where the real data set keeps them), so a
folder such as ``/tmp`` with no trace near its top is refused quickly with one line naming
``--traces`` instead of being walked whole; the real layouts load as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pred_helpers import SHARED

from spotwise.errors import SpecError
from spotwise.traces import load_cbl_files, load_cbl_folder, load_traces

ROOT = Path(__file__).resolve().parents[2]
CBL_DEPTH = 3  # spotwise.traces.CBL_DEPTH: the real root keeps its files 3 folder levels down
CBL_ROOT = SHARED / "spot" / "cant-be-late-availability"


def _cbl(path: Path, gap: float, data: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))


def _deep_tree(tmp_path: Path) -> Path:
    """A folder with no trace in its top levels: one JSON file a level deeper than the bound,
    and a wide tree below that the search must not enter."""
    top = tmp_path / "big"
    deep = top.joinpath(*[f"l{i}" for i in range(1, CBL_DEPTH + 1)])
    _cbl(deep / "sub" / "us-west-2a_v100_1.json", 600, [1, 0, 1])
    for i in range(20):
        (deep / "sub" / f"wide{i}" / "deeper").mkdir(parents=True)
    (top / "notes.txt").write_text("not a trace\n")
    return top


def _walked(monkeypatch: pytest.MonkeyPatch, top: Path) -> list[int]:
    """Spy on the folders ``os.walk`` lists: their depths below ``top``."""
    depths: list[int] = []
    real = os.scandir

    def scandir(path: Any = ".") -> Iterator[os.DirEntry[str]]:
        depths.append(len(Path(path).parts) - len(top.parts))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return depths


def test_a_json_file_deeper_than_the_bound_is_not_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.traces import find_json

    top = _deep_tree(tmp_path)
    depths = _walked(monkeypatch, top)
    with pytest.raises(SpecError) as info:
        load_traces(top)
    assert str(info.value) == (
        f"--traces: {top} holds no .csv(.gz) or .json trace files (looked 3 folder levels down)"
    )
    assert depths and max(depths) == CBL_DEPTH  # the file's folder (one deeper) is never listed
    with pytest.raises(SpecError) as info:
        load_cbl_folder(top, field="--train-on")
    assert str(info.value) == f"--train-on: no JSON files under {top} (looked 3 folder levels down)"
    assert find_json(top) == [] and find_json(top, depth=CBL_DEPTH + 1) != []


def test_predictor_eval_refuses_the_deep_tree_in_one_line(tmp_path: Path) -> None:
    top = _deep_tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    done = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "predictor", "eval", "--traces", str(top)],
        env={**env, "COLUMNS": "80"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: --traces: {top} holds no .csv(.gz) or .json trace files "
        "(looked 3 folder levels down)"
    ]
    assert done.stdout == ""


def test_the_real_layout_three_levels_down_is_found(tmp_path: Path) -> None:
    from spotwise.traces import CBL_DEPTH as depth
    from spotwise.traces import find_json

    assert depth == CBL_DEPTH
    # the Can't Be Late root: availability/<nodes>/<set>/<zone>_<key>.json, an index on top
    folder = tmp_path / "availability" / "1-node" / "aws-02-15-2023"
    _cbl(folder / "us-east-1a_v100_1.json", 195, [1, 0, 1, 1])
    _cbl(folder / "us-east-1c_v100_1.json", 195, [0, 1, 1, 1])
    (tmp_path / "trace_index.csv").write_text(
        "path,start_date\n"
        "availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json,2023-02-16 00:00:00\n"
        "availability/1-node/aws-02-15-2023/us-east-1c_v100_1.json,2023-02-16 00:00:00\n"
    )
    for where in (tmp_path, tmp_path / "availability", folder):  # one set within the bound
        ts = load_traces(where)
        assert ts.zones == ["us-east-1a_v100_1", "us-east-1c_v100_1"], where
        assert ts.gap_seconds == 195 and ts.n_ticks == 4
        assert ts.times[0] == 1676505600.0  # the index's start_date, 2023-02-16 00:00 UTC
    assert find_json(tmp_path) == sorted(tmp_path.rglob("*.json"))
    other = tmp_path / "availability" / "16-node" / "aws-08-27-2023"
    _cbl(other / "us-west-2a_v100_1.json", 300, [16, 15])
    with pytest.raises(
        SpecError, match=r"^--traces: .* holds 2 trace sets \(availability/1-node/aws-02-15-2023, "
    ):
        load_traces(tmp_path)


@pytest.mark.shared_data
@pytest.mark.skipif(not CBL_ROOT.is_dir(), reason=f"{CBL_ROOT} is absent")
def test_the_real_cant_be_late_sets_load_exactly_as_before() -> None:
    from spotwise.traces import find_json

    files = sorted(CBL_ROOT.rglob("*.json"))  # what the unbounded search found
    assert files and find_json(CBL_ROOT) == files
    sets = sorted({f.parent for f in files})
    for folder in sets:
        if folder.name == "aws-08-27-2023":  # 3,247 and 4,736 values: refused (review-am F2)
            with pytest.raises(SpecError, match="holds files of different lengths"):
                load_traces(folder)
            continue
        got = load_traces(folder)
        want = load_cbl_files([f for f in files if f.parent == folder])
        assert got.zones == want.zones and got.gap_seconds == want.gap_seconds
        np.testing.assert_array_equal(got.times, want.times)
        np.testing.assert_array_equal(got.available, want.available)
    with pytest.raises(SpecError, match=rf"^--traces: .* holds {len(sets)} trace sets"):
        load_traces(CBL_ROOT)
