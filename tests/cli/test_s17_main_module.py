"""``python -m spotwise`` (review-ab F0): there was no ``spotwise/__main__.py``, so the module
form failed ("No module named spotwise.__main__") where the console script is not on PATH. It
runs the console script's app now, its exit codes included."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout under test, not an installed copy


def _module(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -S: no site-packages .pth files, so an editable install's import hook cannot lend this
    # checkout a module it lacks from another one; the dependencies still come from PYTHONPATH
    path = [str(ROOT), *site.getsitepackages()]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "SPOTWISE_HOME": str(tmp_path / "home"),
        "SPOTWISE_DB": f"sqlite:///{tmp_path / 'spotwise.db'}",
        "COLUMNS": "120",
    }
    return subprocess.run(
        [sys.executable, "-S", "-m", "spotwise", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_python_m_spotwise_shows_the_commands(tmp_path: Path) -> None:
    done = _module(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    for command in ("tune", "resume", "status", "report", "prices"):
        assert command in done.stdout


def test_python_m_spotwise_keeps_the_exit_code_and_one_line_error(tmp_path: Path) -> None:
    done = _module(tmp_path, "tune", "missing.yaml")
    assert done.returncode == 2  # a bad spec, as `spotwise tune` exits
    assert done.stderr.splitlines()[0].startswith("error: spec file missing.yaml not found")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "spotwise.db").exists()  # nothing written
