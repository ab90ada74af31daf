"""Which failed trials of a job a broken command killed, for `spotwise resume` to run again.

A run of a job whose command was broken (a typo, a missing module, a script that exits at
import) ends by the rule "two failures, no step reported" (``TrialBook._broken``): its failed
trials died before the command did anything with their parameters, so their failures say
nothing of their points. Once the script is mended, a resume queues each of them again with
its own id and parameters (as an unfinished trial is), instead of keeping it failed (short of
the spec's ``trials``) and telling the search its point is the worst seen (steering it away
from the seeded first points). Nothing new is launched: they are trials the job already has.

A failed trial qualifies when, all read from the store:

* its last failure was its own process's (an exit code: the error events' ``exit_code``; a
  cloud failure, an instance gone without an exit code, keeps its end);
* the run it failed in (runs are cut by the ``resumed`` events) is one the rule judged broken:
  at least two trials failed in it and no trial reported a step past 0 in it (an observation
  of a life launched in that run; one whose life cannot be placed counts in every run);
* it made no progress itself in that run: its step and checkpoint are where its first launch
  of that run resumed it (a NaN report or a checkpoint at its last step shows the command ran).

Which trials' last failure was their own process's, and why each stopped early trial stopped,
are read from the job's events by :func:`endings` (`spotwise trials` shows the reasons).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from spotwise.states import TrialState


def command_killed(
    events: Sequence[Any],
    rows: Sequence[Any],
    observations: Mapping[str, Sequence[Any]],
    crashed: Collection[str],
) -> set[str]:
    """Ids of the failed trials (``rows``, the store's) that a broken command killed before it
    did anything (see the module's docstring). ``events``: the job's, in the order recorded;
    ``observations``: each trial's; ``crashed``: the trials whose last failure had an exit
    code."""
    cuts = [e.id or 0 for e in events if e.kind == "resumed"]

    def run_of(event: Any) -> int:
        return bisect_left(cuts, event.id or 0)

    last_run: dict[str, int] = {}  # each trial's run: where its last event (its end) lies
    starts: dict[tuple[str, int], int] = {}  # (trial, run) → the step its first launch resumed
    launch_run: dict[str, int] = {}  # launch id → its run
    for e in events:
        if e.trial_id is None:
            continue
        run = last_run[e.trial_id] = run_of(e)
        if e.kind == "launch" and e.instance_id is not None:
            launch_run[e.instance_id] = run
            resume_step = e.detail.get("resume_step", 0)
            if isinstance(resume_step, int) and not isinstance(resume_step, bool):
                starts.setdefault((e.trial_id, run), resume_step)
    stepped: set[int] = set()  # runs in which a trial reported a step past 0
    for obs in observations.values():
        for o in obs:
            if o.step > 0:
                placed = launch_run.get(o.instance_id or "")
                if placed is None:  # a life no launch event places: no run can be judged broken
                    return set()
                stepped.add(placed)
    failed_in: dict[int, list[Any]] = {}
    for row in rows:
        if TrialState(row.state) is TrialState.FAILED and row.id in last_run:
            failed_in.setdefault(last_run[row.id], []).append(row)
    killed: set[str] = set()
    for run, failed in failed_in.items():
        if run in stepped or len(failed) < 2:
            continue
        for row in failed:
            start = starts.get((row.id, run))
            if row.id not in crashed or start is None:
                continue
            if row.step <= start and row.checkpoint_step <= start:
                killed.add(row.id)
    return killed


def endings(store: Any, job_id: str) -> tuple[dict[str, str], set[str]]:
    """From the job's events: why each trial was stopped early, by its first stop in the run
    that stopped it (a limit reaching it later does not count; a resume that queued it again
    forgets the earlier run's), and which trials' last failure was their own process's (an
    exit code; not an instance that vanished)."""
    stops = store.events(job_id, kind="stop_early")
    resumes = store.events(job_id, kind="resumed")
    stopped_for: dict[str, str] = {}
    for e in sorted([*stops, *resumes], key=lambda e: e.id or 0):
        if e.kind == "resumed":
            for tid in e.detail.get("requeued", []):
                stopped_for.pop(tid, None)
        elif e.trial_id is not None:
            stopped_for.setdefault(e.trial_id, str(e.detail.get("reason")))
    crashed: set[str] = set()
    for e in store.events(job_id, kind="error"):  # in order: the last one of a trial decides
        if e.trial_id is not None and "exit_code" in e.detail:
            if e.detail["exit_code"] is None:
                crashed.discard(e.trial_id)
            else:
                crashed.add(e.trial_id)
    return stopped_for, crashed
