"""When each part of an instance record's bill was written, and the reads `spotwise report` makes.

A cron's reports must count every dollar once over consecutive windows, so a bill is counted
in the window of the time it was *written*, never of a time in the past:

* A record's bill is written when the record closes. ``billed_at`` says when; NULL means at
  its ``ended_at`` (the orchestrator closes a record when it sees it end; every record before
  revision 0005). A caller that closes a record with an end in the past (`spotwise cancel`,
  billing a dead orchestrator's lives up to when they ran, or an instance up to when its cloud
  says it ended) dates it as written: a ``clock`` read once the write holds the lock
  (:meth:`BillWrites.rebill_instance_if_unchanged`), never a time read before it waited.
* What a closed record is billed after that (an instance found after its record closed, a
  stray the drain's last sweep bills to its launch) is a *part* of its own, dated when written
  (the update's ``billed_at``, else now), in ``extra_bills_json``: the record's columns stay
  its whole bill (what `status`, `trials` and `cancel` add up), its first bill stays in the
  window that counted it, and the part is counted in its own. :func:`stamp_bill` does this in
  :meth:`~spotwise.store.repo.Store.update_instance`, so no caller can forget it. A bill of
  another instance written to a record still open is a part too, dated with its close.

Two processes that bill the same record at once (two `spotwise cancel` of one job, or a cancel
and the drain's stray sweep) each write it with a compare-and-set, :class:`BillWrites`: only the
first applies, so a life is billed once; each then sets its trial's and job's cost to their
records' sum in one statement, so that neither misses the other's bill. A sweep bills each
instance it found (a stray, an instance that outlived its record) as a part naming it
(:data:`PART_INSTANCE`), so that a sweep whose compare-and-set lost can tell which instances
the other billed and bill the launch's others itself (:class:`InstanceBills`, review-al F7).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import func, update
from sqlmodel import Session, col, select

from spotwise.errors import NotFoundError, StoreError
from spotwise.store.models import TERMINAL_INSTANCE_STATES, InstanceRow, Job, Trial
from spotwise.store.rows import instance_state, plain

RowT = TypeVar("RowT", Job, Trial)

#: The columns of a record's bill; a change of one on a closed record is a part of its own.
BILL_COLUMNS = ("cost_usd", "on_demand_cost_usd", "market_seconds")
#: The key of a part written while its record was open (its close dates it).
OPEN_PART = "open"
#: The key of a part of a record's bill that names the instance it billed (a sweep's bill of a
#: stray or of an instance that outlived its record: :class:`InstanceBills`).
PART_INSTANCE = "instance"


def extra_bills(row: Any) -> list[dict[str, float]]:
    """The dated parts of ``row``'s bill written after it closed (oldest first)."""
    text = getattr(row, "extra_bills_json", None)
    parts: list[dict[str, float]] = json.loads(text) if text else []
    return parts


