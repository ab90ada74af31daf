"""An ``env`` the OS cannot set is refused when the spec is read (review-at AT4): a name with
'=' (or empty, or with a NUL byte) or a value with a NUL byte passed the spec, then every trial
failed to start: locally an internal error (exit 70, "this is a bug"), on a cloud an agent that
died without reporting. One line naming ``env.KEY`` and the fix, exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spotwise.errors import SpecError
from spotwise.spec import parse_spec

BASE: dict[str, Any] = {
    "name": "envcheck",
    "command": ["python", "train.py"],
    "metric": {"name": "loss", "direction": "minimize"},
    "steps": 2,
    "trials": 1,
    "search_space": {"x": {"type": "real", "low": 0.1, "high": 0.9}},
    "providers": [{"name": "local"}],
}


@pytest.mark.parametrize(
    ("env", "field", "fix"),
    [
        ({"A=B": "x"}, "env.A=B", "rename it"),
        ({"": "x"}, "env.", "rename it"),
        ({"K\0": "x"}, "env.K\\0", "rename it"),
        ({"K": "a\0b"}, "env.K", "remove it"),
    ],
)
def test_an_env_the_os_refuses_is_a_spec_error(env: dict[str, str], field: str, fix: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "env": env}, "job.yaml")
    msg = err.value.message
    assert msg.startswith(f"job.yaml: spec field '{field}': ")
    assert fix in msg and "\n" not in msg and "\0" not in msg
    assert err.value.exit_code == 2


def test_a_command_argument_with_a_nul_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"spec field 'command\.2': .* NUL byte"):
        parse_spec({**BASE, "command": ["python", "train.py", "a\0b"]}, "job.yaml")


def test_ordinary_env_entries_pass() -> None:
    env = {"SEED": "1", "PYTHONPATH": "a=b:c", "EMPTY": "", "lower_case": "x y"}
    assert parse_spec({**BASE, "env": env}).env == env


def test_tune_refuses_it_with_exit_2_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from spotwise.cli.app import main

    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: envcheck\ncommand: [python, train.py]\nmetric: {name: loss}\nsteps: 2\n"
        "trials: 1\nsearch_space:\n  x: {type: real, low: 0.1, high: 0.9}\n"
        'providers:\n  - name: local\nenv:\n  "A=B": x\n'
    )
    db = tmp_path / "spotwise.db"
    monkeypatch.setenv("SPOTWISE_DB", f"sqlite:///{db}")
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPOTWISE_DEBUG", raising=False)
    monkeypatch.setattr("sys.argv", ["spotwise", "tune", str(spec)])
    with pytest.raises(SystemExit) as end:
        main()
    assert end.value.code == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "spec field 'env.A=B': an environment variable's name" in said
    assert "internal error" not in said
    assert not db.exists()
