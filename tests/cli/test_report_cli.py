"""`spotwise report` from the command line: what cron sees (exit codes, one-line errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shared_helpers import record_life
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.errors import ConfigError, NotFoundError, StoreError
from spotwise.store import Store

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = "postgresql://u:s3cretpw@127.0.0.1:1/x"  # port 1: refused at once


def _report(*args: str, pre: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    code = (
        f"{pre}import sys; from spotwise.cli.app import main; "
        "sys.argv = ['spotwise', *sys.argv[1:]]; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "report", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_against_an_unreachable_postgres_exits_3_not_1() -> None:
    """It exited 1 ('something is held') with 'database error while migrating the schema'."""
    res = _report("--check", "--db", UNREACHABLE)
    assert res.returncode == 3, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith(
        "error: cannot connect to the database postgresql://u:***@127.0.0.1:1/x given by "
        "--db/SPOTWISE_DB: "
    )
    assert "refused" in lines[0].lower()
    assert lines[1:] == [
        "hint: check that the server is up and the URL (host, port, user, database) is right"
    ]
    assert "s3cretpw" not in res.stdout + res.stderr
    assert res.stdout == ""


def test_an_unreachable_server_is_no_database_for_every_read() -> None:
    with pytest.raises(
        NotFoundError, match=r"^cannot connect to the database postgresql://u:\*\*\*@"
    ) as err:
        Store.open_existing(UNREACHABLE)
    assert isinstance(err.value, StoreError) and err.value.exit_code == 3


@pytest.mark.parametrize(
    ("url", "pre", "hint"),
    [
        # the driver spotwise[postgres] installs, missing
        (UNREACHABLE, "sys.modules['psycopg'] = None; ", "hint: pip install 'spotwise[postgres]'"),
        # another driver named in the URL: the extra would not bring it
        (
            "postgresql+psycopg2://u:s3cretpw@127.0.0.1:1/x",
            "sys.modules['psycopg2'] = None; ",
            "hint: spotwise's PostgreSQL driver is psycopg 3 (pip install 'spotwise[postgres]'): "
            "write postgresql+psycopg://… in --db, or install 'psycopg2' yourself",
        ),
    ],
    ids=["psycopg", "psycopg2"],
)
def test_a_missing_driver_is_one_clear_line_not_a_traceback(url: str, pre: str, hint: str) -> None:
    res = _report("--check", "--db", url, pre=f"import sys; {pre}")
    assert res.returncode == ConfigError.exit_code == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in res.stderr
    assert lines[0].startswith("error: unusable database URL '")
    assert "is not installed); set --db/SPOTWISE_DB to" in lines[0]
    assert lines[1] == hint
    assert "s3cretpw" not in res.stderr


# --- replayed dollars are never added to real ones --------------------------------------------

NOW = 1_790_000_000.0
H = 3600.0


def _two_markets(tmp_path: Path) -> str:
    """A real AWS job: one spot life ($1 for $2 on on-demand), one on-demand life ($3, $3); a
    replayed (local) job: one spot life of $2 that on-demand would have charged $90 for."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        for job_id, provider in (("j-real", "aws"), ("j-sim", "local")):
            spec = json.dumps({"providers": [{"name": provider}]})
            s.create_job(job_id, spec, "job.yaml", "spotwise", "maximize", job_id=job_id)
            s.update_job(job_id, state="succeeded")
        for n, (job, lid, market, cost, od) in enumerate(
            [
                ("j-real", "l-spot", "spot", 1.0, 2.0),
                ("j-real", "l-od", "on-demand", 3.0, 3.0),
                ("j-sim", "l-sim", "spot", 2.0, 90.0),
            ]
        ):
            record_life(
                s, job, n, lid, market=market, requested_at=NOW - 3 * H,
                state="terminated", launched_at=NOW - 3 * H, ended_at=NOW - H,
                cost_usd=cost, on_demand_cost_usd=od, market_seconds=2 * H,
                provider_instance_id=f"i-{lid}",
            )  # fmt: skip
    return db


