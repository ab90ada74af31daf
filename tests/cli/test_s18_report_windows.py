"""Cron report windows that count every dollar once (review-af F4, F10, F1; session 18).

A daily `spotwise report --json >> costs.jsonl` must count each dollar billed exactly once
over its lines. A record closed late (a dead orchestrator's job cancelled after a report ran)
got an ``ended_at`` in a window already reported: in no line (F4). An instance found after its
record closed was billed onto the record and the record's end moved to today: its first bill
was counted again today (F10). The window was "the 24 h before the second the command ran":
consecutive runs overlapped or left gaps, and no absolute window could be asked (F1).

Now a bill is counted in the window of the time it was *written* (``instance.billed_at``,
revision 0005; NULL: its end), a later bill of a closed record is a dated part of its own
(``extra_bills_json``), and ``--since``/``--until`` take absolute times.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from shared_helpers import local_replay_spec, record_launch, record_life
from typer.testing import CliRunner

from spotwise import costs, jobs, release
from spotwise.cli.app import app
from spotwise.errors import SpecError
from spotwise.store import Store
from spotwise.units import SETTLE_S

H, D = 3600.0, 86400.0
T0 = 1_795_478_400.0  # 2026-11-24 00:00:00 UTC
OD = 3.06  # $/h of the p3.2xlarge on-demand record of F10


def _day(ts: float) -> str:
    """The UTC day a bill written at ``ts`` is counted in: days are (00:00, 00:00], as the
    windows are, so a bill at exactly midnight is the ending day's (review-ah F7)."""
    return datetime.fromtimestamp((math.ceil(ts / D) - 1) * D, UTC).strftime("%Y-%m-%d")


def _aws_job(s: Store, job_id: str = "j-aws", state: str = "succeeded") -> str:
    spec = json.dumps({"providers": [{"name": "aws", "regions": ["us-east-1"]}]})
    s.create_job(job_id, spec, "job.yaml", "spot-greedy", "maximize", job_id=job_id)
    s.update_job(job_id, state=state)
    return job_id


def _cost(out: dict[str, Any], section: str = "") -> float:
    return float((out[section] if section else out)["totals"]["cost_usd"])


# --- F4: a record closed late is counted when it was closed ------------------------------------


def _local_spec() -> str:
    return local_replay_spec(300.0)


