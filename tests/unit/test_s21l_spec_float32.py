"""A linear real range past float32 is refused at load for the et and rf optimizers (review-aq
AQ8): their trees read points as float32, and the second trial's ``tell`` raised scikit-learn's
'Input X contains infinity' mid-job, after two trials were paid for."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_s20_spec_yaml12 import BASE, LR, loaded, refused


def spec(param: str, optimizer: str) -> str:
    return BASE.replace(LR, f"  {param}\n") + f"search: {{optimizer: {optimizer}}}\n"


@pytest.mark.parametrize("optimizer", ["et", "rf"])
def test_a_range_past_float32_is_refused_for_the_tree_optimizers(
    tmp_path: Path, optimizer: str
) -> None:
    assert refused(tmp_path, spec("x: {type: real, low: 0, high: 1e39}", optimizer)) == (
        f"spec field 'search': optimizer {optimizer} reads points as float32: search_space.x.high "
        "must be within ±3.403e+38, got 1e+39; narrow the range, set log: true, or use "
        "optimizer: gp"
    )
    assert "search_space.x.low" in refused(
        tmp_path, spec("x: {type: real, low: -1e39, high: 0}", optimizer)
    )


@pytest.mark.parametrize(
    ("param", "optimizer"),
    [
        ("x: {type: real, low: 0, high: 1e38}", "et"),
        ("x: {type: real, low: 0.001, high: 1e39, log: true}", "rf"),  # read as its log10
        ("x: {type: real, low: 0, high: 1e39}", "gp"),  # float64
    ],
)
def test_what_the_optimizer_reads_is_loaded(tmp_path: Path, param: str, optimizer: str) -> None:
    assert loaded(tmp_path, spec(param, optimizer))
