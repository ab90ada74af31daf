"""When each open record of a local job ended, for `spotwise cancel` (:func:`local_ends`).

A local trial's first process, its command, dies with its orchestrator (Linux:
``PR_SET_PDEATHSIG``); what the command started lives on in its session until the cancel kills
it. So a dead orchestrator's lives are billed up to when it was last known alive
(:func:`~spotwise.last_alive.last_alive`), and only a life whose recorded first process the
cancel still finds running is billed up to now: one whose only survivors are its helpers (a
trainer's DataLoader workers) is killed too, but had ended with its trainer (review-aw F1: at
the replay's 300x, a cancel typed an hour later billed each such life 300 market hours). Under
a wrapper (``bash train.sh``) the first process is the shell: the life whose trainer (the
process the SDK says writes its events) the cancel finds running ran on, up to now (review-az
AZ7: it was billed up to the last-alive time, its trainer called a helper). A
life the replayed market took (its ``revoked`` event) ended then (review-ax AX2: it was billed
up to the orchestrator's last record, 11928 market s, where the market took it after 1302 s,
free in AWS's first hour). Split from :mod:`spotwise.release`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spotwise.last_alive import last_alive

DIED = ", as their trial processes died with the orchestrator"


@dataclass(frozen=True)
class LocalEnds:
    """``terminated``: the instance ids killed now; ``ends``: each open record's launch id →
    the wall time its life ended (None: now); ``taken``: the launch ids the replayed market
    took (billed as revoked); ``started``: a launch id → its life's start where its record has
    none (its process was started, the record was never updated: review-aw F3); ``billed_to``:
    up to when, in words."""

    terminated: list[str]
    ends: dict[str, float | None]
    taken: set[str]
    started: dict[str, float]
    billed_to: str


def local_ends(
    store: Any, job: Any, spec: Any, rows: list[Any], orchestrator_died: bool, speedup: float
) -> LocalEnds:
    """Kill what is left of the job's recorded trial sessions and say when each of its open
    records' (``rows``) lives ended (see the module docstring)."""
    from spotwise.planner import reconcile as rec
    from spotwise.providers.local_records import survey_job

    seen = {s.launch_id: s for s in survey_job(job.id)}  # read before the kill removes them
    terminated = rec.reconcile(spec, job.id)
    killed = set(terminated)

    def instance(r: Any) -> str | None:
        return r.provider_instance_id or (seen[r.id].instance_id if r.id in seen else None)

    # killed now, though its recorded first process (the trial) was gone: its helpers outlived
    # it (no process record read: taken as the trial itself, billed up to now, as before)
    outlived = [
        r.id
        for r in rows
        if orchestrator_died
        and instance(r) in killed
        and r.id in seen
        and not seen[r.id].leader_alive
    ]
    # killed now, its first process gone (a wrapper: `bash train.sh`) while the trainer it
    # started, the process writing the trial's events, ran on: the trial ran, billed up to now
    ran_on = [
        r.id
        for r in rows
        if orchestrator_died
        and instance(r) in killed
        and r.id in seen
        and not seen[r.id].leader_alive
        and seen[r.id].trainer_alive
    ]
    outlived = [i for i in outlived if i not in ran_on]
    died = [
        r for r in rows if orchestrator_died and (instance(r) not in killed or r.id in outlived)
    ]
    # a launch whose process was started (its process record was left) though its record was
    # never updated: a life from its request (AWS bills such an instance its 60 s minimum)
    started = {r.id: r.requested_at for r in rows if r.launched_at is None and r.id in seen}
    starts = [r.launched_at or r.requested_at for r in died]
    last, which = last_alive(store, job, starts) if died else (None, "")
    dead = {r.id for r in died}
    # a life the replayed market took (its `revoked` event written) before the orchestrator
    # could close its record: billed as taken (AWS: free in its first hour), as the
    # orchestrator bills it (review-ag F2), up to when it was taken: the event's market time,
    # on the wall clock from the life's start as its `launch` event's market time (an event
    # from before b8d0d89 names no life: :func:`taken_lives` finds it)
    events = [e for e in store.events(job.id) if e.kind in ("launch", "revoked")]
    took = taken_lives(events, {r.id: r.zone for r in rows})
    began: dict[str, float] = {}
    for e in events:
        if e.kind == "launch" and e.instance_id:
            began.setdefault(e.instance_id, e.time)
    ends: dict[str, float | None] = {}
    at_taking: list[str] = []
    for row in rows:
        start = row.launched_at or row.requested_at
        ends[row.id] = max(last or start, start) if row.id in dead else None
        if row.id in took and row.id in began:  # else: no market time to start from
            ends[row.id] = max(start + (took[row.id] - began[row.id]) / speedup, start)
            at_taking.append(row.id)
    parts = []
    if any(r.id not in at_taking for r in died):
        parts.append((which or "their start (no report was recorded)") + DIED)
    if at_taking:
        ids = ", ".join(at_taking)
        one, event = ("it", "its `revoked` event")
        if len(at_taking) > 1:
            one, event = ("them", "their `revoked` events")
        parts.append(
            f"{ids} up to when the replayed market took {one} ({event})"
            if parts
            else f"when the replayed market took {ids} ({event})"
        )
    if outlived:
        names = ", ".join(instance(r) or r.id for r in rows if r.id in outlived)
        parts.append(
            f"{names}: its trial process had died with the orchestrator, its helper processes "
            "outlived it: killed"
            if len(outlived) == 1
            else f"{names}: their trial processes had died with the orchestrator, their helper "
            "processes outlived them: killed"
        )
    if ran_on:
        names = ", ".join(instance(r) or r.id for r in rows if r.id in ran_on)
        why = (
            "its first process had died with the orchestrator, but the trainer it started (the "
            "process writing its events) ran on until this cancel killed it"
            if len(ran_on) == 1
            else "their first processes had died with the orchestrator, but the trainers they "
            "started (the processes writing their events) ran on until this cancel killed them"
        )
        parts.append(f"{names} up to now: {why}" if parts else f"now ({names}: {why})")
    return LocalEnds(terminated, ends, set(took), started, "; ".join(parts) if parts else "now")


