"""`spotwise report`: the cost report cron jobs print, over a real SQLite store and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shared_helpers import record_launch, record_life
from typer.testing import CliRunner

from spotwise import costs
from spotwise.cli.app import app
from spotwise.costs import JobInfo, summarize
from spotwise.errors import SpecError
from spotwise.store import Store
from spotwise.units import SETTLE_S

NOW = 1_790_000_000.0  # 2026-09-21 13:33:20 UTC
H = 3600.0


def _life(**kw: Any) -> SimpleNamespace:
    row = {
        "id": "l-1",
        "job_id": "j-a",
        "provider": "aws",
        "zone": "us-east-1a",
        "instance_type": "p3.2xlarge",
        "market": "spot",
        "price_per_hour": 0.9,
        "provider_instance_id": "i-1",
        "state": "terminated",
        "requested_at": NOW - 5 * H,
        "launched_at": NOW - 5 * H,
        "ended_at": NOW - 4 * H,
        "end_reason": "completed",
        "cost_usd": 0.9,
        "on_demand_cost_usd": 3.06,
        "market_seconds": H,
    }
    row.update(kw)
    return SimpleNamespace(**row)


def test_totals_groups_and_savings_are_the_sums_of_the_lives() -> None:
    ended = [
        _life(id="l-1"),
        _life(id="l-2", end_reason="revoked", cost_usd=0.0, on_demand_cost_usd=1.53),
        _life(id="l-3", provider="gcp", zone="us-central1-a", cost_usd=0.5, on_demand_cost_usd=0.0),
    ]
    infos = {"j-a": JobInfo("succeeded", running=False, simulated=False)}
    out = summarize(ended, [], infos, by="provider", since=NOW - 24 * H, now=NOW)

    tot = out["totals"]
    assert (tot["lives"], tot["revoked"], tot["jobs"]) == (3, 1, 1)
    assert tot["hours"] == pytest.approx(3.0)
    assert tot["cost_usd"] == pytest.approx(1.4)
    assert tot["on_demand_cost_usd"] == pytest.approx(4.59)
    assert tot["saved_usd"] == pytest.approx(3.19)
    assert tot["saved_pct"] == pytest.approx((1 - 1.4 / 4.59) * 100)
    assert out["replay"]["totals"]["lives"] == 0 and out["replay"]["groups"] == []
    aws, gcp = out["groups"]
    assert (aws["key"], aws["lives"], aws["cost_usd"]) == ("aws", 2, pytest.approx(0.9))
    assert aws["saved_pct"] == pytest.approx((1 - 0.9 / 4.59) * 100)
    # nothing kept to compare with: no percentage rather than a made-up one
    assert (gcp["key"], gcp["saved_pct"]) == ("gcp", None)
    assert out["held"] == [] and out["leftovers"] == 0


def test_replayed_lives_are_marked_simulated_and_grouped_apart() -> None:
    ended = [_life(id="l-1", job_id="j-sim"), _life(id="l-2", job_id="j-real", cost_usd=0.2)]
    infos = {
        "j-sim": JobInfo("succeeded", running=False, simulated=True),
        "j-real": JobInfo("succeeded", running=False, simulated=False),
    }
    out = summarize(ended, [], infos, by="instance-type", since=None, now=NOW)
    assert [g["key"] for g in out["groups"]] == ["aws:p3.2xlarge"]
    assert out["totals"]["cost_usd"] == pytest.approx(0.2)  # real money only
    replay = out["replay"]
    assert [g["key"] for g in replay["groups"]] == ["aws (replay):p3.2xlarge"]
    assert replay["totals"]["cost_usd"] == pytest.approx(0.9)


@pytest.mark.parametrize("by", ["market", "day", "job", "provider", "zone", "instance-type"])
def test_no_grouping_adds_replayed_dollars_to_real_ones(by: str) -> None:
    """By market or day a replayed life and a real one shared a row, and the totals' saving was
    mostly the replay's."""
    ended = [
        _life(id="l-1", job_id="j-sim", cost_usd=1.0, on_demand_cost_usd=100.0),
        _life(id="l-2", job_id="j-real", cost_usd=0.5, on_demand_cost_usd=1.0),
    ]
    infos = {
        "j-sim": JobInfo("succeeded", running=False, simulated=True),
        "j-real": JobInfo("succeeded", running=False, simulated=False),
    }
    out = summarize(ended, [], infos, by=by, since=None, now=NOW)
    real, replay = out["totals"], out["replay"]["totals"]
    assert (real["lives"], real["jobs"], real["cost_usd"], real["saved_usd"]) == (1, 1, 0.5, 0.5)
    assert (replay["lives"], replay["jobs"], replay["cost_usd"]) == (1, 1, 1.0)
    assert replay["saved_usd"] == 99.0
    assert [g["cost_usd"] for g in out["groups"]] == [0.5]
    assert [g["cost_usd"] for g in out["replay"]["groups"]] == [1.0]


