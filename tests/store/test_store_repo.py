"""Round trips of every Store method, on SQLite and (where available) PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from spotwise.errors import NotFoundError, StoreError
from spotwise.providers.base import InstanceState, Market
from spotwise.store import InstanceRow, Job, JobState, Store, Trial, TrialState, session_scope


def _job(store: Store, name: str = "digits", created_at: float | None = None) -> Job:
    return store.create_job(
        name, '{"trials": 4}', "jobs/digits.yaml", "spotwise", "maximize", created_at=created_at
    )


def _count(store: Store, table: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one())


def test_job_round_trip(store: Store) -> None:
    job = _job(store, created_at=100.0)
    assert job.id.startswith("j-") and len(job.id) == 18  # 64 bits (review-z F1)
    assert job.state is JobState.PENDING and job.cost_usd == 0.0 and job.revocations == 0
    got = store.get_job(job.id)
    assert got.model_dump() == job.model_dump()
    assert got.state is JobState.PENDING and got.spec == {"trials": 4}

    updated = store.update_job(
        job.id, state="running", started_at=101.5, pid=4242, cost_usd=1.25, revocations=2
    )
    assert updated.state is JobState.RUNNING and updated.pid == 4242
    again = store.get_job(job.id)
    assert (again.state, again.started_at, again.pid, again.cost_usd, again.revocations) == (
        JobState.RUNNING, 101.5, 4242, 1.25, 2,
    )  # fmt: skip
    store.update_job(job.id, state=JobState.SUCCEEDED, best_trial_id="t-1", best_metric=0.97)
    done = store.get_job(job.id)
    assert done.state.is_terminal() and done.best_metric == 0.97


def test_list_and_latest_jobs_newest_first(store: Store) -> None:
    assert store.latest_job() is None and store.list_jobs() == []
    ids = [_job(store, f"job{i}", created_at=1000.0 + i).id for i in range(5)]
    assert [j.id for j in store.list_jobs()] == ids[::-1]
    assert [j.id for j in store.list_jobs(limit=2)] == ids[::-1][:2]
    latest = store.latest_job()
    assert latest is not None and latest.id == ids[-1]


def test_unknown_job_and_prefix_lookup(store: Store) -> None:
    with pytest.raises(NotFoundError, match=r"job 'j-nothere' not found; .*spotwise status"):
        store.get_job("j-nothere")
    a = store.create_job("a", "{}", "a.yaml", "p", "minimize", job_id="j-abc11111")
    b = store.create_job("b", "{}", "b.yaml", "p", "minimize", job_id="j-abc22222")
    assert store.get_job("j-abc1").id == a.id
    assert store.get_job("abc2").id == b.id  # without the "j-"
    with pytest.raises(NotFoundError, match="ambiguous") as ambiguous:
        store.get_job("j-abc")
    assert ambiguous.value.exit_code == 3  # not 2: cancel's "refused, see --force"
    with pytest.raises(NotFoundError):
        store.get_job("")
    with pytest.raises(NotFoundError):  # LIKE wildcards are escaped
        store.get_job("j-%")


def test_ambiguous_prefix_lists_five_and_counts_the_rest(store: Store) -> None:
    for i in range(7):
        store.create_job(f"j{i}", "{}", "a.yaml", "p", "minimize", job_id=f"j-ab{i}00000")
    shown = ", ".join(f"j-ab{i}00000" for i in range(5))
    with pytest.raises(NotFoundError) as err:
        store.get_job("j-ab")
    assert err.value.message == (
        f"job id prefix 'j-ab' is ambiguous: it matches {shown}, … and 2 more"
    )
    store.create_job("x", "{}", "a.yaml", "p", "minimize", job_id="j-cd100000")
    store.create_job("y", "{}", "a.yaml", "p", "minimize", job_id="j-cd200000")
    with pytest.raises(NotFoundError) as err:  # two matches: both listed, no count
        store.get_job("cd")
    assert err.value.message == (
        "job id prefix 'cd' is ambiguous: it matches j-cd100000, j-cd200000"
    )


def test_update_errors(store: Store) -> None:
    job = _job(store)
    with pytest.raises(NotFoundError):
        store.update_job("j-missing", state="running")
    with pytest.raises(StoreError, match="no updatable field 'colour'"):
        store.update_job(job.id, colour="red")
    with pytest.raises(StoreError, match="invalid job state 'exploded'"):
        store.update_job(job.id, state="exploded")
    with pytest.raises(StoreError, match="invalid trial state"):
        store.update_trial(store.add_trial(job.id, 0, {}).id, state="succeeded")
    assert store.get_job(job.id).state is JobState.PENDING


def test_trial_round_trip(store: Store) -> None:
    job = _job(store)
    t1 = store.add_trial(job.id, 1, {"lr": 0.01, "layers": 3, "opt": "adam"})
    t0 = store.add_trial(job.id, 0, {"lr": 0.1})
    assert t1.id.startswith("t-") and t1.state is TrialState.PENDING and t1.step == 0
    assert [t.number for t in store.list_trials(job.id)] == [0, 1]
    got = store.get_trial(t1.id)
    assert got.params == {"lr": 0.01, "layers": 3, "opt": "adam"}
    assert got.model_dump() == t1.model_dump()
    store.update_trial(
        t0.id, state=TrialState.WAITING, step=120, metric=0.8, best_metric=0.81,
        checkpoint_uri="file:///ck/t0/120", checkpoint_step=120, revocations=1,
    )  # fmt: skip
    back = store.get_trial(t0.id[:6])
    assert back.state is TrialState.WAITING and not back.state.is_terminal()
    assert (back.step, back.checkpoint_uri, back.revocations) == (120, "file:///ck/t0/120", 1)
    store.update_trial(t0.id, state="stopped_early", predicted_final=0.7, final_metric=0.8)
    assert store.get_trial(t0.id).state.is_terminal()
    with pytest.raises(NotFoundError, match="trial 't-nope' not found"):
        store.get_trial("t-nope")
    assert store.list_trials("j-other") == []


def test_duplicate_trial_number_rolls_back(store: Store) -> None:
    job = _job(store)
    store.add_trial(job.id, 0, {"lr": 0.1})
    jobs, trials = _count(store, "job"), _count(store, "trial")
    with pytest.raises(StoreError) as err:
        store.add_trial(job.id, 0, {"lr": 0.2})
    assert "\n" not in str(err.value) and "database error" in str(err.value)
    assert (_count(store, "job"), _count(store, "trial")) == (jobs, trials)
    # A failing scope undoes everything it did, not just the failing statement.
    with pytest.raises(StoreError), session_scope(store.engine) as s:
        s.add(Job(id="j-rolled", name="x", spec_json="{}", spec_path="x", policy="p",
                  state=JobState.PENDING, created_at=1.0, direction="maximize"))  # fmt: skip
        s.flush()
        s.add(Trial(id="t-dup", job_id=job.id, number=0, params_json="{}",
                    state=TrialState.PENDING, created_at=1.0))  # fmt: skip
    assert (_count(store, "job"), _count(store, "trial")) == (jobs, trials)
    with pytest.raises(NotFoundError):
        store.get_job("j-rolled")


def test_foreign_keys_are_enforced(store: Store) -> None:
    with pytest.raises(StoreError):
        store.add_trial("j-ghost", 0, {})
    with pytest.raises(StoreError):
        store.add_event("j-ghost", "launch", 1.0)


def _launch(store: Store, job_id: str, trial_id: str, **kw: Any) -> InstanceRow:
    return store.record_launch(
        job_id=job_id, trial_id=trial_id, provider="aws", region="us-east-1",
        zone="us-east-1a", instance_type="p3.2xlarge", market=Market.SPOT,
        offer_key="aws:us-east-1a:p3.2xlarge:spot", price_per_hour=0.918, **kw,
    )  # fmt: skip


def test_instance_round_trip(store: Store) -> None:
    job = _job(store)
    trial = store.add_trial(job.id, 0, {})
    row = _launch(store, job.id, trial.id, tags={"spotwise:job": job.id}, requested_at=10.0)
    assert row.state == "requested" and row.market == "spot" and row.provider_instance_id is None
    assert row.tags == {"spotwise:job": job.id} and row.is_active()
    other = _launch(store, job.id, trial.id, id="l-mine", requested_at=11.0)
    assert other.id == "l-mine"

    store.update_instance(
        row.id, provider_instance_id="i-0abc", state=InstanceState.RUNNING, launched_at=12.0
    )
    store.update_instance(
        other.id, state="revoked", ended_at=20.0, end_reason="revoked", cost_usd=0.0,
        on_demand_cost_usd=2.4, market_seconds=540.0,
    )  # fmt: skip
    got = store.get_instance(row.id)
    assert (got.provider_instance_id, got.state, got.launched_at) == ("i-0abc", "running", 12.0)
    assert [i.id for i in store.list_instances(job.id)] == [row.id, "l-mine"]
    assert [i.id for i in store.list_instances(job.id, active_only=True)] == [row.id]
    gone = store.list_instances(job.id)[1]
    assert (gone.end_reason, gone.market_seconds, gone.on_demand_cost_usd) == ("revoked", 540, 2.4)
    with pytest.raises(StoreError, match="invalid instance state 'exploded'"):
        store.update_instance(row.id, state="exploded")
    with pytest.raises(NotFoundError):
        store.get_instance("l-none")


def test_observations_keep_re_reported_steps(store: Store) -> None:
    job = _job(store)
    trial = store.add_trial(job.id, 0, {})
    store.add_observation(trial.id, 1, 0.5, wall_time=1.0, market_time=100.0, instance_id="l-1")
    store.add_observation(trial.id, 2, 0.6, wall_time=2.0)
    store.add_observation(trial.id, 2, 0.65, wall_time=9.0, instance_id="l-2")  # after a resume
    store.add_observation(trial.id, 3, 0.7, wall_time=10.0)
    obs = store.observations(trial.id)
    assert [(o.step, o.metric) for o in obs] == [(1, 0.5), (2, 0.6), (2, 0.65), (3, 0.7)]
    assert (obs[0].market_time, obs[0].instance_id, obs[1].market_time) == (100.0, "l-1", None)
    assert store.curve(trial.id) == [(1, 0.5), (2, 0.65), (3, 0.7)]
    assert store.observations("t-none") == []


def test_events_round_trip(store: Store) -> None:
    job = _job(store)
    first = store.add_event(job.id, "launch", 1.0, trial_id="t-1", instance_id="l-1", price=0.9)
    store.add_event(job.id, "notice", 2.0, instance_id="l-1", deadline=122.0)
    store.add_event(job.id, "revoked", 3.0, trial_id="t-1", instance_id="l-1")
    evs = store.events(job.id)
    assert [e.kind for e in evs] == ["launch", "notice", "revoked"]
    assert evs[0].detail == {"price": 0.9} and evs[2].detail == {}
    assert (evs[0].trial_id, evs[0].instance_id, evs[1].time) == ("t-1", "l-1", 2.0)
    assert [e.kind for e in store.events(job.id, kind="notice")] == ["notice"]
    assert [e.kind for e in store.events(job.id, after_id=first.id)] == ["notice", "revoked"]


def test_price_cache_round_trip(store: Store) -> None:
    rows = [
        {"provider": "aws", "region": "us-east-1", "zone": f"us-east-1{z}",
         "instance_type": "p3.2xlarge", "market": Market.SPOT, "price_per_hour": p,
         "observed_at": t, "fetched_at": 1000.0}
        for z, p, t in [("a", 0.92, 10.0), ("b", 0.95, 5.0)]
    ] + [
        {"provider": "aws", "region": "us-west-2", "zone": "", "instance_type": "g5.xlarge",
         "market": "on-demand", "price_per_hour": 1.006, "observed_at": 1.0, "fetched_at": 10.0},
        {"provider": "gcp", "region": "us-central1", "zone": "us-central1-a",
         "instance_type": "n1-standard-8", "market": "spot", "price_per_hour": 0.08,
         "observed_at": 1.0},
    ]  # fmt: skip
    assert store.cache_prices(rows) == 4
    assert store.cache_prices([]) == 0
    aws = store.cached_prices("aws")
    assert [(p.zone, p.price_per_hour) for p in aws] == [
        ("", 1.006), ("us-east-1b", 0.95), ("us-east-1a", 0.92),
    ]  # fmt: skip
    east = store.cached_prices("aws", region="us-east-1", instance_type="p3.2xlarge", market="spot")
    assert [p.zone for p in east] == ["us-east-1b", "us-east-1a"]
    assert store.cached_prices("aws", market=Market.ON_DEMAND)[0].instance_type == "g5.xlarge"
    fresh = store.cached_prices("aws", max_age_s=100.0, now=1050.0)
    assert {p.region for p in fresh} == {"us-east-1"}
    assert len(store.cached_prices("gcp", max_age_s=60.0)) == 1  # fetched_at defaulted to now
    with pytest.raises(StoreError, match="unknown keys"):
        store.cache_prices([{**rows[0], "currency": "USD"}])
    with pytest.raises(StoreError, match="lacks"):
        store.cache_prices([{"provider": "aws"}])


def test_rows_stay_readable_after_the_session_closes(store: Store) -> None:
    job = _job(store)
    store.add_trial(job.id, 0, {"x": 1})
    store.close()  # even with the engine disposed, the objects carry their values
    assert job.name == "digits"
    assert store.list_trials(job.id)[0].params == {"x": 1}  # and the store reconnects


def test_concurrent_event_commits_all_land(store: Store) -> None:
    job = _job(store)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(25):
                store.add_event(job.id, "progress", float(i), worker=n, i=i)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    evs = store.events(job.id)
    assert len(evs) == 100
    assert {(e.detail["worker"], e.detail["i"]) for e in evs} == {
        (n, i) for n in range(4) for i in range(25)
    }


def test_params_with_numpy_like_scalars(store: Store) -> None:
    class Scalar:
        def __init__(self, v: float) -> None:
            self.v = v

        def item(self) -> float:
            return self.v

    job = _job(store)
    trial = store.add_trial(job.id, 0, {"lr": Scalar(0.5), "depth": (1, 2)})
    assert store.get_trial(trial.id).params == {"lr": 0.5, "depth": [1, 2]}


def test_store_error_hides_the_password(pg_server: str) -> None:
    bad = pg_server.replace("postgres@", "postgres:s3cret@").rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(StoreError) as err:
        Store.open(bad)
    assert "s3cret" not in str(err.value) and "no_such_db" in str(err.value)
    assert "\n" not in str(err.value)


def test_claim_job_changes_only_the_expected_job_once_with_its_trials(store: Store) -> None:
    """Two resumes of one finished job: the first claim wins, the second changes nothing; a
    job that ended again since it was read (another state or end time) is not claimed."""
    job = _job(store)
    trial = store.add_trial(job.id, 0, {"lr": 0.1})
    store.update_trial(trial.id, state="cancelled", ended_at=4.0, step=7)
    store.update_job(job.id, state="cancelled", ended_at=5.0, error="cancelled")
    take = {"state": "pending", "ended_at": None, "error": None, "pid": 7}
    requeue = {trial.id: {"state": "pending", "ended_at": None, "step": 6}}
    assert not store.claim_job(job.id, {"state": JobState.FAILED, "ended_at": 5.0}, take)
    mark = {"kind": "resumed", "time": 9.0, "detail": {"requeued": [trial.id]}}
    assert not store.claim_job(job.id, {"state": "cancelled", "ended_at": 4.0}, take, requeue, mark)
    assert store.get_job(job.id).state is JobState.CANCELLED
    assert store.get_trial(trial.id).state is TrialState.CANCELLED  # nothing of a refusal
    assert store.events(job.id) == []

    assert store.claim_job(job.id, {"state": "cancelled", "ended_at": 5.0}, take, requeue, mark)
    (ev,) = store.events(job.id)
    assert (ev.kind, ev.time, ev.detail) == ("resumed", 9.0, {"requeued": [trial.id]})
    got = store.get_job(job.id)
    assert (got.state, got.ended_at, got.error, got.pid) == (JobState.PENDING, None, None, 7)
    t = store.get_trial(trial.id)
    assert (t.state, t.ended_at, t.step) == (TrialState.PENDING, None, 6)
    again = {**take, "pid": 8}
    assert not store.claim_job(job.id, {"state": "cancelled", "ended_at": 5.0}, again)
    assert store.get_job(job.id).pid == 7
    assert not store.claim_job("j-missing", {"state": "cancelled"}, take)


def test_claim_job_writes_nothing_when_a_trial_is_not_the_jobs(store: Store) -> None:
    job, other = _job(store), _job(store)
    stranger = store.add_trial(other.id, 0, {"lr": 0.1})
    store.update_job(job.id, state="cancelled", ended_at=5.0)
    with pytest.raises(NotFoundError, match="not found"):
        store.claim_job(
            job.id, {"state": "cancelled"}, {"state": "pending"}, {stranger.id: {"step": 1}}
        )
    assert store.get_job(job.id).state is JobState.CANCELLED  # the transaction rolled back
