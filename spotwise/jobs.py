"""Core functions behind the job commands (`tune`, `status`, `trials`, `cancel`).

The CLI parses, calls exactly one of these, and renders what it returns (plain dicts, ready
for ``--json``).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spotwise.cancel_wait import await_stop, lost_hint, unanswered
from spotwise.errors import ConfigError, NotFoundError, SpecError, StoreError
from spotwise.job_facts import budget_of, simulated
from spotwise.job_rows import last_active
from spotwise.job_rows import params as _params
from spotwise.job_rows import spec_order as _spec_order
from spotwise.job_rows import trial_dict as _trial_dict
from spotwise.job_rows import with_orchestrator as _with_orchestrator
from spotwise.liveness import (
    age_text,
    alive_beat,
    hidden_text,
    not_finished_text,
    orchestrator_state,
    stale_heartbeat_s,
    where_text,
)
from spotwise.release import _release
from spotwise.release_sweep import sweep_finished
from spotwise.release_text import released_text


def tune(
    spec_path: Path,
    *,
    db: str | None = None,
    policy: str | None = None,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    run_root: Path | None = None,
) -> dict[str, Any]:
    """Validate the spec (nothing is written if it is bad), then run the job to the end."""
    from spotwise.planner.orchestrator import RunOptions, run_job
    from spotwise.planner.policy import make_policy
    from spotwise.spec import load_spec
    from spotwise.store import Store

    if policy is not None and not policy.strip():  # `--policy ''` ran the spec's in silence
        from spotwise.planner.policy import policy_names

        raise SpecError(
            f"--policy: empty; name one of {', '.join(policy_names())}, or leave it out for "
            "the spec's policy"
        )
    spec = load_spec(spec_path)
    other = policy is not None and policy != spec.policy  # `--policy OTHER`
    try:  # an unknown policy, or options it does not take: refused before anything is written
        make_policy(
            policy or spec.policy, spec.policy_options, chosen_by="from --policy" if other else ""
        )
    except SpecError as e:
        if not other:
            raise
        if e.message.startswith("policy:"):  # an unknown --policy: the option's error (M6)
            raise SpecError("--policy:" + e.message.removeprefix("policy:")) from None
        raise SpecError(
            f"{spec_path}: {e.message}",
            hint=f"the spec's policy_options are for {spec.policy}: drop --policy {policy}, "
            f"or change policy_options for {policy}",
        ) from None
    if note := deadline_note(policy or spec.policy, spec.budget.deadline_hours):
        logging.getLogger(__name__).warning("warning: %s", note)  # as every warning (M5)
    store = Store.open(db)
    try:
        out = run_job(
            spec,
            spec_path.resolve(),
            store,
            RunOptions(policy=policy, on_update=on_update, run_root=run_root),
        )
        out = {**out, **_stored_dollars(store, out.get("job_id"))}
    finally:
        store.close()
    return {**out, "simulated": simulated(spec.model_dump(mode="json"))}


def _stored_dollars(store: Any, job_id: str | None) -> dict[str, float]:
    """The job's dollars as its row holds them, as `status` and `report` give them: not
    rounded (review-af F8: the summary's were rounded to 6 places, so a script comparing
    `tune --json` with `status --json` saw two costs for one job). Nothing when the row
    cannot be read, or names another orchestrator: the summary's own then stand."""
    try:
        job = store.get_job(job_id) if job_id else None
    except (NotFoundError, StoreError):
        return {}
    import socket

    if (
        job is None
        or job.pid not in (None, os.getpid())
        or job.host not in (None, socket.gethostname())
    ):
        return {}  # another process took the job over: its row is not this run's (AZ5)
    return {"cost_usd": job.cost_usd, "on_demand_cost_usd": job.on_demand_cost_usd}


