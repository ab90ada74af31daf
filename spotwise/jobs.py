"""Core functions behind the job commands (`tune`, `status`, `trials`, `cancel`).

The CLI parses, calls exactly one of these, and renders what it returns (plain dicts, ready
for ``--json``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spotwise.errors import ConfigError, NotFoundError


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
    from spotwise.planner.policy import get_policy
    from spotwise.spec import load_spec
    from spotwise.store import Store

    spec = load_spec(spec_path)
    get_policy(policy or spec.policy)  # unknown policy: error before anything is written
    store = Store.open(db)
    try:
        return run_job(
            spec,
            spec_path.resolve(),
            store,
            RunOptions(policy=policy, on_update=on_update, run_root=run_root),
        )
    finally:
        store.close()


def _job_dict(job: Any) -> dict[str, Any]:
    def v(x: Any) -> Any:
        return x.value if hasattr(x, "value") else x

    return {
        "job_id": job.id,
        "name": job.name,
        "state": v(job.state),
        "policy": job.policy,
        "direction": job.direction,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "best_trial": job.best_trial_id,
        "best_metric": job.best_metric,
        "cost_usd": job.cost_usd,
        "on_demand_cost_usd": job.on_demand_cost_usd,
        "revocations": job.revocations,
        "migrations": job.migrations,
        "early_stopped": job.early_stopped,
        "error": job.error,
    }


def _trial_dict(t: Any) -> dict[str, Any]:
    return {
        "trial": t.id,
        "number": t.number,
        "state": t.state.value if hasattr(t.state, "value") else t.state,
        "params": json.loads(t.params_json),
        "step": t.step,
        "metric": t.metric,
        "best_metric": t.best_metric,
        "final_metric": t.final_metric,
        "predicted_final": t.predicted_final,
        "checkpoint_step": t.checkpoint_step,
        "cost_usd": t.cost_usd,
        "revocations": t.revocations,
        "migrations": t.migrations,
    }


def status(job_id: str | None, *, db: str | None = None, limit: int = 20) -> dict[str, Any]:
    """One job (with its trials counted), or the most recent jobs when no id is given."""
    from spotwise.store import Store

    store = Store.open_existing(db)
    try:
        if job_id is None:
            return {"jobs": [_job_dict(j) for j in store.list_jobs(limit)]}
        job = store.get_job(job_id)
        trials = store.list_trials(job.id)
        out = _job_dict(job)
        if out["state"] in ("pending", "running"):  # here, elsewhere, or gone (a crash)
            out["orchestrator"] = orchestrator_state(job)
        out["trials"] = len(trials)
        out["completed"] = sum(1 for t in trials if _trial_dict(t)["state"] == "completed")
        best = next((t for t in trials if t.id == job.best_trial_id), None)
        out["best"] = (
            None
            if best is None
            else {
                "trial": best.id,
                "params": json.loads(best.params_json),
                "metric": best.final_metric,
            }
        )
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
            for i in store.list_instances(job.id)
        ]
        return out
    finally:
        store.close()


def trials(job_id: str | None, *, db: str | None = None) -> dict[str, Any]:
    from spotwise.store import Store

    store = Store.open_existing(db)
    try:
        job = store.get_job(job_id) if job_id else store.latest_job()
        if job is None:
            raise NotFoundError("no job in the database yet; run `spotwise tune SPEC` first")
        return {"job_id": job.id, "trials": [_trial_dict(t) for t in store.list_trials(job.id)]}
    finally:
        store.close()


def cancel(
    job_id: str, *, db: str | None = None, wait_s: float = 60.0, force: bool = False
) -> dict[str, Any]:
    """Ask a running job's orchestrator to stop (trials checkpoint first); mark a job whose
    orchestrator is gone as cancelled; in both of those cases, and for a finished job whose
    record still holds instances (its drain could not terminate them), terminate what the
    provider still runs with the job's tags. ``force``: take an orchestrator recorded on
    another machine for gone (that machine is lost)."""
    from spotwise.store import Store

    store = Store.open_existing(db)
    try:
        job = store.get_job(job_id)
        state = job.state.value if hasattr(job.state, "value") else job.state
        if job.state.is_terminal():
            out = {"job_id": job.id, "state": state, "cancelled": False}
            if not store.list_instances(job.id, active_only=True):
                return {**out, "message": f"job already {state}"}
            released = _release(store, job)
            return {
                **out,
                **released,
                "message": f"job already {state}; its record still held instances: "
                + _released_text(job.id, released),
            }
        where = orchestrator_state(job)
        if where == "elsewhere" and not force:
            raise ConfigError(
                f"job {job.id} runs on {job.host} (pid {job.pid}): run `spotwise cancel "
                f"{job.id}` there",
                hint=f"if that machine is lost, `spotwise cancel --force {job.id}` releases "
                "the job's instances from here",
            )
        if where == "here":
            assert job.pid is not None
            os.kill(job.pid, signal.SIGTERM)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                job = store.get_job(job.id)
                if job.state.is_terminal():
                    break
                time.sleep(0.2)
            if not job.state.is_terminal():
                return {
                    "job_id": job.id,
                    "state": job.state.value,
                    "cancelled": False,
                    "message": f"asked the orchestrator (pid {job.pid}) to stop; it is still "
                    f"stopping after {wait_s:g} s: see `spotwise status {job.id}`",
                }
            return {
                "job_id": job.id,
                "state": job.state.value,
                "cancelled": True,
                "message": "the orchestrator checkpointed and stopped every trial",
            }
        # the trials it completed keep their result: the best of them is the job's, as the
        # orchestrator's own end would have recorded (ties: the earlier trial)
        trials = store.list_trials(job.id)
        done = [t for t in trials if t.state == "completed" and t.final_metric is not None]
        sign = 1.0 if job.direction == "maximize" else -1.0
        best = max(done, key=lambda t: (sign * (t.final_metric or 0.0), -t.number), default=None)
        store.update_job(
            job.id,
            state="cancelled",
            ended_at=time.time(),
            error="cancelled after its orchestrator had exited",
            best_trial_id=best.id if best else None,
            best_metric=best.final_metric if best else None,
        )
        for t in trials:
            if not t.state.is_terminal():
                store.update_trial(t.id, state="cancelled", ended_at=time.time())
        released = _release(store, job, orchestrator_died=True)
        return {
            "job_id": job.id,
            "state": "cancelled",
            "cancelled": True,
            **released,
            "message": "orchestrator was not running; job marked cancelled, "
            + _released_text(job.id, released),
        }
    finally:
        store.close()


def _release(store: Any, job: Any, orchestrator_died: bool = False) -> dict[str, Any]:
    """Terminate what the providers still run with the job's tags, then close each instance
    record whose instance is confirmed to hold nothing any more; a record that could not be
    confirmed (its region could not be listed, its terminate was refused) stays open, so that
    a later cancel retries. Local: the trial processes' pid records are reconciled and every
    record is closed.

    Each closed record is billed up to now (or up to when its provider says it ended; when
    ``orchestrator_died``, a local job's trial processes that died with it, up to the job's
    last report, the last time it was known alive): the
    seconds no life's bill covered (an instance left by a dead orchestrator, or billed only up
    to a drain that could not terminate it) at its price, in market seconds (a replay's clock
    runs ``speedup`` times the wall clock), and the job's cost becomes the sum of its
    instances' again. A stopped VM ('not deleted') has no compute to bill.

    Returns ``terminated_instances`` (ids terminated now), ``closed_records`` (how many),
    ``records`` (a cloud job's: each record's instance, region and outcome: ``terminated``,
    ``ended``, ``not found`` or ``open``), ``open_instances`` (the ids still open) and
    ``errors`` (why)."""
    from spotwise.planner import reconcile as rec
    from spotwise.spec import ReplaySpec, load_stored_spec

    spec = load_stored_spec(job.spec_json)
    rows = store.list_instances(job.id, active_only=True)
    first = spec.providers[0]
    ends: dict[str, float | None] = {}  # launch id → when it ended (None: now)
    seen: dict[str, rec.Settled] = {}  # launch id → the instance the provider listed for it
    records: list[dict[str, Any]] = []
    errors: list[str] = []
    billed_to = "now"
    if first.name == "local":
        # a local trial process dies with its orchestrator: after the orchestrator died, one
        # found alive (and killed now) is billed up to now, the others up to the job's last
        # recorded report, when it was last known alive (billing them up to the cancel, in
        # replayed market seconds, grew the bill by the hour while nothing ran)
        terminated = rec.reconcile(spec, job.id)
        last = _last_report_wall(store, job.id) if orchestrator_died else None
        for row in rows:
            dead = orchestrator_died and row.provider_instance_id not in terminated
            ends[row.id] = (last or row.launched_at or row.requested_at) if dead else None
        if any(end is not None for end in ends.values()):
            billed_to = (
                "the job's last report" if last else "their start (no report was recorded)"
            ) + ", as their trial processes died with the orchestrator"
    else:
        held = [rec.Held(r.id, r.provider, r.region, r.provider_instance_id) for r in rows]
        res = rec.reconcile_records(spec, job.id, held)
        terminated, errors = res.terminated, res.errors
        for one in res.records:
            if one.outcome != rec.OPEN:
                ends[one.held.launch_id] = one.ended_at
            if one.found:
                seen[one.held.launch_id] = one
            records.append(
                {
                    "launch_id": one.held.launch_id,
                    "instance_id": one.instance_id,
                    "region": one.held.region,
                    "outcome": one.outcome,
                    **({"error": one.error} if one.error else {}),
                }
            )
    now = time.time()
    speedup = (first.replay or ReplaySpec()).speedup if first.name == "local" else 1.0
    extra_by_trial: dict[str, float] = {}  # what the lives ran after the job's own bill
    for row in rows:
        found = seen.get(row.id)
        # a launch that never answered (its orchestrator died mid-launch, or its failure could
        # not be confirmed clean) has no instance id or start: the instance the provider
        # listed for it gives both, and it is billed from its creation (else from the
        # request: it cannot have started earlier). No instance listed: nothing to bill.
        start = row.launched_at
        known: dict[str, Any] = {}
        if found is not None and row.provider_instance_id is None:
            known["provider_instance_id"] = found.instance_id
        if found is not None and start is None:
            start = found.launched_at or row.requested_at
            known["launched_at"] = start  # `spotwise report` bills ended lives from it
        if row.id not in ends:
            if known:
                store.update_instance(row.id, **known)
            continue
        end = min(ends[row.id] or now, now)
        extra_s = 0.0
        if start is not None and row.end_reason != "not deleted":
            extra_s = max((end - start) * speedup - row.market_seconds, 0.0)
        extra_usd = extra_s * row.price_per_hour / 3600.0
        store.update_instance(
            row.id,
            state="terminated",
            end_reason="reconciled",
            ended_at=end,
            cost_usd=row.cost_usd + extra_usd,
            market_seconds=row.market_seconds + extra_s,
            **known,
        )
        extra_by_trial[row.trial_id] = extra_by_trial.get(row.trial_id, 0.0) + extra_usd
    for trial_id, extra_usd in extra_by_trial.items():  # a trial's cost is its lives' sum
        if extra_usd:
            trial = store.get_trial(trial_id)
            store.update_trial(trial_id, cost_usd=trial.cost_usd + extra_usd)
    store.update_job(job.id, cost_usd=sum(r.cost_usd for r in store.list_instances(job.id)))
    return {
        "terminated_instances": terminated,
        "closed_records": len(ends),
        "records": records,
        "open_instances": [r["instance_id"] for r in records if r["outcome"] == rec.OPEN],
        "errors": errors,
        "billed_to": billed_to,
    }


def _last_report_wall(store: Any, job_id: str) -> float | None:
    """The wall time of the job's last recorded report (its orchestrator was alive then), or
    None for a job without one (a life is then billed no further than its own start)."""
    return max(
        (o.wall_time for t in store.list_trials(job_id) for o in store.observations(t.id)),
        default=None,
    )


def _released_text(job_id: str, released: dict[str, Any]) -> str:
    """``2 tagged instance(s) terminated, 2 instance record(s) closed and billed up to now
    (2 terminated now)``, then which instances stay open and how to retry."""
    text = (
        f"{len(released['terminated_instances'])} tagged instance(s) terminated, "
        f"{released['closed_records']} instance record(s) closed and billed up to "
        f"{released.get('billed_to', 'now')}"
    )
    how: dict[tuple[int, str], int] = {}
    for r in released["records"]:
        key = {"terminated": (0, "terminated now"), "ended": (1, "already ended")}.get(
            r["outcome"], (2, f"not found in {r['region']}")
        )
        if r["outcome"] != "open":
            how[key] = how.get(key, 0) + 1
    if how:
        text += f" ({', '.join(f'{n} {k}' for (_, k), n in sorted(how.items()))})"
    why = "; ".join(dict.fromkeys(released["errors"]))
    held = released["open_instances"]
    if held:
        text += (
            f"; {len(held)} still open and may still be billed: {', '.join(held)}"
            + (f" ({why})" if why else "")
            + f"; run `spotwise cancel {job_id}` again to retry"
        )
    elif why:
        text += f"; no record of the job was there, but {why}"
    return text


def orchestrator_state(job: Any) -> str:
    """Where a job's orchestrator is: ``here`` (alive on this machine), ``elsewhere`` (recorded
    on another machine: its pid means nothing here) or ``gone``."""
    import socket

    if job.host and job.host != socket.gethostname():
        return "elsewhere"
    return "here" if job.pid and orchestrator_alive(job.pid) else "gone"


def orchestrator_alive(pid: int) -> bool:
    """Whether ``pid`` is still a spotwise orchestrator (guards against a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        return b"spotwise" in cmdline.read_bytes()
    return True
