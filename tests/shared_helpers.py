"""Setup and checks that tests in several folders share: instance lives recorded in a real store
(``tests/cli``, ``tests/unit``, ``tests/orchestrator``), and the refusal of a job before it is
recorded (the preflight tests of ``tests/orchestrator`` and ``tests/providers``, the spec checks
of ``tests/unit``).

pytest puts only a test file's own folder on ``sys.path``; a test file in a subfolder of
``tests`` puts this folder there before importing ``shared_helpers``::

    TESTS = str(Path(__file__).resolve().parents[1])
    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)
    from shared_helpers import record_launch  # noqa: E402 (needs the path above)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from spotwise.store import InstanceRow, Store

if TYPE_CHECKING:
    from spotwise.planner.policy import PlannerView
    from spotwise.planner.runstate import TrialRun
    from spotwise.providers.base import Offer

REPO = Path(__file__).resolve().parents[1]


# ---- instance lives in a store ------------------------------------------------------------------
def record_launch(
    store: Store,
    job_id: str,
    trial_id: str,
    *,
    price_per_hour: float,
    provider: str = "aws",
    market: str = "spot",
    region: str = "us-east-1",
    zone: str = "us-east-1a",
    **fields: Any,
) -> InstanceRow:
    """Record the launch of a p3.2xlarge for ``trial_id`` (its offer key named after the
    provider, zone and market); ``fields``: more columns (``id``, ``state``, ``launched_at``…)."""
    return store.record_launch(
        job_id=job_id,
        trial_id=trial_id,
        provider=provider,
        region=region,
        zone=zone,
        instance_type="p3.2xlarge",
        market=market,
        offer_key=f"{provider}:{zone}:p3.2xlarge:{market}",
        price_per_hour=price_per_hour,
        **fields,
    )


def record_life(
    store: Store,
    job_id: str,
    number: int,
    launch_id: str,
    *,
    market: str = "spot",
    requested_at: float,
    **ended: Any,
) -> None:
    """Trial ``number`` of ``job_id`` with one AWS spot (or ``market``) life at $0.95/h,
    requested at ``requested_at``, then updated with ``ended`` (its state, end, cost…)."""
    trial = store.add_trial(job_id, number, {"lr": 0.1})
    record_launch(
        store,
        job_id,
        trial.id,
        id=launch_id,
        market=market,
        price_per_hour=0.95,
        requested_at=requested_at,
    )
    store.update_instance(launch_id, **ended)


# ---- a job refused before it is recorded --------------------------------------------------------
def running_local_job(db: str, pid: int = 4242, **fields: Any) -> str:
    """A small local job recorded in the store at ``db`` as running under orchestrator ``pid``
    on this host (``fields``: other job columns, e.g. ``pid_start``): what the cancel and
    liveness tests of ``tests/cli`` judge."""
    import socket

    from spotwise.spec import parse_spec

    spec = parse_spec(
        {
            "name": "a",
            "command": ["python", "t.py"],
            "metric": {"name": "m"},
            "steps": 1,
            "search_space": {"lr": {"type": "real", "low": 0.1, "high": 0.2}},
            "providers": [{"name": "local"}],
        }
    )
    with Store.open(db) as s:
        job = s.create_job("a", spec.model_dump_json(), "job.yaml", "spot-greedy", "maximize")
        s.update_job(job.id, state="running", pid=pid, host=socket.gethostname(), **fields)
    return job.id


def preflight_spec(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """A replayed job of two trials, checkpointed under ``tmp_path / "ckpt"``; ``changes``
    replace its top-level fields."""
    spec: dict[str, Any] = {
        "name": "preflight",
        "command": ["python", "-c", "pass"],  # a local job's script must exist when it loads
        "metric": {"name": "score"},
        "steps": 4,
        "trials": 2,
        "parallel": 2,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "search": {"optimizer": "random"},
        "providers": [{"name": "local", "replay": {"speedup": 600}}],
        "checkpoint": {"every": 2, "location": str(tmp_path / "ckpt")},
    }
    spec.update(changes)
    return spec


def write_job_yaml(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


#: A local job of two trials whose command is ``python train.py`` (the spec-check tests).
LOCAL_SPEC: dict[str, Any] = {
    "name": "t1",
    "command": ["python", "train.py"],
    "metric": {"name": "acc"},
    "steps": 4,
    "trials": 2,
    "search_space": {"lr": {"type": "real", "low": 0.003, "high": 0.3, "log": True}},
    "providers": [{"name": "local"}],
}


def write_local_spec(folder: Path, script: str | None = "train.py", **changes: Any) -> Path:
    """LOCAL_SPEC (with ``changes``) as job.yaml in ``folder`` (made if missing), beside a
    ``script`` (none if ``script`` is None)."""
    folder.mkdir(parents=True, exist_ok=True)
    if script:
        (folder / script).write_text("pass\n")
    return write_job_yaml(folder, {**LOCAL_SPEC, **changes})


def load_refused(path: Path) -> str:
    """The SpecError ``load_spec`` raises for the spec at ``path``, less its leading file name
    (checked to be there)."""
    from spotwise.errors import SpecError
    from spotwise.spec import load_spec

    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.message.startswith(f"{path}: ")
    return info.value.message.removeprefix(f"{path}: ")


def tune_refused(tmp_path: Path, path: Path) -> str:
    """Run `tune` (the core call) on the spec at ``path``; return the SpecError's message, once
    checked that it is one line, exit 2, and that the store holds no job (so no trial and no
    instance) and no run folder was made."""
    from spotwise import jobs
    from spotwise.errors import SpecError

    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with pytest.raises(SpecError) as info:
        jobs.tune(path, db=db, run_root=tmp_path / "runs")
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    assert info.value.exit_code == 2
    with Store.open(db) as store:
        assert store.list_jobs() == []
        assert store.list_instances(None) == []
    assert not (tmp_path / "runs").exists()
    return message


def run_cli(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``spotwise ARGS`` as a user does: a subprocess in the repository, its output kept."""
    return subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tune_cli_refused(tmp_path: Path, path: Path) -> list[str]:
    """Run `spotwise tune` on ``path`` (:func:`run_cli`, SPOTWISE_DB at
    ``tmp_path / "spotwise.db"``); check it exits 2 with an `error:` line and at most a `hint:`
    line, and return those lines."""
    db = tmp_path / "spotwise.db"
    env = {**os.environ, "SPOTWISE_DB": f"sqlite:///{db}", "SPOTWISE_HOME": str(tmp_path)}
    res = run_cli("tune", str(path), env=env)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("error: ")
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: "))
    return lines


