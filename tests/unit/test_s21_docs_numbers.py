"""The figures the docs quote match the stored benchmark results they cite (review-ar AR1/AR7:
a page updated from a re-run whose JSON was never written back went unnoticed). Reads only the
committed files: docs/predictors.md's two acceptance tables against
bench/results/predictors.json, and the README's main-job ratios against main-job.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def _table(text: str, header: str) -> dict[str, list[str]]:
    """name -> its cells (bold marks dropped) of the markdown table under ``header``."""
    lines = text[text.index(header) :].splitlines()[2:]
    rows: dict[str, list[str]] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def _same(cell: str, value: float) -> bool:
    """``cell`` is ``value`` rounded to the digits it shows (half a unit of its last digit)."""
    digits = len(cell.split(".")[1]) if "." in cell else 0
    return abs(float(cell) - value) <= 0.5 * 10**-digits + 1e-12


def _rows(doc: dict, *path: str) -> dict[str, dict]:
    node = doc
    for key in path:
        node = node[key]
    return {r["name"]: r for r in node["result"]["rows"]}


@pytest.fixture(scope="module")
def predictors() -> dict:
    return json.loads((RESULTS / "predictors.json").read_text())


def test_the_revocation_table_is_the_stored_acceptance_run(predictors: dict) -> None:
    page = (ROOT / "docs" / "predictors.md").read_text()
    table = _table(page, "| model | AUC | Brier | log loss | ECE |")
    stored = _rows(predictors, "revocation", "acceptance")
    assert set(table) == set(stored)
    for name, (auc, brier, log_loss, ece) in table.items():
        r = stored[name]
        cells = {"auc": auc, "brier": brier, "log_loss": log_loss, "ece": ece}
        assert all(_same(cells[k], r[k]) for k in cells), (name, cells)


def test_the_curve_table_is_the_stored_acceptance_run(predictors: dict) -> None:
    page = (ROOT / "docs" / "predictors.md").read_text()
    table = _table(page, "| method | MAE | Spearman | top-10 % recall")
    stored = _rows(predictors, "curves", "acceptance")
    assert set(table) == set(stored)
    for name, (mae, rho, recall, band, ms) in table.items():
        r = stored[name]
        assert _same(mae, r["mae"]) and _same(rho, r["spearman"]), name
        assert _same(recall, r["top10_recall_at_25"]) and _same(band, r["band_coverage"]), name
        assert float(ms) == pytest.approx(r["fit_ms_per_curve"], rel=0.06, abs=0.01), name


def test_the_readmes_main_job_ratios_are_the_stored_ones() -> None:
    stored = json.loads((RESULTS / "main-job.json").read_text())
    medians = stored["summary (medians; free_completed_* summed)"]
    readme = (ROOT / "README.md").read_text()
    said = re.search(
        r"median cost was ([\d.]+)× spot-greedy's \(\$([\d.]+)\) and without a forecast "
        r"([\d.]+)× \(\$([\d.]+)\)",
        " ".join(readme.split()),
    )
    assert said is not None
    assert float(said[1]) == medians["spotwise"]["cost_vs_baseline"]
    assert float(said[2]) == pytest.approx(medians["spotwise"]["cost_usd"], abs=0.005)
    assert float(said[3]) == medians["spotwise-no-forecast"]["cost_vs_baseline"]
    assert float(said[4]) == pytest.approx(medians["spotwise-no-forecast"]["cost_usd"], abs=0.005)
