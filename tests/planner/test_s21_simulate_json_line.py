"""`simulate ... --json` prints one line, as every --json does (review-ao M12: an indented
document gave a .jsonl appender many lines); `--out` keeps the indented file for people."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from spotwise.cli.app import app


def test_simulate_deadline_json_is_one_line_and_out_is_indented(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    args = ["simulate", "deadline", "--traces", "builtin:skynomad-v100-2023", "--starts", "2"]
    res = CliRunner().invoke(app, [*args, "--policy", "greedy", "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["kind"] == "deadline"
    written = out.read_text()
    assert written.count("\n") > 10  # indented
    assert json.loads(written) == doc
