"""What a dead orchestrator's trials did after it last read them, read back by `spotwise cancel`.

A cloud job's instances run on after its orchestrator dies (a crash, a SIGKILL): their trials
report, checkpoint and finish, their agents upload each attempt's events
(``events-<attempt>.jsonl``) to the trial's artifacts folder; a local trial writes the same
file in the trial's folder of the job's run folder. The cancel that closes such a job
(:func:`spotwise.jobs._close_dead`) closed every open trial ``cancelled`` at the step the dead
orchestrator last read, and `spotwise resume` then launched one more instance per trial only to
find its result there (review-bb F3: one more instance life each, the provider's minimum plus
boot, and `status` meanwhile said the trials got nowhere).

Here the cancel reads those events first, through the reader the orchestrator uses for another
attempt's (:func:`~spotwise.planner.trial_output.attempts_events`: the trial's local folder,
then each cloud provider's artifacts folder), of the trial's latest attempt only (every launch
record of the trial used up one attempt number, in order: the orchestrator read the earlier
attempts while it lived and threw away what a revoked one did after its checkpoint), and of
its reports only those past the step the trial's row records, and only while that attempt's
record is still open (review-be BE1, review-bg BG3: every attempt's reports were read and added
again; a revoked attempt's lost steps set the trial's progress, also when the orchestrator had
closed that life and died before the relaunch).
A trial with a finite metric reported at its last step (``steps``) is closed ``completed`` with
it; the others are closed ``cancelled`` at the furthest step reported and the newest checkpoint
the events name, so that a resume starts each from there. A folder that cannot be read is
said once in the cancel's answer, and the trials not read are closed as before: a read never
fails the cancel. :func:`read_back` reads (before the job's end is claimed: nothing is
written), :func:`close_open` writes the trials once it is, :func:`keep_reports` adds the
reports as observations after the records are released (their bills are computed on what the
orchestrator itself recorded).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trial_output import attempts_events, record_metric, record_step
from spotwise.providers.base import Market, Offer
from spotwise.spec import JobSpec, load_stored_spec
from spotwise.store.models import TERMINAL_INSTANCE_STATES


@dataclass
class _Owner:
    """What :func:`~spotwise.planner.trial_output.attempts_events` reads of its orchestrator."""

    run_dir: Path
    spec: JobSpec
    job_id: str


@dataclass
class Tail:
    """One open trial's records the dead orchestrator never read."""

    reports: dict[int, tuple[float | None, float, str]] = field(default_factory=dict)
    checkpoint: int = 0  # the newest checkpoint step its events name (0: none)


@dataclass
class ReadBack:
    """:func:`read_back`'s answer: each open trial's :class:`Tail` (by trial id, only those
    whose events were read), and one line for the folders that could not be read ("": none)."""

    tails: dict[str, Tail]
    unread: str = ""


def read_back(store: Any, job: Any, run_root: Path | None = None) -> ReadBack:
    """Read each open trial's events (see the module docstring); ``run_root``: where the job's
    run folder is (None: the default, ``$SPOTWISE_HOME/runs``). After the first place that
    cannot be read, no other trial is read (each would wait on the same failing store)."""
    from spotwise.planner.runstate import default_run_root

    spec = load_stored_spec(job.spec_json)
    owner = _Owner(((run_root or default_run_root()) / job.id).resolve(), spec, job.id)
    rows: dict[str, list[Any]] = {}
    for r in store.list_instances(job.id):  # oldest first: attempt n is the trial's n-th
        rows.setdefault(r.trial_id, []).append(r)
    out = ReadBack({})
    skipped = 0
    for t in store.list_trials(job.id):
        lives = rows.get(t.id, [])
        if t.state.is_terminal() or not lives:  # closed, or never launched: nothing to read
            continue
        if lives[-1].state in TERMINAL_INSTANCE_STATES:  # its orchestrator read that life's
            continue  # exit, and threw away what a revoked one did past its checkpoint (BG3)
        if out.unread:
            skipped += 1
            continue
        run = TrialRun(t.id, t.number, {}, spec.steps, spec.checkpoint.every)
        run.attempt = len(lives) - 1
        run.checkpoint_uri = t.checkpoint_uri or _checkpoint_uri(spec, job.id, t.id)
        try:
            # its latest attempt only: the orchestrator read the earlier ones while it lived,
            # and threw away what a revoked one did after its checkpoint (review-be BE1)
            found, unread = attempts_events(owner, run, _life(lives[-1]), only=[len(lives) - 1])
        except Exception as e:  # a read never fails the cancel: said once
            found, unread = {}, f"{type(e).__name__}: {e}"
        if unread:
            out.unread = f"trial {t.id}'s events could not be read ({unread})"
        tail = _tail(found, lives)
        # what the orchestrator had read is on record already (its observations, its step)
        tail.reports = {k: v for k, v in tail.reports.items() if k > int(t.step or 0)}
        if tail.reports or tail.checkpoint:
            out.tails[t.id] = tail
    if skipped:
        out.unread += f"; {skipped} other open trial(s) not read"
    return out


def finals(trials: list[Any], back: ReadBack, curve: Any, steps: int) -> dict[str, float]:
    """The final metric of each open trial that finished: a finite metric at step ``steps``
    in its unread events, else in what the store holds of it (``curve(trial id)``: the dead
    orchestrator read it, but not the exit)."""
    out: dict[str, float] = {}
    for t in trials:
        if t.state.is_terminal():
            continue
        tail = back.tails.get(t.id)
        value = tail.reports[steps][0] if tail and steps in tail.reports else None
        if value is None:
            value = dict(curve(t.id)).get(steps)
        if value is not None and math.isfinite(value):
            out[t.id] = value
    return out