def stamp_bill(
    row: InstanceRow,
    fields: dict[str, Any],
    now: float | None = None,
    part_of: str | None = None,
    parts: Mapping[str, Mapping[str, float]] | None = None,
) -> None:
    """Date the bill an update of ``row`` writes (``fields``, changed in place; ``billed_at``
    in them: when this bill was written). Closing the record: its ``billed_at`` as given (none:
    NULL, its end). On a record already closed, a change of its bill is appended to its
    ``extra_bills_json`` as a part dated ``billed_at`` (else ``now``), naming the instance it
    bills (``part_of``) when given, and the record's own ``billed_at`` is pinned (to its end as
    it was) so that moving its ``ended_at`` does not move its first bill. ``parts``: instance
    → bill columns added on top of ``fields``' bill, each a part naming it.

    On a record still open, a bill naming its instance is a part too (a stray the drain billed
    to a leftover's record): the own life's bill is what the parts naming others leave
    (:func:`own_bill`, s22 A2 gap 2); the record's close dates them with its first bill (an
    open record is counted in `spotwise report` from its close)."""
    at = fields.pop("billed_at", None)
    when = float(at if at is not None else (time.time() if now is None else now))
    named: list[dict[str, Any]] = [
        {"at": when, **{k: float(v.get(k, 0.0)) for k in BILL_COLUMNS}, PART_INSTANCE: iid}
        for iid, v in (parts or {}).items()
        if any(v.values())
    ]
    for k in BILL_COLUMNS if named else ():  # on top of the bill the fields set
        fields[k] = float(fields.get(k, getattr(row, k))) + sum(p[k] for p in named)
    moved = {k: float(fields[k]) - float(getattr(row, k)) for k in BILL_COLUMNS if k in fields}
    rest = {"at": when, **{k: moved.get(k, 0.0) - sum(p[k] for p in named) for k in BILL_COLUMNS}}
    rest |= {PART_INSTANCE: part_of} if part_of is not None else {}
    more = [rest] if any(rest[k] for k in BILL_COLUMNS) else []
    old = extra_bills(row)
    if row.state in TERMINAL_INSTANCE_STATES:
        if more or named:
            fields["extra_bills_json"] = json.dumps([*old, *more, *named])
            if row.billed_at is None:
                fields["billed_at"] = row.ended_at if row.ended_at is not None else when
    elif fields.get("state", row.state) in TERMINAL_INSTANCE_STATES:  # its close
        fields["billed_at"] = at
        close = at if at is not None else fields.get("ended_at", row.ended_at)
        first = when if close is None else float(close)  # the close's first bill's date
        if named or any(OPEN_PART in p for p in old):
            out = [_dated(p, first) if OPEN_PART in p else p for p in old]
            fields["extra_bills_json"] = json.dumps([*out, *(_dated(p, first) for p in named)])
    elif named or (more and part_of is not None):  # a bill naming its instance, record open
        mine = more if part_of is not None else []  # an unnamed bill of it: no part (its own)
        fields["extra_bills_json"] = json.dumps(
            [*old, *({**p, OPEN_PART: True} for p in [*mine, *named])]
        )


def billed_instances(row: InstanceRow) -> set[str]:
    """The instances the parts of ``row``'s bill name (:data:`PART_INSTANCE`)."""
    return {str(p[PART_INSTANCE]) for p in extra_bills(row) if PART_INSTANCE in p}


def parts_since(seen: InstanceRow, fresh: InstanceRow) -> list[dict[str, Any]] | None:
    """The parts of record ``fresh``'s bill written since it was read as ``seen``, each naming
    its instance; None when what changed cannot be told apart by instance: the record was open
    (a close writes no part), or a bill names none (an older spotwise's) or is not all in
    parts."""
    shut = TERMINAL_INSTANCE_STATES
    if seen.state not in shut or fresh.state not in shut:
        return None
    before, after = extra_bills(seen), extra_bills(fresh)
    added: list[dict[str, Any]] = after[len(before) :]
    if after[: len(before)] != before or any(PART_INSTANCE not in p for p in added):
        return None
    for k in BILL_COLUMNS:
        moved = float(getattr(fresh, k)) - float(getattr(seen, k))
        if not math.isclose(moved, sum(float(p.get(k, 0.0)) for p in added), abs_tol=1e-9):
            return None
    return added