def taken_lives(events: list[Any], zones: dict[str, str]) -> dict[str, float]:
    """Each life the replayed market took (its launch id) → its ``revoked`` event's market time,
    from the job's ``launch`` and ``revoked`` events in the order recorded. The event names its
    life (``launch``) since b8d0d89; one written before names none, its instance id empty too
    (its trial had left the life: review-bc F1, such lives were billed whole). Its life is then
    the one every version says it is: its trial's latest ``launch`` recorded before it (a
    relaunch's may share its market time, so the order recorded decides, not the time), whose
    zone (its offer's; else its record's, ``zones``) is the event's, and whose market time is no
    later than the event's. One event takes one life at most, and one life one event: the
    first that names it, else the first unnamed one matched to it."""
    took: dict[str, float] = {}
    latest: dict[str, Any] = {}  # a trial → its latest `launch` event so far
    unnamed: list[tuple[Any, Any]] = []
    for e in events:
        if e.kind == "launch" and e.trial_id and e.instance_id:
            latest[e.trial_id] = e
        elif e.kind == "revoked":
            named = str(e.detail.get("launch") or e.instance_id or "")
            if named:
                took.setdefault(named, e.time)
            elif e.trial_id and e.trial_id in latest:
                unnamed.append((e, latest[e.trial_id]))
    for e, launch in unnamed:
        life = str(launch.instance_id)
        key = str(launch.detail.get("offer") or "").split(":")  # provider:zone:type:market
        zone = key[1] if len(key) == 4 and key[1] else zones.get(life)
        if life not in took and zone == e.detail.get("zone") and e.time >= launch.time:
            took[life] = e.time
    return took