def best(trials: list[Any], done: dict[str, float], direction: str) -> tuple[str, float] | None:
    """The job's best trial and metric: of its completed trials and those of ``done`` (ties:
    the earlier trial)."""
    sign = 1.0 if direction == "maximize" else -1.0
    ranked = [
        (t, v)
        for t in trials
        if (v := done.get(t.id, t.final_metric)) is not None
        and (t.id in done or t.state == "completed")
    ]
    if not ranked:
        return None
    t, v = max(ranked, key=lambda p: (sign * p[1], -p[0].number))
    return t.id, v


def close_open(
    store: Any, job: Any, trials: list[Any], back: ReadBack, done: dict[str, float], steps: int
) -> None:
    """Close each open trial: ``completed`` with its final metric (``done``), else
    ``cancelled``; each at the furthest step and newest checkpoint its unread events name."""
    now = time.time()
    for t in trials:
        if t.state.is_terminal():
            continue
        fields: dict[str, Any] = {"ended_at": now}
        tail = back.tails.get(t.id)
        if tail is not None:
            fields.update(_progress(t, tail, job.direction))
        if t.id in done:
            fields.update(state="completed", final_metric=done[t.id], step=steps, metric=done[t.id])
            if tail is not None and steps in tail.reports:
                store.add_event(
                    t.job_id,
                    "result_recovered",
                    now,
                    trial_id=t.id,
                    instance_id=tail.reports[steps][2],
                    step=steps,
                    metric=done[t.id],
                    message=(
                        f"its result is its report at step {steps}, read by `spotwise cancel` "
                        "from the events its instance wrote after the orchestrator had died"
                    ),
                )
        else:
            fields["state"] = "cancelled"
        store.update_trial(t.id, **fields)


def keep_reports(store: Any, back: ReadBack) -> None:
    """Add each trial's unread reports with a finite metric as its observations (its curve):
    on the wall clock of the trial's own record, no market time (not seen as they came)."""
    for trial_id, tail in back.tails.items():
        for step in sorted(tail.reports):
            value, wall, launch_id = tail.reports[step]
            if value is not None:
                store.add_observation(trial_id, step, value, wall, instance_id=launch_id)


def with_said(text: str, back: ReadBack, done: dict[str, float], released: dict[str, Any]) -> str:
    """The cancel's words (``text``, :func:`~spotwise.release_text.released_text`) with what
    the read added: the trials completed from their events, and a folder that could not be
    read (once), before the closing note on unknown on-demand prices, which stays last."""
    from spotwise.release_reference import _unknown_text

    read = sorted(i for i in done if i in back.tails)
    said = ""
    if read:
        said += (
            f"; {len(read)} trial(s) finished after the orchestrator died, completed with the "
            f"result in their events: {', '.join(read)}"
        )
    if back.unread:
        said += f"; {back.unread}: closed at the step last recorded"
    tail = _unknown_text(released.get("on_demand_unknown", []))
    if tail and text.endswith(tail):
        return text[: -len(tail)] + said + tail
    return text + said


def _progress(t: Any, tail: Tail, direction: str) -> dict[str, Any]:
    """The row's step, metric and checkpoint, as the orchestrator would have written them."""
    out: dict[str, Any] = {}
    later = [s for s in tail.reports if s > t.step]
    if later:
        step = max(later)
        out["step"], out["metric"] = step, tail.reports[step][0]
        values = [v for s, (v, _, _) in tail.reports.items() if s > t.step and v is not None]
        if t.best_metric is not None:
            values.append(t.best_metric)
        if values:
            out["best_metric"] = max(values) if direction == "maximize" else min(values)
    if tail.checkpoint > t.checkpoint_step:
        out["checkpoint_step"] = tail.checkpoint
    return out


def _tail(found: dict[int, list[dict[str, Any]]], lives: list[Any]) -> Tail:
    """The reports (each step's newest: the newest attempt's, then the latest in its file) and
    the newest checkpoint of a trial's attempts' events."""
    tail = Tail()
    for attempt in sorted(found):
        launch_id = lives[attempt].id if attempt < len(lives) else lives[-1].id
        for rec in found[attempt]:
            step = record_step(rec.get("step"))
            if step is None:
                continue
            if rec.get("type") == "checkpoint":
                tail.checkpoint = max(tail.checkpoint, step)
            elif rec.get("type") == "report":
                wall = rec.get("time")
                at = record_metric(wall) if not isinstance(wall, bool) else None
                tail.reports[step] = (
                    record_metric(rec.get("metric")),
                    at or time.time(),
                    launch_id,
                )
    return tail


def _life(row: Any) -> Life:
    """A life of the trial's latest record, as the reader takes one: its provider and region
    (read first), an attempt number no file has (every attempt asked is read)."""
    offer = Offer(
        row.provider, row.region, row.zone, row.instance_type, Market(row.market),
        row.price_per_hour, 0.0,
    )  # fmt: skip
    return Life(row.id, row.provider_instance_id or "", offer, row.requested_at, 0, -1)


def _checkpoint_uri(spec: JobSpec, job_id: str, trial_id: str) -> str | None:
    """The trial's checkpoint URI as its orchestrator names it (a cloud job's location is a
    URI; a local folder's needs the spec's own folder, and no cloud reads it: None)."""
    where = spec.checkpoint.location
    return f"{where.rstrip('/')}/{job_id}/{trial_id}" if "://" in where else None