def decided_since(seen: InstanceRow, fresh: InstanceRow) -> set[str] | None:
    """The instances another process billed to record ``fresh`` since it was read as ``seen``
    (:func:`parts_since`'s); None when what changed cannot be told apart by instance.

    A record read open and closed since (a `spotwise cancel` that settled the failed launch the
    drain could not confirm clean while the drain billed its strays): a cancel's close names
    the launch's other instances it billed in parts, and bills the one it found by the
    launch's tag (where the launch had no instance nor start) as the record's own life, from
    the start it writes to its end; so where the record named neither when read and its own
    life's seconds (:func:`own_bill`) are exactly that life, the close billed the instance it
    names. Any other change of a record read open: None (which instance cannot be told)."""
    shut = TERMINAL_INSTANCE_STATES
    if seen.state in shut:
        parts = parts_since(seen, fresh)
        return None if parts is None else {str(p[PART_INSTANCE]) for p in parts}
    before, after = extra_bills(seen), extra_bills(fresh)
    added: list[dict[str, Any]] = after[len(before) :]
    if [_dated(p, None) for p in after[: len(before)]] != [_dated(p, None) for p in before]:
        return None  # (a close dates them: no change)
    if any(PART_INSTANCE not in p for p in added):
        return None
    named = {str(p[PART_INSTANCE]) for p in added}

    def unparted(k: str) -> float:  # what the bill moved by, outside the parts written since
        moved = float(getattr(fresh, k)) - float(getattr(seen, k))
        return moved - sum(float(p.get(k, 0.0)) for p in added)

    if all(math.isclose(unparted(k), 0.0, abs_tol=1e-9) for k in BILL_COLUMNS):
        return named  # no bill but the named parts (a close that billed nothing, no close)
    iid, start, end = fresh.provider_instance_id, fresh.launched_at, fresh.ended_at
    if fresh.state not in shut or seen.provider_instance_id or seen.launched_at is not None:
        return None
    if not iid or start is None or end is None:
        return None
    life_s = own_bill(fresh, iid)["market_seconds"]  # less the parts of the launch's others
    if not math.isclose(life_s, end - start, abs_tol=1e-3):  # a life from another start
        return None
    return named | {iid}


def _dated(part: dict[str, Any], at: float | None) -> dict[str, Any]:
    """A part written while its record was open, dated ``at`` (its close; None: undated)."""
    out = {k: v for k, v in part.items() if k not in ("at", OPEN_PART)}
    return out if at is None else {**out, "at": at}


def own_bill(row: InstanceRow, instance_id: str | None) -> dict[str, float]:
    """Record ``row``'s bill columns less the parts naming an instance other than
    ``instance_id`` (a stray's, a retried create's, billed to the same launch): what its bill
    holds of the life of its own instance ``instance_id``."""
    others = [p for p in extra_bills(row) if p.get(PART_INSTANCE) not in (None, instance_id)]
    return {
        k: float(getattr(row, k)) - sum(float(p.get(k, 0.0)) for p in others) for k in BILL_COLUMNS
    }


def _written(row: RowT | None, what: str, key: str) -> RowT:
    """The row an UPDATE just wrote (read back in its transaction); none: it does not exist."""
    if row is None:
        raise NotFoundError(f"{what} {key!r} not found")
    return row


def _lock(s: Session, model: type[Job] | type[Trial] | type[InstanceRow], key: str) -> None:
    """Take the lock that writing ``model``'s row ``key`` waits for, first in this transaction
    (SQLite: the database's write lock, ``BEGIN IMMEDIATE``; PostgreSQL: the row's, ``SELECT
    ... FOR UPDATE``), so that what the write reads or dates is read once it holds it. Under
    READ COMMITTED an ``UPDATE ... SET cost_usd = (SELECT SUM ...)`` reads the records as of
    its own start: one started while another process had closed a record and summed the row,
    not yet committed, waited for the row and then wrote its older sum over the other's
    (review-al F6). Locked first, the UPDATE starts, and reads, after the other commits."""
    if s.get_bind().dialect.name == "sqlite":  # pysqlite begins no transaction before it
        s.connection().exec_driver_sql("BEGIN IMMEDIATE")
    else:
        s.exec(select(model.id).where(col(model.id) == key).with_for_update())


class BillReads:
    """The reads of `spotwise report` (mixed into :class:`~spotwise.store.repo.Store`)."""

    def _scope(self, action: str) -> AbstractContextManager[Session]:  # Records's
        raise NotImplementedError

    def jobs_by_id(self, ids: Iterable[str]) -> dict[str, Job]:
        """The jobs of ``ids`` (exact ids; one query per 500), by id; an unknown id is left out."""
        wanted = sorted(set(ids))
        out: dict[str, Job] = {}
        with self._scope("reading jobs") as s:
            for i in range(0, len(wanted), 500):
                chunk = wanted[i : i + 500]
                out.update((j.id, j) for j in s.exec(select(Job).where(col(Job.id).in_(chunk))))
        return out