@pytest.mark.parametrize("by", ["market", "day", "job", "provider", "zone", "instance-type"])
def test_the_table_keeps_replayed_dollars_out_of_the_real_rows_and_total(
    tmp_path: Path, by: str
) -> None:
    """By market, the replayed spot life shared the real spot row: 2 lives, $3 for $92, and
    the total said 94% saved — $88 of its $94 'saved' were the replay's."""
    db = _two_markets(tmp_path)
    done = CliRunner().invoke(
        app, ["report", "--since", "all", "--by", by, "--db", db], env={"COLUMNS": "80"}
    )
    assert done.exit_code == 0, done.output
    text = done.stdout
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    real, replay = text.split("replayed market: simulated dollars, not money")
    assert "real clouds" in real
    (total,) = [line.split() for line in real.splitlines() if line.startswith("total")]
    assert total == ["total", "2", "0", "4.00", "4.00", "4.0000", "5.0000", "20%"]
    assert "90.0000" not in real
    (sim,) = [line.split() for line in replay.splitlines() if line.startswith("total")]
    assert sim == ["total", "1", "0", "2.00", "2.00", "2.0000", "90.0000", "98%"]
    if by == "market":
        rows = [line.split() for line in real.splitlines() if line.startswith(("spot", "on-"))]
        assert rows == [
            ["on-demand", "1", "0", "2.00", "2.00", "3.0000", "3.0000", "0%"],
            ["spot", "1", "0", "2.00", "2.00", "1.0000", "2.0000", "50%"],
        ]


def test_the_json_totals_are_real_money_and_the_replay_is_kept_apart(tmp_path: Path) -> None:
    db = _two_markets(tmp_path)
    done = CliRunner().invoke(
        app, ["report", "--since", "all", "--by", "market", "--db", db, "--json"]
    )
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert [(g["key"], g["lives"], g["cost_usd"]) for g in out["groups"]] == [
        ("on-demand", 1, 3.0),
        ("spot", 1, 1.0),
    ]
    assert (out["totals"]["cost_usd"], out["totals"]["saved_usd"]) == (4.0, 1.0)
    replay = out["replay"]
    assert [(g["key"], g["lives"], g["cost_usd"]) for g in replay["groups"]] == [("spot", 1, 2.0)]
    assert (replay["totals"]["cost_usd"], replay["totals"]["saved_usd"]) == (2.0, 88.0)


def test_only_replayed_lives_say_so_and_show_their_table(tmp_path: Path) -> None:
    db = _two_markets(tmp_path)
    now = time.time()
    with Store.open_existing(db) as s:  # the real job's lives ended long before the window
        for lid in ("l-spot", "l-od"):
            s.update_instance(lid, ended_at=now - 100 * H)
        s.update_instance("l-sim", ended_at=now - H)
    done = CliRunner().invoke(
        app, ["report", "--since", "24h", "--by", "market", "--db", db], env={"COLUMNS": "80"}
    )
    assert done.exit_code == 0, done.output
    assert "nothing billed on a real cloud in this window" in done.stdout
    assert "replayed market: simulated dollars, not money" in done.stdout


def test_a_server_that_never_answers_is_given_up_after_the_connect_timeout() -> None:
    """A firewalled host hung the command for the system's TCP timeout (minutes): without a
    ``connect_timeout`` in the URL, spotwise sets one (PG_CONNECT_TIMEOUT_S, 1 s here)."""
    pytest.importorskip("psycopg")
    import socket

    with socket.socket() as silent:  # accepts the connection, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        started = time.monotonic()
        done = _report(
            "--check",
            "--db",
            f"postgresql://u:pw@127.0.0.1:{port}/x",
            pre="import spotwise.store.db as d; d.PG_CONNECT_TIMEOUT_S = 1; ",
        )
        took = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    assert took < 30
    assert "cannot connect to the database" in done.stderr
    assert "timeout" in done.stderr.lower()


def test_a_since_reaching_back_past_1970_reports_everything_as_all_does(tmp_path: Path) -> None:
    """``--since 999999d`` printed the title, then `internal error: year -712 is out of range`."""
    db = _two_markets(tmp_path)
    text = CliRunner().invoke(app, ["report", "--since", "999999d", "--db", db])
    assert text.exit_code == 0, text.output
    assert "bills written from the start to " in text.stdout
    same = [
        json.loads(CliRunner().invoke(app, ["report", "--since", s, "--db", db, "--json"]).stdout)
        for s in ("999999d", "all")
    ]
    assert same[0]["since"] is None
    assert same[0]["totals"] == same[1]["totals"]