def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS credentials anywhere in the SDK's chain (the instance metadata service is never
    asked; config and credentials files point at nothing) and no EC2 listing cached by an
    earlier test: what a machine without an account sees."""
    from spotwise.providers import aws_listings

    for var in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setattr(aws_listings, "_FULL_LISTINGS", {})
    monkeypatch.setattr(aws_listings, "_OFFERED_NAMES", {})


def no_aws_account_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """:func:`no_aws_credentials`, and the URL of a store of its own under ``tmp_path``."""
    no_aws_credentials(monkeypatch, tmp_path)
    return f"sqlite:///{tmp_path / 'prices.db'}"


# ---- the orchestrator's planner view ----------------------------------------------------------
def planner_view(
    now: float, offers: list[Offer], trials: list[TrialRun], **settings: Any
) -> PlannerView:
    """The view the orchestrator gives its policy (``runstate.build_view``) of ``trials`` over
    ``offers`` at ``now``: a job maximizing its metric, two trials, two at a time, capped at $10
    with nothing spent, started at 0 with no deadline, each offer's provider's billing rule;
    ``settings``: ``build_view``'s keywords to set otherwise (``wind_down_default_s``...)."""
    from spotwise.planner.runstate import build_view
    from spotwise.providers.billing import rule_for

    job: dict[str, Any] = {
        "direction": "maximize",
        "parallel": 2,
        "trials_total": 2,
        "spent_usd": 0.0,
        "max_cost_usd": 10.0,
        "started_at": 0.0,
        "deadline": None,
        "rules": {o.provider: rule_for(o.provider) for o in offers},
    }
    return build_view(now, offers, {}, trials, **{**job, **settings})


def local_replay_spec(speedup: float = 300.0) -> str:
    """A stored spec (JSON) of a small job on the local replay at ``speedup``: what tests that
    write a local job's rows directly give ``create_job``."""
    from spotwise.spec import parse_spec

    return parse_spec(
        {
            "name": "j",
            "command": ["python", "train.py"],
            "metric": {"name": "acc"},
            "steps": 40,
            "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
            "providers": [{"name": "local", "replay": {"speedup": speedup}}],
        }
    ).model_dump_json()


def main_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, list[str]]:
    """``spotwise ARGS`` through the real entry point (``main``: its error handler and exit
    codes) in this process: (exit code, stdout, stderr's lines)."""
    from spotwise.cli.app import main

    monkeypatch.setattr(sys, "argv", ["spotwise", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main()
    out, err = capsys.readouterr()
    code = done.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out, err.splitlines()


def cli_env_isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No SPOTWISE_DB or SPOTWISE_DEBUG from the caller's environment, and the default data
    folders under ``tmp_path``: a CLI run reads and makes nothing of the user's."""
    monkeypatch.delenv("SPOTWISE_DB", raising=False)
    monkeypatch.delenv("SPOTWISE_DEBUG", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))


def rollback_journal_db(path: Path) -> Path:
    """A spotwise database at ``path`` with one job (``j-1``), folded into its one file and
    switched to rollback-journal mode (as a database written before WAL, or by another tool)."""
    import sqlite3

    with Store.open(f"sqlite:///{path}") as s:
        s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize", job_id="j-1")
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("PRAGMA journal_mode = DELETE")
    con.close()
    return path