class BillWrites:
    """Compare-and-set writes of a record's bill (mixed into :class:`~spotwise.store.repo.Store`):
    each is one conditional UPDATE, applied only while the record is as the caller read it, and
    says whether it was (the row as written, else None: the caller bills nothing). And the
    writes that set a trial's or a job's cost to its records' sum, each one UPDATE whose sum is
    read as it writes, on its row locked first (a sum read first, then written, lost a bill
    another process closed in between until the next cancel)."""

    def _scope(self, action: str) -> AbstractContextManager[Session]:  # Records's
        raise NotImplementedError

    def rebill_instance_if_unchanged(
        self,
        seen: InstanceRow,
        part_of: str | None = None,
        parts: Mapping[str, Mapping[str, float]] | None = None,
        clock: Callable[[], float] | None = None,
        **fields: Any,
    ) -> InstanceRow | None:
        """Update record ``seen`` (its bill, as :meth:`~spotwise.store.repo.Store.update_instance`
        does: a closed record's change is a dated part, :func:`stamp_bill`, naming the instance
        ``part_of`` when given; ``parts``: more, each naming its instance) only while its state,
        bill and instance are still as ``seen`` read them. None: another process billed it
        since (two cancels that found and terminated the same outlived instance: the second
        adds nothing; a cancel closing a record the drain billed a stray to meanwhile).

        The bill is dated (``billed_at`` from ``clock``, else as given; a part with none: the
        wall clock) once this write holds the record's lock (:func:`_lock`), so that it is
        written within a commit of its date: `spotwise report`'s margin (``SETTLE_S``) covers
        that, not a loop's or a lock wait's time (s23: a cancel dated every record's bill
        before its loop; the records written over a minute later were in no window)."""
        kept: tuple[str, ...] = (*BILL_COLUMNS, "state", "ended_at", "billed_at")
        kept += ("extra_bills_json", "provider_instance_id", "launched_at")
        same = [getattr(InstanceRow, k) == getattr(seen, k) for k in kept]
        with self._scope(f"updating instance {seen.id!r}") as s:
            _lock(s, InstanceRow, seen.id)
            fields |= {"billed_at": clock()} if clock is not None else {}
            stamp_bill(seen, fields, part_of=part_of, parts=parts)  # from the row as read
            if "state" in fields:
                fields["state"] = instance_state(fields["state"])
            columns = InstanceRow.__table__.columns.keys()  # type: ignore[attr-defined]
            for name in fields:  # as update_instance says it
                if name == "id" or name not in columns:
                    valid = ", ".join(c for c in columns if c != "id")
                    raise StoreError(f"instance has no updatable field {name!r}; valid: {valid}")
            values = {k: plain(v) for k, v in fields.items()}
            stmt = update(InstanceRow).where(col(InstanceRow.id) == seen.id, *same).values(**values)
            if s.exec(stmt.execution_options(synchronize_session=False)).rowcount != 1:
                return None
            return s.get(InstanceRow, seen.id)

    def update_trial_cost_to_lives(self, trial_id: str) -> float:
        """Set the trial's ``cost_usd`` to the sum of its instance records' (its lives'), in
        one UPDATE; returns it. Whichever process writes last leaves every bill closed
        before it wrote: none is lost to a sum read before another's close landed."""
        lives = select(func.coalesce(func.sum(InstanceRow.cost_usd), 0.0)).where(
            col(InstanceRow.trial_id) == trial_id
        )
        stmt = (
            update(Trial).where(col(Trial.id) == trial_id).values(cost_usd=lives.scalar_subquery())
        )
        with self._scope(f"summing trial {trial_id!r}'s cost") as s:
            _lock(s, Trial, trial_id)
            s.exec(stmt.execution_options(synchronize_session=False))
            return float(_written(s.get(Trial, trial_id), "trial", trial_id).cost_usd)

    def update_job_cost_to_records(self, job_id: str) -> Job:
        """Set the job's ``cost_usd`` and ``on_demand_cost_usd`` to the sums of its instance
        records', in one UPDATE (as :meth:`update_trial_cost_to_lives`); returns the job."""

        def total(column: Any) -> Any:
            one = select(func.coalesce(func.sum(column), 0.0))
            return one.where(col(InstanceRow.job_id) == job_id).scalar_subquery()

        sums = {
            "cost_usd": total(InstanceRow.cost_usd),
            "on_demand_cost_usd": total(InstanceRow.on_demand_cost_usd),
        }
        stmt = update(Job).where(col(Job.id) == job_id).values(**sums)
        with self._scope(f"summing job {job_id!r}'s cost") as s:
            _lock(s, Job, job_id)
            s.exec(stmt.execution_options(synchronize_session=False))
            return _written(s.get(Job, job_id), "job", job_id)