def deadline_note(policy: str, deadline_hours: float | None) -> str:
    """A warning for a deadline policy run without a deadline (review-ac F6: it placed trials
    by price alone, and nothing said so)."""
    if policy not in ("greedy", "uniform-progress") or deadline_hours is not None:
        return ""
    return (
        f"policy {policy} plans for a deadline (budget.deadline_hours) and the spec sets none: "
        "it places each trial on the spot offer cheapest per step, as spot-greedy does, but "
        "waits for spot where spot-greedy would take on-demand"
    )


def resume(
    job_id: str,
    *,
    db: str | None = None,
    max_cost_usd: float | None = None,
    deadline_hours: float | None = None,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    run_root: Path | None = None,
) -> dict[str, Any]:
    """Run a finished job's unfinished trials (from their checkpoints) and the rest of its
    plan, under its id, spend and stored spec (:mod:`spotwise.planner.resume`); a new budget
    or deadline when given."""
    from spotwise.planner.orchestrator import RunOptions, resume_job
    from spotwise.planner.resume import plan_resume
    from spotwise.store import Store

    store = Store.open_existing(db)
    try:
        job = store.get_job(job_id)
        if not job.state.is_terminal():
            raise ConfigError(not_finished_text(job))
        plan = plan_resume(store, job, max_cost_usd=max_cost_usd, deadline_hours=deadline_hours)
        opts = RunOptions(policy=plan.policy, on_update=on_update, run_root=run_root)
        out = resume_job(plan, store, opts)
        return {**out, **_stored_dollars(store, job.id), "simulated": simulated(job.spec_json)}
    finally:
        store.close()


def status(
    job_id: str | None, *, db: str | None = None, limit: int = 20, newest: int | None = None
) -> dict[str, Any]:
    """One job (with its trials counted), or the ``limit`` most recent jobs (0: all) when no
    id is given, with ``total`` (every job) and ``left_out`` (those not listed). Each job's
    ``cost_usd`` comes split into ``billed_usd`` and ``running_usd``
    (:func:`~spotwise.job_rows.bill_split`). ``newest``: of one job's instance lives, only
    the ``newest`` newest and every older one still held (the text's rows), with
    ``instances_total`` (how many it has); None: every one."""
    from spotwise.store import Store

    if limit < 0:
        raise SpecError(f"--limit must be 0 (all) or more, got {limit}")
    store = Store.open_existing(db)
    try:
        if job_id is None:
            total = store.count_jobs()
            page = store.list_jobs(limit or max(total, 1))
            # every job's in one read; past a page, all (a long IN list is refused by SQLite)
            sums = store.bill_sums([j.id for j in page] if len(page) <= 500 else None)
            listed = [_with_orchestrator(j, sums.get(j.id, (0.0, 0.0))) for j in page]
            return {"jobs": listed, "total": total, "left_out": max(total - len(listed), 0)}
        job = store.get_job(job_id)
        order = _spec_order(job)
        # here, elsewhere, or gone (a crash)
        out = _with_orchestrator(job, store.bill_sums([job.id]).get(job.id, (0.0, 0.0)))
        if (budget := budget_of(job.spec_json, job.cost_usd)) is not None:
            out["budget"] = budget  # its cap, and an overrun (only tune's summary said it)
        out["trials"], out["completed"] = store.trial_counts(job.id)
        best = store.job_trial(job.id, job.best_trial_id) if job.best_trial_id else None
        out["best"] = (
            None
            if best is None
            else {
                "trial": best.id,
                "number": best.number,  # as `spotwise tune` names it
                "params": _params(best.params_json, order),
                "metric": best.final_metric,
            }
        )
        if newest is None:
            rows, count = store.list_instances(job.id), None
        else:  # review-af F7: the text shows these; a job may have thousands
            rows, count = store.newest_instances(job.id, newest)
        out["instances"] = [
            {
                "launch_id": i.id,
                "trial": i.trial_id,
                "zone": i.zone,
                "market": i.market,
                "instance_type": i.instance_type,
                "state": i.state,
                "end_reason": i.end_reason,
                "cost_usd": i.cost_usd,
            }
            for i in rows
        ]
        if count is not None:
            out["instances_total"] = count
        return out
    finally:
        store.close()


