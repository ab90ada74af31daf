"""``spotwise report``: what was spent, on what, against on-demand, and what may still be billed.

Written for cron jobs: one call reads the store, the rest is arithmetic on its rows.

* Every instance life is counted once, in the window in which its bill was **written**: when
  its record closed (usually when it ended; a record `spotwise cancel` closes hours later, with
  an end in the past, when the cancel ran), never back-dated into a window a report has
  already printed. What a closed record is billed later (an instance found after it closed)
  is a part of its own, counted in the window in which it was written
  (:mod:`spotwise.store.bills`). So consecutive windows, each starting where the previous one
  ended, count every dollar once. Windows are half-open, ``(since, until]``: a bill written
  exactly on a boundary is in one window. A window ending now ends a minute before it
  (:func:`~spotwise.units.report_window`): a bill is dated before its write commits.
* Lives that have not ended (a job still running, or an instance its job's drain could not
  terminate) are listed apart as **held**, with their hourly price: they are the money that is
  still flowing. One whose job has finished, or whose orchestrator has stopped, is a
  **leftover**: ``spotwise cancel JOB`` releases it. (An orchestrator recorded on another
  machine, with a shared database, cannot be judged from here and is taken for running.)
* Lives of jobs on the ``local`` provider were billed by a *replayed* market (their offers
  still name the cloud the trace came from, e.g. ``aws``): their dollars are simulated, never
  added to real ones. ``totals`` and ``groups`` count the real clouds' lives only (the money);
  the replayed lives have their own ``replay`` section with the same fields (and their
  provider shown as ``aws (replay)``).
* ``hours`` is instance time: every second a life ran, refunded ones included (market time on
  a replay). ``billed_hours`` is the time charged for, each life under its own provider's
  billing rule (:mod:`spotwise.providers.billing`; a replayed life under the rule its replay
  bills by): a spot instance AWS revokes in its first hour is refunded (0 s billed), a short
  life is billed its minimum (60 s on AWS and GCP). ``cost_usd`` / ``billed_hours`` is the
  average price paid; ``cost_usd`` / ``hours`` is not a price.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spotwise.bill_parts import LifeRow, Piece, pieces
from spotwise.errors import SpecError, did_you_mean
from spotwise.job_facts import budget_of as budget_of  # `costs.budget_of`, as before
from spotwise.job_facts import simulated as is_simulated
from spotwise.states import FINISHED_JOB_STATES
from spotwise.units import SETTLE_S, report_window
from spotwise.units import window as window  # `costs.window`, as before

GROUPS = ("provider", "job", "instance-type", "zone", "market", "day")
_wait = time.sleep  # how `report` waits for a window's last bills (tests replace it)


@dataclass(frozen=True)
class JobInfo:
    """What the report needs of a job: its state, whether its orchestrator runs on this
    machine, and whether it traded on the replayed market (simulated dollars)."""

    state: str
    running: bool
    simulated: bool
    speedup: float = 1.0  # market seconds per wall second (the replay's; 1 on a cloud)
    billing: str | None = None  # the billing rule a replay bills by (None: the life's provider)
    # its budget cap and, when its whole cost ended above it, by how much (:func:`budget_of`)
    budget: Mapping[str, float] | None = None
    # wall time its orchestrator was last known alive (as `cancel` bills a dead replay's lives,
    # :func:`~spotwise.last_alive.last_alive`; else its end): a replay's market, and its trial
    # processes, stopped with it (review-af F6)
    alive_at: float | None = None


def group_key(row: LifeRow, by: str, simulated: bool = False, at: float | None = None) -> str:
    """The value of ``row`` that ``--by`` groups on; by day, the UTC day of ``at`` (when the
    bill was written: the windows' clock), else of its end."""
    provider = f"{row.provider} (replay)" if simulated else row.provider
    if by == "provider":
        return provider
    if by == "job":
        return row.job_id
    if by == "instance-type":
        return f"{provider}:{row.instance_type}"
    if by == "zone":
        return f"{provider}:{row.zone}"
    if by == "market":
        return row.market
    if by == "day":  # days are (00:00, 00:00], as windows are: a bill at 00:00 is the day's end
        when = at if at is not None else row.ended_at
        day = math.ceil((when or 0.0) / 86400.0) - 1 if when else 0  # review-ah F7
        return datetime.fromtimestamp(day * 86400.0, UTC).strftime("%Y-%m-%d")
    raise not_a_grouping(by)


def not_a_grouping(by: str) -> SpecError:
    """``--by``'s one-line error for ``by`` (no :data:`GROUPS` member), with a did-you-mean."""
    close = did_you_mean(by, GROUPS)
    return SpecError(f"--by: {by!r} is not a grouping{close}; use one of {', '.join(GROUPS)}")


def tally(
    rows: Iterable[LifeRow | Piece], billing: Mapping[str, str | None] | None = None
) -> dict[str, Any]:
    """Totals of ended lives (or of parts of their bills, :class:`Piece`: a life is counted
    with the part written when it closed): instance and billed hours, cost, on-demand cost of
    the same seconds, what was saved. ``billing``: job id → the billing rule its lives were
    charged by (a replay's; absent or None: each life's provider's)."""
    rules = billing or {}
    got = [r if isinstance(r, Piece) else pieces(r, rules.get(r.job_id))[0] for r in rows]
    lives = [p for p in got if p.life]
    # floats from 0.0: with no lives a total is 0.0 like any other, never an int 0
    cost = sum((p.cost_usd for p in got), 0.0)
    od = sum((p.on_demand_cost_usd for p in got), 0.0)
    return {
        "lives": len(lives),
        "revoked": sum(1 for p in lives if p.row.end_reason == "revoked"),
        # instance time, refunded seconds included (kept as it was: scripts read it)
        "hours": sum((p.market_seconds for p in got), 0.0) / 3600.0,
        # the time charged for: what $ / hours must be divided by to get a price
        "billed_hours": sum((p.billed_s for p in got), 0.0) / 3600.0,
        "cost_usd": cost,
        "on_demand_cost_usd": od,
        "saved_usd": od - cost,
        # no on-demand reference (nothing ran long enough to be billed): no percentage
        "saved_pct": (1.0 - cost / od) * 100.0 if od > 0 else None,
    }


def section(
    rows: Iterable[Piece],
    by: str,
    simulated: bool,
    billing: Mapping[str, str | None] | None = None,
    budgets: Mapping[str, Mapping[str, float] | None] | None = None,
) -> dict[str, Any]:
    """``totals`` and ``groups`` of billed parts that are all real or all replayed. By job,
    a job's group with a budget cap (``budgets``: job id → :func:`budget_of`) carries it as
    ``budget_usd``, and ``exceeded_usd`` when the job's whole cost ended above it."""
    rows = list(rows)
    groups: dict[str, list[Piece]] = {}
    for p in rows:
        groups.setdefault(group_key(p.row, by, simulated, p.at), []).append(p)
    out = [{"key": k, **tally(v, billing)} for k, v in sorted(groups.items())]
    for g in out if by == "job" else []:
        if budget := (budgets or {}).get(g["key"]):
            g["budget_usd"] = budget["max_cost_usd"]
            if "exceeded_usd" in budget:
                g["exceeded_usd"] = budget["exceeded_usd"]
    return {
        "totals": {**tally(rows, billing), "jobs": len({p.row.job_id for p in rows})},
        "groups": out,
    }


def summarize(
    ended: Iterable[LifeRow],
    held: Iterable[LifeRow],
    jobs: Mapping[str, JobInfo],
    *,
    by: str,
    since: float | None,
    now: float,
    until: float | None = None,
) -> dict[str, Any]:
    """The report from the store's rows; ``jobs`` describes every job of those rows. Of the
    ``ended`` lives' bills it counts the parts written in ``(since, until]`` (``since`` None:
    any time; ``until`` None: ``now``, when the held lives are measured; :func:`pieces`): the
    real clouds' in ``totals`` and ``groups``, the replayed market's apart in ``replay``.
    ``settled``: the window ends :data:`~spotwise.units.SETTLE_S` or more before ``now`` (every
    bill dated in it was written when it was read: its numbers are final)."""
    sim = frozenset(j for j, info in jobs.items() if info.simulated)
    lo = float("-inf") if since is None else since
    hi = now if until is None else until
    billing = {j: info.billing for j, info in jobs.items()}
    budgets = {j: info.budget for j, info in jobs.items()}
    every = [  # each record's bill as written, split once into its dated pieces
        p
        for r in ended
        if r.ended_at is not None or getattr(r, "billed_at", None) is not None
        for p in pieces(r, billing.get(r.job_id))
    ]
    got = [p for p in every if lo < p.at <= hi]
    # written after the window's end, up to the read (the default's last minute): not in this
    # window but the next; said, so a report right after a job does not read as "nothing"
    later = [p for p in every if hi < p.at <= now]
    real = section((p for p in got if p.row.job_id not in sim), by, False, billing, budgets)
    replay = section((p for p in got if p.row.job_id in sim), by, True, billing, budgets)
    held_rows: list[dict[str, Any]] = []
    for r in sorted(held, key=lambda r: (r.requested_at, r.id)):
        info = jobs.get(r.job_id, JobInfo("unknown", running=False, simulated=False))
        leftover = info.state in FINISHED_JOB_STATES or not info.running
        start = r.launched_at if r.launched_at is not None else r.requested_at
        # a leftover of a replay: its market stopped with its orchestrator, so its market
        # hours stop there too, not grow at the replay's speed until `cancel` (review-af F6)
        end = now
        if info.simulated and leftover and info.alive_at is not None:
            end = min(now, max(start, info.alive_at))
        held_rows.append(
            {
                "launch_id": r.id,
                "job_id": r.job_id,
                "job_state": info.state,
                "provider": f"{r.provider} (replay)" if info.simulated else r.provider,
                "simulated": info.simulated,
                "zone": r.zone,
                "instance_type": r.instance_type,
                "market": r.market,
                "instance_id": r.provider_instance_id,
                "state": r.state,
                "usd_per_hour": r.price_per_hour,
                # market hours, as the ended lives' are (a replay's clock runs faster)
                "held_hours": max(0.0, end - start) * info.speedup / 3600.0,
                "leftover": leftover,
                "next": f"spotwise cancel {r.job_id}" if leftover else None,
            }
        )
    return {
        "since": since,
        "until": hi,
        "now": now,
        "settled": hi + SETTLE_S <= now + 1e-6,
        "after_until": {
            "cost_usd": sum((p.cost_usd for p in later if p.row.job_id not in sim), 0.0),
            "simulated_usd": sum((p.cost_usd for p in later if p.row.job_id in sim), 0.0),
        },
        "by": by,
        # real clouds only: money; the replayed market's simulated dollars are never added in
        "totals": real["totals"],
        "groups": real["groups"],
        "replay": replay,
        "held": held_rows,
        # what real clouds charge now for what is still held; the replay's, apart (not money)
        "held_usd_per_hour": sum((h["usd_per_hour"] for h in held_rows if not h["simulated"]), 0.0),
        "held_simulated_usd_per_hour": sum(
            (h["usd_per_hour"] for h in held_rows if h["simulated"]), 0.0
        ),
        # held by a finished or orphaned job on a real cloud: may be billed (--check exits 1);
        # a replay's are apart: nothing is billed (its trial processes died with its
        # orchestrator, PR_SET_PDEATHSIG), `spotwise cancel` closes their records
        "leftovers": sum(1 for h in held_rows if h["leftover"] and not h["simulated"]),
        "simulated_leftovers": sum(1 for h in held_rows if h["leftover"] and h["simulated"]),
    }


def report_json(out: dict[str, Any]) -> dict[str, Any]:
    """The report with every key docs/json.md lists (review-af F8): each group of both
    sections carries ``budget_usd`` and ``exceeded_usd``, null where they do not apply (not
    by job, no cap, within it). :func:`summarize` sets them only by job, where they apply."""

    def sec(section: dict[str, Any]) -> dict[str, Any]:
        blank = {"budget_usd": None, "exceeded_usd": None}
        groups = [
            {**g, **{k: v for k, v in blank.items() if k not in g}} for g in section["groups"]
        ]
        return {**section, "groups": groups}

    return {**sec(out), "replay": sec(out["replay"])}


def report(
    *,
    since: str = "24h",
    by: str = "provider",
    db: str | None = None,
    now: float | None = None,
    until: str | None = None,
) -> dict[str, Any]:
    """The cost report of the bills written in a window (:func:`~spotwise.units.report_window`:
    ``since`` a duration such as ``24h``/``7d`` before ``until``, a time, or ``all``; ``until``
    a time, default a minute before now; a time given less than a minute ago is waited for),
    grouped ``by`` one of :data:`GROUPS`, with every instance still held (to ``now``)."""
    from spotwise.last_alive import last_alive
    from spotwise.liveness import orchestrator_state
    from spotwise.spec import STORED, ReplaySpec
    from spotwise.store import Store

    if by not in GROUPS:
        raise not_a_grouping(by)
    now = time.time() if now is None else now
    win = report_window(since, until, now)
    start, end = win.start, win.end
    store = Store.open_existing(db)
    try:
        if win.ready_at > now:  # a time given, less than a minute ago: its bills may be
            _wait(win.ready_at - now)  # waiting for the write lock still (review-as AS1)
            now = win.ready_at
        # one statement: a record closed while this reads is billed or held, never neither
        billed, held = store.report_rows(start)
        ended = [  # lives: launches a provider accepted (a refused one is no life, no bill),
            # and a failed launch's instance that ran until we terminated it (billed)
            r
            for r in billed
            if r.launched_at is not None or r.cost_usd > 0
        ]
        held_by = {r.job_id for r in held}
        jobs: dict[str, JobInfo] = {}
        found = store.jobs_by_id(r.job_id for r in [*ended, *held])  # one query (review-af F7)
        for job_id in {r.job_id for r in [*ended, *held]}:
            job = found[job_id] if job_id in found else store.get_job(job_id)
            providers = job.spec.get("providers", [])
            simulated = is_simulated(job.spec_json)  # as `status`/`trials` say it
            replay = (providers[0].get("replay") or {}) if simulated and providers else None
            # read back as recorded (review-af F9: a replay block from before a field was
            # dropped, validated as a new spec, failed the whole report)
            replayed = None if replay is None else ReplaySpec.model_validate(replay, context=STORED)
            state = str(getattr(job.state, "value", job.state))
            # on another machine it cannot be judged from here: not taken for gone
            running = orchestrator_state(job) != "gone"
            # a dead replay's held lives: up to when `cancel` would bill them (review-ah F12)
            alive = job.heartbeat_at
            if simulated and job_id in held_by and (state in FINISHED_JOB_STATES or not running):
                alive = last_alive(store, job, [])[0]  # its heartbeat, reports, own records
            jobs[job_id] = JobInfo(
                state=state,
                running=running,
                simulated=simulated,
                # the spec's defaults, as the job ran them (no replay block: 600x, not 1x)
                speedup=1.0 if replayed is None else replayed.speedup,
                billing=None if replayed is None else replayed.billing,  # as its lives were billed
                budget=budget_of(job.spec_json, job.cost_usd),  # the whole job's, as `status`
                alive_at=alive if alive is not None else job.ended_at,
            )
    finally:
        store.close()
    return summarize(ended, held, jobs, by=by, since=start, now=now, until=end)