@dataclass(frozen=True)
class Billed:
    """What :meth:`InstanceBills.bill` did for one instance."""

    written: InstanceRow | None  # the record as written here; None: another process billed it
    others_usd: float  # what other processes added to the record, first seen billing this one


class InstanceBills:
    """One sweep's bills of the instances it terminated to their launches' records (the drain's
    stray sweep, `spotwise cancel`'s sweep of a finished job), decided per instance, each by
    its own compare-and-set (review-al F7: one lost compare-and-set left the launch's later
    instances unbilled, assumed billed by the other process, which may have listed only the
    first). ``rows``: each record as read before the listing, then as last written or read
    here. An instance is billed as a part naming it; where the write loses, the record is read
    again: an instance a part written since names was billed by the other process (never
    again here), and so was the instance a cancel's close of a record read open names, where
    that close billed it alone (:func:`decided_since`); the others are billed on the record as
    now read. Where a change cannot be told apart by instance (an older spotwise's part naming
    none; any other bill of a record read open), the record's instances are left to the other
    process, as before."""

    TRIES = 8  # writes lost to other instances' bills before one is left to the other process

    def __init__(self, store: Any, rows: dict[str, InstanceRow]) -> None:
        self.store, self.rows = store, rows
        self.blind: set[str] = set()  # records changed by a bill that names no instance
        # record → instances another process billed to it since it was read: its parts', and a
        # cancel's close of the record read open (:func:`decided_since`)
        self.closed_on: dict[str, set[str]] = {}

    def elsewhere(self, row_id: str, instance_id: str) -> bool:
        """The instance was billed to the record (by another process, or by this sweep), or may
        have been (:attr:`blind`): it is not billed (again) here."""
        if row_id in self.blind or instance_id in self.closed_on.get(row_id, ()):
            return True
        return instance_id in billed_instances(self.rows[row_id])

    def bill(
        self,
        row_id: str,
        instance_id: str,
        add: Mapping[str, float],
        fields: Callable[[InstanceRow], dict[str, Any]] = lambda row: {},
        clock: Callable[[], float] | None = None,
    ) -> Billed:
        """Add ``add`` (bill columns) and set ``fields(record)`` on record ``row_id``, as a part
        naming ``instance_id`` (dated by ``clock`` as it is written: see
        :meth:`BillWrites.rebill_instance_if_unchanged`), unless another process billed that
        instance to it."""
        seen, others = self.rows[row_id], 0.0
        for _ in range(self.TRIES):
            if self.elsewhere(row_id, instance_id):
                return Billed(None, others)
            values = {k: float(getattr(seen, k)) + v for k, v in add.items()}
            done = self.store.rebill_instance_if_unchanged(
                seen, part_of=instance_id, clock=clock, **fields(seen), **values
            )
            if done is not None:
                self.rows[row_id] = done
                return Billed(done, others)
            fresh = self.store.get_instance(row_id)
            others += float(fresh.cost_usd) - float(seen.cost_usd)
            decided = decided_since(seen, fresh)
            if decided is None:
                self.blind.add(row_id)
            else:
                self.closed_on.setdefault(row_id, set()).update(decided)
            self.rows[row_id] = seen = fresh
        self.blind.add(row_id)  # still changing: left to the other process, as before
        return Billed(None, others)