def trials(job_id: str | None, *, db: str | None = None) -> dict[str, Any]:
    """The trials of ``job_id``; None: of the job most recently active
    (:func:`~spotwise.job_rows.last_active`), not the newest created."""
    from spotwise.store import Store

    store = Store.open_existing(db)
    try:
        job = store.get_job(job_id) if job_id else last_active(store.list_jobs(store.count_jobs()))
        if job is None:
            raise NotFoundError("no job in the database yet; run `spotwise tune SPEC` first")
        from spotwise.planner.resume import stop_reasons

        order, why = _spec_order(job), stop_reasons(store, job.id)
        rows = [_trial_dict(t, order) for t in store.list_trials(job.id)]
        for r in rows:  # a limit's stop is no judgement of the trial: say which it was
            r["stop_reason"] = why.get(r["trial"]) if r["state"] == "stopped_early" else None
        return {"job_id": job.id, "simulated": simulated(job.spec_json), "trials": rows}
    finally:
        store.close()


def cancel(
    job_id: str,
    *,
    db: str | None = None,
    wait_s: float = 60.0,
    force: bool = False,
    run_root: Path | None = None,
) -> dict[str, Any]:
    """Ask a running job's orchestrator to stop (trials checkpoint first): SIGTERM on this
    machine, a request written to the job's row (``cancelled``, no ``ended_at`` yet) for one
    on another machine whose heartbeat is fresh; mark a job whose orchestrator is gone as
    cancelled; in both of those cases, and for a finished job whose record still holds
    instances (its drain could not terminate them), terminate what the provider still runs
    with the job's tags. A finished cloud job whose records are all closed is looked for on
    its cloud too (:func:`~spotwise.release_sweep.sweep_finished`: an instance can outlive its
    records). ``force``: take an orchestrator recorded on another machine for gone (that
    machine is lost); refused while its heartbeat is fresh (review-ax AX1). ``run_root``: where
    the job's run folder is (None: the default), read for a dead orchestrator's trials."""
    from spotwise.store import Store

    store = Store.open_existing(db)
    try:
        for _ in range(3):  # a write refused: the job changed since it was read; read it again
            out = _cancel(store, store.get_job(job_id), wait_s, force, run_root)
            if out is not None:
                return out
        raise ConfigError(f"job {job_id} kept changing while it was cancelled: run it again")
    finally:
        store.close()