def test_by_day_uses_the_utc_day_each_life_ended() -> None:
    ended = [
        _life(id="l-1", ended_at=NOW - 20 * H),  # 2026-09-20 17:33 UTC
        _life(id="l-2", ended_at=NOW),  # 2026-09-21 13:33 UTC
        _life(id="l-3", ended_at=NOW + 60),  # after the report's end: not counted
    ]
    infos = {"j-a": JobInfo("succeeded", running=False, simulated=False)}
    out = summarize(ended, [], infos, by="day", since=None, now=NOW)
    assert [(g["key"], g["lives"]) for g in out["groups"]] == [("2026-09-20", 1), ("2026-09-21", 1)]


def test_held_instances_flag_what_nobody_will_release() -> None:
    held = [
        _life(id="l-run", job_id="j-run", state="running", ended_at=None, launched_at=NOW - 2 * H),
        _life(id="l-done", job_id="j-done", state="running", ended_at=None, price_per_hour=2.0),
        _life(id="l-dead", job_id="j-dead", state="pending", ended_at=None, launched_at=None),
        _life(id="l-sim", job_id="j-sim", state="running", ended_at=None, price_per_hour=9.0),
    ]
    infos = {
        "j-run": JobInfo("running", running=True, simulated=False),
        "j-done": JobInfo("succeeded", running=False, simulated=False),  # drain failed
        "j-dead": JobInfo("running", running=False, simulated=False),  # orchestrator crashed
        "j-sim": JobInfo("running", running=True, simulated=True),
    }
    out = summarize([], held, infos, by="provider", since=None, now=NOW)
    by_id = {h["launch_id"]: h for h in out["held"]}
    assert {k: h["leftover"] for k, h in by_id.items()} == {
        "l-run": False,
        "l-done": True,
        "l-dead": True,
        "l-sim": False,
    }
    assert by_id["l-done"]["next"] == "spotwise cancel j-done"
    assert by_id["l-run"]["next"] is None
    assert by_id["l-run"]["held_hours"] == pytest.approx(2.0)
    assert by_id["l-dead"]["held_hours"] == pytest.approx(5.0)  # from the request
    assert out["leftovers"] == 2
    # real clouds only: the replayed market's price is not money flowing
    assert out["held_usd_per_hour"] == pytest.approx(0.9 + 2.0 + 0.9)


def test_unknown_grouping_names_the_choices() -> None:
    with pytest.raises(SpecError, match="--by: 'region' is not a grouping; use one of provider"):
        costs.group_key(_life(), "region")


# --- over a real store and the CLI ------------------------------------------------------------


def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Two jobs: a finished AWS job with a life that ended 2 days ago, one an hour ago, and one
    its drain could not terminate; a replayed (local) job with one life that ended today."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    aws = json.dumps({"providers": [{"name": "aws", "region": "us-east-1"}]})
    local = json.dumps({"providers": [{"name": "local"}]})
    with Store.open(db) as s:
        real = s.create_job("real", aws, "job.yaml", "spot-greedy", "maximize", job_id="j-real")
        s.update_job(real.id, state="succeeded", pid=4242)
        sim = s.create_job("sim", local, "job.yaml", "spot-greedy", "maximize", job_id="j-sim")
        s.update_job(sim.id, state="succeeded")
        for n, (job, lid, ended, cost, od, state) in enumerate(
            [
                ("j-real", "l-old", NOW - 48 * H, 5.0, 9.0, "terminated"),
                ("j-real", "l-new", NOW - 1 * H, 1.0, 3.0, "revoked"),
                ("j-real", "l-left", None, 0.4, 0.0, "running"),
                ("j-sim", "l-sim", NOW - 2 * H, 2.0, 6.0, "terminated"),
                ("j-real", "l-refused", NOW - 3 * H, 0.0, 0.0, "failed"),  # no life: not counted
            ]
        ):
            record_life(
                s,
                job,
                n,
                lid,
                requested_at=NOW - 50 * H,
                state=state,
                ended_at=ended,
                cost_usd=cost,
                on_demand_cost_usd=od,
                market_seconds=H,
                provider_instance_id=f"i-{lid}",
                end_reason="revoked" if state == "revoked" else None,
                launched_at=None if state == "failed" else NOW - 49 * H,
            )
    monkeypatch.setattr("spotwise.liveness.orchestrator_alive", lambda pid: pid == 4242)
    return db


