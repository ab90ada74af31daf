"""A cron with a non-UTF-8 locale gets its report: glyphs its encoding lacks are written as an
ASCII stand-in (review-af F11: "internal error: UnicodeEncodeError", exit 1, --check's code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spotwise.store import Store

ROOT = Path(__file__).resolve().parents[2]


def test_status_and_report_under_a_latin1_locale(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with Store.open(db) as s:
        s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize", job_id="j-1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    env.update(PYTHONIOENCODING="latin-1", LC_ALL="C", COLUMNS="80", HOME=str(tmp_path))
    for argv in (["status", "--db", db], ["report", "--since", "all", "--db", db]):
        res = subprocess.run(
            [sys.executable, "-m", "spotwise.cli.app", *argv],
            env=env, cwd=ROOT, capture_output=True, timeout=120,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr.decode("latin-1")
        out = res.stdout.decode("latin-1")
        assert "internal error" not in res.stderr.decode("latin-1")
        assert "j-1" in out or "nothing held now" in out