def _cancel(
    store: Any, job: Any, wait_s: float, force: bool, run_root: Path | None = None
) -> dict[str, Any] | None:
    """:func:`cancel` of ``job`` as read; None when a compare-and-set write found it changed."""
    from spotwise.planner.job_summary import not_ours_since

    state = job.state.value if hasattr(job.state, "value") else job.state
    where = orchestrator_state(job)
    beat = alive_beat(job)
    if state == "cancelled" and job.ended_at is None:  # asked to stop: no end written yet
        if beat is not None or where == "here":  # its orchestrator is still stopping
            return await_stop(store, job, wait_s, None, where == "elsewhere")
        if where in ("elsewhere", "hidden") and not force:  # lost, or only silent: say which
            said, hint = unanswered(job, where)
            raise ConfigError(said, hint=hint)
        # its orchestrator died before it heard the request (review-az AZ1): closed as any
        # dead orchestrator's job, its end written only over the request
        return _close_dead(store, job, {"state": state, "ended_at": None}, run_root)
    if job.state.is_terminal():
        out = {"job_id": job.id, "state": state, "cancelled": False}
        if not store.list_instances(job.id, active_only=True):
            # an instance can outlive its records: a cloud is asked what is left
            return {**out, **sweep_finished(store, job, state)}
        # a first cancel of a dead orchestrator's job stopped midway (review-ah F5: its
        # lives were then billed up to now, 10x on a replay, not to when it was alive)
        released = _release(store, job, where == "gone")
        return {
            **out,
            **released,
            "message": f"job already {state}; its record still held instances: "
            + released_text(job.id, released),
        }
    if force and where in ("elsewhere", "hidden") and beat is not None:
        raise ConfigError(
            f"job {job.id}'s heartbeat is {beat:.0f} s old: it is alive on "
            f"{where_text(job) if where == 'elsewhere' else 'this machine'}: run `spotwise "
            f"cancel {job.id}`, which asks it to stop",
            hint=f"--force is for a lost machine: it is refused until the heartbeat is "
            f"{stale_heartbeat_s():g} s old (longer than a write may wait out a database lock)",
        )
    if where == "elsewhere" and not force:
        if beat is None:  # no word from it for long: its machine may be lost
            raise ConfigError(
                f"job {job.id} runs on {where_text(job)} (pid {job.pid}): run `spotwise cancel "
                f"{job.id}` there (its heartbeat is {age_text(job)}: none asks it from here)",
                hint=lost_hint(job),
            )
        seen, _ = not_ours_since(store, job.id)
        if not store.update_job_if(job.id, [state], state="cancelled", ended_at=None):
            return None
        return await_stop(store, job, wait_s, seen, remote=True)
    if where == "hidden" and not force:  # one line: no hint
        raise ConfigError(
            hidden_text(job) + f": cancel it as the user who started it, or `spotwise "
            f"cancel --force {job.id}` if it is not the orchestrator (that releases the "
            "job's instances)"
        )
    if where == "here":
        assert job.pid is not None
        seen, _ = not_ours_since(store, job.id)  # what the drain adds is its answer's
        try:
            os.kill(job.pid, signal.SIGTERM)
        except PermissionError:  # its own process, run by another user (a shared database)
            raise ConfigError(
                f"job {job.id}'s orchestrator (pid {job.pid}) runs as another user of this "
                "machine: cancel it as that user",
                hint="`sudo -u USER spotwise cancel JOB` with the same --db",
            ) from None
        return await_stop(store, job, wait_s, seen, remote=False, end=False)
    return _close_dead(store, job, {"state": state}, run_root)


def _close_dead(
    store: Any, job: Any, expected: dict[str, Any], run_root: Path | None = None
) -> dict[str, Any] | None:
    """Close the job of an orchestrator that is gone: its finished trials completed, its best
    trial, its end (``cancelled``, written only while the row still holds ``expected``), its
    open trials cancelled, its records released up to when it was last alive; None when the
    row changed since it was read. Each open trial's events its instance wrote after the
    orchestrator last read them are read first (:mod:`spotwise.close_read`, review-bb F3):
    a trial that reported its last step's metric finished, completed with that metric; the
    others are cancelled at the furthest step and checkpoint they name."""
    from spotwise import close_read as cr
    from spotwise.spec import load_stored_spec

    back = cr.read_back(store, job, run_root)  # nothing written before the claim
    steps = load_stored_spec(job.spec_json).steps
    trials = store.list_trials(job.id)
    # a trial that reported its last step's metric finished (its orchestrator died before
    # it saw the exit): completed with that metric, as its orchestrator would have recorded
    done = cr.finals(trials, back, store.curve, steps)
    # the trials it completed keep their result: the best of them is the job's, as the
    # orchestrator's own end would have recorded (ties: the earlier trial)
    best = cr.best(trials, done, job.direction)
    # only over the state read: an end written since stays (review-ax AX5), and a live
    # orchestrator (pending: no pid yet) hears this cancel and stops
    end = {
        "state": "cancelled",
        "ended_at": time.time(),
        "error": "cancelled after its orchestrator had exited",
        "best_trial_id": best[0] if best else None,
        "best_metric": best[1] if best else None,
    }
    if not store.claim_job(job.id, expected, end):
        return None
    cr.close_open(store, job, trials, back, done, steps)
    released = _release(store, job, orchestrator_died=True)
    cr.keep_reports(store, back)  # after the bills: on what the orchestrator recorded
    return {
        "job_id": job.id,
        "state": "cancelled",
        "cancelled": True,
        **released,
        "message": "orchestrator was not running; job marked cancelled, "
        + cr.with_said(released_text(job.id, released), back, done, released),
    }