def test_report_reads_the_window_from_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _store(tmp_path, monkeypatch)
    day = costs.report(since="24h", db=db, now=NOW)
    # the default window ends SETTLE_S before now (a bill being written is in it or the next)
    assert (day["since"], day["until"]) == (NOW - SETTLE_S - 24 * H, NOW - SETTLE_S)
    assert [(g["key"], g["lives"], g["cost_usd"]) for g in day["groups"]] == [("aws", 1, 1.0)]
    assert [(g["key"], g["lives"], g["cost_usd"]) for g in day["replay"]["groups"]] == [
        ("aws (replay)", 1, 2.0)
    ]
    assert day["totals"]["revoked"] == 1 and day["totals"]["cost_usd"] == 1.0
    # the life its drain could not terminate: held, a leftover (its job finished), not in totals
    (left,) = day["held"]
    assert (left["launch_id"], left["instance_id"], left["leftover"]) == (
        "l-left",
        "i-l-left",
        True,
    )
    assert day["leftovers"] == 1 and day["held_usd_per_hour"] == pytest.approx(0.95)

    everything = costs.report(since="all", by="job", db=db, now=NOW)
    assert everything["since"] is None
    assert [(g["key"], g["cost_usd"]) for g in everything["groups"]] == [("j-real", 6.0)]
    assert [(g["key"], g["cost_usd"]) for g in everything["replay"]["groups"]] == [("j-sim", 2.0)]
    assert everything["totals"]["on_demand_cost_usd"] == 12.0
    assert everything["replay"]["totals"]["on_demand_cost_usd"] == 6.0


def test_cli_report_json_and_check_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _store(tmp_path, monkeypatch)
    runner = CliRunner()
    done = runner.invoke(app, ["report", "--since", "all", "--db", db, "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert out["totals"]["lives"] == 2 and out["leftovers"] == 1
    assert out["replay"]["totals"]["lives"] == 1

    # cron: --check turns a leftover into a non-zero exit, with the command that fixes it
    done = runner.invoke(app, ["report", "--check", "--db", db], env={"COLUMNS": "200"})
    assert done.exit_code == 1
    assert "spotwise cancel j-real" in done.stdout
    assert "may still be billed" in done.stdout

    with Store.open_existing(db) as s:  # released: the check passes
        s.update_instance("l-left", state="terminated", ended_at=NOW)
    done = runner.invoke(app, ["report", "--check", "--db", db])
    assert done.exit_code == 0, done.output
    assert "nothing held now" in done.stdout


def test_cli_report_bad_input_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _store(tmp_path, monkeypatch)
    for args, needle in [
        (["--since", "2days"], "--since: '2days' is not a duration"),
        (["--by", "region"], "--by: 'region' is not a grouping"),
    ]:
        with pytest.raises(SpecError, match=needle):
            costs.report(db=db, **{a.lstrip("-"): v for a, v in [args]})  # type: ignore[arg-type]


def test_held_replay_instances_count_market_hours_and_no_real_money() -> None:
    held = [_life(id="l-sim", job_id="j-sim", state="running", ended_at=None, launched_at=NOW - 60)]
    infos = {"j-sim": JobInfo("running", running=True, simulated=True, speedup=300.0)}
    out = summarize([], held, infos, by="provider", since=None, now=NOW)
    (h,) = out["held"]
    assert h["held_hours"] == pytest.approx(5.0)  # 60 wall s at 300x: the ended lives' clock
    assert out["held_usd_per_hour"] == 0
    assert out["held_simulated_usd_per_hour"] == pytest.approx(0.9)


def test_report_at_80_columns_keeps_ids_money_and_the_fix_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns the held table cropped the job id and dropped `spotwise cancel JOB`."""
    db = _store(tmp_path, monkeypatch)
    for by in ("provider", "instance-type", "zone"):
        done = CliRunner().invoke(
            app, ["report", "--since", "all", "--by", by, "--db", db], env={"COLUMNS": "80"}
        )
        assert done.exit_code == 0, done.output
        text = done.stdout
        assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
        assert "6.0000" in text and "2.0000" in text  # the real total and the replay's, whole
    assert "i-l-left" in text
    assert "j-real: 1 instance(s) held by a job that is finished" in " ".join(text.split())
    assert "run `spotwise cancel j-real`" in text


def test_a_replay_job_without_a_replay_block_uses_the_specs_default_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its held hours were counted at 1x; the job ran at the spec's default 600x."""
    db = _store(tmp_path, monkeypatch)  # j-sim's spec names `local` with no replay block
    with Store.open_existing(db) as s:
        # its orchestrator was last known alive now: its held life runs up to then (with
        # nothing after its own launch record, up to its start, as `cancel` would bill it)
        s.update_job("j-sim", heartbeat_at=NOW)
        t = s.add_trial("j-sim", 9, {"lr": 0.1})
        record_launch(
            s,
            "j-sim",
            t.id,
            id="l-held",
            price_per_hour=0.95,
            state="running",
            launched_at=NOW - 6.0,
        )
    (h,) = [h for h in costs.report(since="all", db=db, now=NOW)["held"] if h["job_id"] == "j-sim"]
    assert h["held_hours"] == pytest.approx(6.0 * 600 / 3600)