def test_lives_a_cancel_closes_after_a_report_ran_are_in_the_next_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding's replay: an orchestrator killed (its 3 trials with it), window A reported
    (the lives held, not in its totals), then `spotwise cancel` billed them up to the
    orchestrator's last heartbeat, BEFORE A's end. They were in no window: B, starting at A's
    end, had none, and re-running A changed its numbers."""
    from spotwise.planner import reconcile

    now = time.time()
    t0 = now - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        job = s.create_job("j", _local_spec(), "job.yaml", "spot-greedy", "maximize").id
        s.update_job(job, state="running", pid=0, heartbeat_at=t0 + 30.0)
        for n in range(3):
            t = s.add_trial(job, n, {"lr": 0.01})
            s.update_trial(t.id, state="running")
            record_launch(
                s, job, t.id, price_per_hour=0.9, provider="local", id=f"l-{n}",
                state="running", launched_at=t0 + n, provider_instance_id=f"local-{n}",
            )  # fmt: skip
    a_until = t0 + 35.0  # window A ran after the last heartbeat, before the cancel
    a = costs.report(since="1h", db=db, now=a_until)
    assert len(a["held"]) == 3 and a["replay"]["totals"]["lives"] == 0

    monkeypatch.setattr(reconcile, "reconcile", lambda spec, job_id: [])  # all died with it
    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        rows = s.list_instances(job)
        billed = s.get_job(job).cost_usd
    assert [r.ended_at for r in rows] == [pytest.approx(t0 + 30.0)] * 3  # back-dated into A
    assert billed == pytest.approx(sum(r.cost_usd for r in rows)) and billed > 0.0

    # B, chained on A's `until`, run a minute after the cancel (a window ends SETTLE_S before
    # its report ran: the cancel's bills, dated when it ran, are in by then)
    b = costs.report(since=repr(a["until"]), db=db, now=time.time() + SETTLE_S)
    assert b["replay"]["totals"]["lives"] == 3  # was 0: in no window
    assert _cost(b, "replay") == pytest.approx(billed)
    again = costs.report(since="1h", db=db, now=a_until)
    assert again["replay"]["totals"] == a["replay"]["totals"]  # a past window does not change
    assert _cost(again, "replay") + _cost(b, "replay") == pytest.approx(billed)


# --- F10: a closed record billed again: the added bill is a part of its own --------------------


class _NoReference:
    """An on-demand reference that adds none (the F10 sums are of the bills)."""

    def __init__(self) -> None:
        self.unknown: list[str] = []

    def reference(self, *args: Any, **kwargs: Any) -> float:
        return 0.0


def _outlived_store(tmp_path: Path, t0: float = T0) -> tuple[str, Any]:
    """A finished AWS job whose on-demand p3.2xlarge record, launched at ``t0``, closed at
    ``t0`` + 10 h, billed 10 h ($30.60), while its instance kept running: what `spotwise
    cancel` finds after."""
    from spotwise.providers.base import Instance, InstanceState, Market, Offer

    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        job = _aws_job(s)
        record_life(
            s, job, 0, "l-0", market="on-demand", requested_at=t0, launched_at=t0,
            provider_instance_id="i-0", state="terminated", end_reason="completed",
            ended_at=t0 + 10 * H, cost_usd=10 * OD, on_demand_cost_usd=10 * OD,
            market_seconds=10 * H, price_per_hour=OD,
        )  # fmt: skip
    offer = Offer(
        provider="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="p3.2xlarge",
        market=Market("on-demand"),
        price_per_hour=OD,
        on_demand_price_per_hour=OD,
    )
    inst = Instance("i-0", offer, InstanceState.RUNNING, launched_at=t0)
    return db, inst


def test_an_instance_billed_after_its_record_closed_counts_each_dollar_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding's numbers: $30.60 reported on day 1, $336.60 more billed on day 5. The
    record moved whole to day 5: its lines summed $397.80 for $367.20 billed."""
    from spotwise.providers.billing import rule_for
    from spotwise.release_sweep import _bill_outlived

    db, inst = _outlived_store(tmp_path)
    # each day's report runs SETTLE_S after midnight: its window ends at midnight
    day1 = costs.report(since="24h", db=db, now=T0 + D + SETTLE_S)
    assert _cost(day1) == pytest.approx(30.60)
    monkeypatch.setattr(release, "wall_now", lambda: T0 + 5 * D)  # the cancel runs on day 5
    with Store.open_existing(db) as s:
        usd = _bill_outlived(
            s, s.get_instance("l-0"), inst, T0 + 5 * D, rule_for("aws"), _NoReference()
        )
        row = s.get_instance("l-0")
    assert usd == pytest.approx(336.60)
    # the record is still the whole life's bill, as status, trials and cancel add it up
    assert (row.cost_usd, row.market_seconds) == (pytest.approx(367.20), 120 * H)
    assert row.ended_at == T0 + 5 * D

    lines = [costs.report(since="24h", db=db, now=T0 + n * D + SETTLE_S) for n in range(1, 6)]
    assert [_cost(x) for x in lines] == pytest.approx([30.60, 0, 0, 0, 336.60])
    assert sum(_cost(x) for x in lines) == pytest.approx(367.20)  # was 397.80
    # the life is counted once, where its record closed; day 5 holds its added hours only
    assert [x["totals"]["lives"] for x in lines] == [1, 0, 0, 0, 0]
    assert lines[4]["totals"]["hours"] == pytest.approx(110.0)
    assert sum(x["totals"]["billed_hours"] for x in lines) == pytest.approx(120.0)
    assert costs.report(since="all", db=db, now=T0 + 6 * D)["totals"]["cost_usd"] == (
        pytest.approx(367.20)
    )
    by_day = costs.report(since="all", by="day", db=db, now=T0 + 6 * D)["groups"]
    assert [(g["key"], g["lives"], round(g["cost_usd"], 2)) for g in by_day] == [
        (_day(T0 + 10 * H), 1, 30.60),  # closed (billed) 10 h into day 1
        (_day(T0 + 5 * D), 0, 336.60),  # billed at midnight: the day that ends then, day 5
    ]


def test_the_drain_sweep_billing_a_closed_record_counts_in_the_window_it_is_written(
    tmp_path: Path,
) -> None:
    """The drain's stray sweep adds a stray's bill to its launch's record, closed long before,
    keeping the record's end (launch_cleanup's ``cost_usd=row.cost_usd + cost``): those
    dollars landed in a past window, already reported. The store dates them when written."""
    ended = time.time() - 2 * D
    db, _ = _outlived_store(tmp_path, ended - 10 * H)
    then = costs.report(since="24h", db=db, now=ended + H)
    with Store.open_existing(db) as s:
        row = s.get_instance("l-0")
        s.update_instance("l-0", cost_usd=row.cost_usd + 1.53, market_seconds=row.market_seconds)
        assert s.get_instance("l-0").ended_at == ended  # the record's end as it was
    today = costs.report(since="1h", db=db, now=time.time() + SETTLE_S)  # a minute later
    assert (_cost(then), _cost(today)) == (pytest.approx(30.60), pytest.approx(1.53))  # was 0
    # re-running the past window gives its numbers (the added $1.53 went there: in no line)
    assert _cost(costs.report(since="24h", db=db, now=ended + H)) == pytest.approx(30.60)


# --- the store's rule ----------------------------------------------------------------------------


def test_the_store_dates_each_bill_when_written(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        job = _aws_job(s)
        t = s.add_trial(job, 0, {"lr": 0.1})
        record_launch(s, job, t.id, price_per_hour=1.0, id="l-0", state="running")
        s.update_instance("l-0", cost_usd=0.5)  # a running bill: no part, nothing dated
        assert (s.get_instance("l-0").billed_at, s.get_instance("l-0").extra_bills_json) == (
            None,
            None,
        )
        # closed with an end in the past, billed now
        s.update_instance("l-0", state="terminated", ended_at=T0, cost_usd=1.0, billed_at=T0 + H)
        assert s.get_instance("l-0").billed_at == T0 + H
        s.update_instance("l-0", ended_at=T0 + 5.0)  # no money: no part
        s.update_instance("l-0", cost_usd=1.25, market_seconds=60.0, billed_at=T0 + D)
        row = s.get_instance("l-0")
        assert row.billed_at == T0 + H and row.cost_usd == 1.25
        assert json.loads(row.extra_bills_json or "") == [
            {"at": T0 + D, "cost_usd": 0.25, "on_demand_cost_usd": 0.0, "market_seconds": 60.0}
        ]
        # reopened (a stopped VM its drain could not delete) and closed again: billed then
        s.update_instance("l-0", state="stopping")
        s.update_instance("l-0", state="terminated", billed_at=T0 + 2 * D)
        assert s.get_instance("l-0").billed_at == T0 + 2 * D
    out = costs.report(since="all", db=db, now=T0 + 3 * D, by="day")
    assert [(g["key"], g["cost_usd"]) for g in out["groups"]] == [
        (_day(T0 + D), pytest.approx(0.25)),
        (_day(T0 + 2 * D), pytest.approx(1.0)),
    ]


def test_a_database_of_revision_0004_is_windowed_by_its_ends(tmp_path: Path) -> None:
    """Records written before revision 0005 have no ``billed_at``: each is counted in the
    window of its end, as before."""
    from alembic import command

    from spotwise.store.db import alembic_config, head_revision, make_engine

    db = f"sqlite:///{tmp_path / 'state.db'}"
    engine = make_engine(db)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0004")
        conn.execute(
            sa.text(
                "INSERT INTO job (id, name, spec_json, spec_path, policy, state, created_at, "
                "direction, cost_usd, on_demand_cost_usd, revocations, migrations, "
                "early_stopped) VALUES ('j-old', 'old', :spec, 'job.yaml', 'spot-greedy', "
                "'succeeded', 1.0, 'maximize', 2.0, 6.0, 0, 0, 0)"
            ),
            {"spec": json.dumps({"providers": [{"name": "aws"}]})},
        )
        conn.execute(
            sa.text(
                "INSERT INTO trial (id, job_id, number, params_json, state, step, "
                "checkpoint_step, cost_usd, revocations, migrations, created_at) VALUES "
                "('t-0', 'j-old', 0, '{}', 'completed', 0, 0, 2.0, 0, 0, 1.0)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO instance (id, job_id, trial_id, provider, region, zone, "
                "instance_type, market, offer_key, price_per_hour, state, tags_json, "
                "requested_at, launched_at, ended_at, cost_usd, on_demand_cost_usd, "
                "market_seconds) VALUES ('l-0', 'j-old', 't-0', 'aws', 'us-east-1', "
                "'us-east-1a', 'p3.2xlarge', 'spot', 'k', 1.0, 'terminated', '{}', "
                ":t, :t, :end, 2.0, 6.0, 7200.0)"
            ),
            {"t": T0, "end": T0 + 2 * H},
        )
    engine.dispose()
    with Store.open(db) as s, s.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
            (head_revision(),)
        ]
        assert s.get_instance("l-0").billed_at is None
    assert _cost(costs.report(since="24h", db=db, now=T0 + 3 * H)) == pytest.approx(2.0)
    assert _cost(costs.report(since="24h", db=db, now=T0 + 2 * H - 1.0)) == 0.0


# --- F1: absolute windows that chain ------------------------------------------------------------


def _lives_store(tmp_path: Path) -> str:
    """Four lives of a finished AWS job ending at T0 + 6 h, + 30 h, exactly T0 + 48 h, and
    T0 + 50 h ($1, $2, $4, $8)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        job = _aws_job(s)
        for n, (end, usd) in enumerate([(6 * H, 1.0), (30 * H, 2.0), (48 * H, 4.0), (50 * H, 8.0)]):
            record_life(
                s, job, n, f"l-{n}", requested_at=T0 + end - H, launched_at=T0 + end - H,
                state="terminated", ended_at=T0 + end, cost_usd=usd, on_demand_cost_usd=3 * usd,
                market_seconds=H,
            )  # fmt: skip
    return db


def test_whole_utc_days_chain_and_count_every_life_once(tmp_path: Path) -> None:
    db = _lives_store(tmp_path)
    late = T0 + 3 * D + 7 * H + 0.25  # a cron that ran late: its window is the same
    days = ["2026-11-24", "2026-11-25", "2026-11-26", "2026-11-27"]
    lines = [costs.report(since=a, until=b, db=db, now=late) for a, b in itertools.pairwise(days)]
    assert [(x["since"], x["until"]) for x in lines] == [
        (T0, T0 + D),
        (T0 + D, T0 + 2 * D),
        (T0 + 2 * D, T0 + 3 * D),
    ]
    # the life ending on midnight (T0 + 48 h) is day 2's, once
    assert [_cost(x) for x in lines] == [1.0, 6.0, 8.0]
    assert sum(_cost(x) for x in lines) == _cost(costs.report(since="all", db=db, now=late))
    # `--since yesterday --until today`: the whole previous UTC day, whenever the cron runs
    y = costs.report(since="yesterday", until="today", db=db, now=T0 + 2 * D + 7 * H + 3.5)
    assert (y["since"], y["until"], _cost(y)) == (T0 + D, T0 + 2 * D, 6.0)
    # chaining on the JSON's own `until`: the next run's since is the previous run's until
    first = costs.report(since="all", db=db, now=T0 + 40 * H + 0.123)
    iso = datetime.fromtimestamp(first["until"], UTC).isoformat()
    second = costs.report(since=iso, db=db, now=late)
    assert second["since"] == pytest.approx(first["until"], abs=1e-6)
    assert (_cost(first), _cost(second)) == (3.0, 12.0)


@pytest.mark.parametrize(
    ("since", "until", "window"),
    [
        ("2026-11-24T07:00", None, (T0 + 7 * H, T0 + 3 * D - SETTLE_S)),  # now, settled
        ("2026-11-24T07:00Z", "2026-11-25", (T0 + 7 * H, T0 + D)),
        ("2026-11-24T09:00:30+02:00", "2026-11-24 12:00", (T0 + 7 * H + 30, T0 + 12 * H)),
        ("24h", "2026-11-26", (T0 + D, T0 + 2 * D)),  # a duration: before --until
        ("6h", "1d", (T0 + 2 * D - 6 * H, T0 + 2 * D)),  # --until a duration: before now
        ("yesterday", "2030-01-01", (T0 + 2 * D, T0 + 3 * D - SETTLE_S)),  # to come: as None
        ("all", "today", (None, T0 + 3 * D)),  # midnight, now: read a minute later (waited)
    ],
)
def test_since_and_until_take_dates_times_and_durations(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    since: str,
    until: str | None,
    window: tuple[float | None, float],
) -> None:
    monkeypatch.setattr(costs, "_wait", lambda seconds: None)  # `today` at midnight waits
    out = costs.report(since=since, until=until, db=_lives_store(tmp_path), now=T0 + 3 * D)
    assert (out["since"], out["until"]) == window


@pytest.mark.parametrize(
    ("since", "until", "message"),
    [
        ("2026-13-01", None, "--since: '2026-13-01' is not a duration (24h, 7d, 1h30m) nor a"),
        ("24h", "soon", "--until: 'soon' is not a duration (24h, 7d, 1h30m) nor a time"),
        ("2026-11-24T07:00", "2026-11-24T06:00", "must start before it ends"),
    ],
)
def test_a_bad_window_is_refused(
    tmp_path: Path, since: str, until: str | None, message: str
) -> None:
    with pytest.raises(SpecError) as e:
        costs.report(since=since, until=until, db=_lives_store(tmp_path), now=T0 + D)
    assert message in str(e.value) and e.value.exit_code == 2


def test_the_cli_takes_until_and_prints_the_window_to_the_second(tmp_path: Path) -> None:
    db = _lives_store(tmp_path)
    args = ["report", "--since", "2026-11-24T05:59:59.5Z", "--until", "2026-11-24T07:00"]
    out = json.loads(CliRunner().invoke(app, [*args, "--db", db, "--json"]).stdout)
    assert (out["since"], out["until"]) == (T0 + 6 * H - 0.5, T0 + 7 * H)
    assert out["totals"]["cost_usd"] == 1.0
    text = CliRunner().invoke(app, [*args, "--db", db], env={"COLUMNS": "120"}).stdout
    assert "bills written from 2026-11-24 05:59:59.500 to 2026-11-24 07:00:00 UTC" in text
    # a bad one: one line on stderr, nothing on stdout, exit 2 (main's handling)
    code = (
        "import sys; from spotwise.cli.app import main; "
        "sys.argv = ['spotwise', *sys.argv[1:]]; main()"
    )
    bad = ["report", "--since", "2026-11-24", "--until", "last week", "--db", db, "--json"]
    done = subprocess.run(
        [sys.executable, "-c", code, *bad], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert "--until: 'last week' is not a duration" in done.stderr


def test_the_report_reads_the_jobs_in_one_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `get_job` (a session and a whole row) per job was most of a report's time with
    thousands of jobs (review-af F7)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        for j in range(3):
            job = _aws_job(s, f"j-{j}")
            record_life(
                s, job, 0, f"l-{j}", requested_at=T0, launched_at=T0, state="terminated",
                ended_at=T0 + H, cost_usd=1.0, market_seconds=H,
            )  # fmt: skip

    def refused(self: Store, job_id: str) -> None:
        raise AssertionError(f"get_job({job_id!r})")

    monkeypatch.setattr(Store, "get_job", refused)
    out = costs.report(since="all", by="job", db=db, now=T0 + D)
    assert [(g["key"], g["cost_usd"]) for g in out["groups"]] == [
        ("j-0", 1.0),
        ("j-1", 1.0),
        ("j-2", 1.0),
    ]
