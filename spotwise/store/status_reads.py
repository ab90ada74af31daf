"""The reads of `spotwise status` (mixed into :class:`~spotwise.store.repo.Store`): what it
shows, not every row (a job may have thousands of instance lives and trials), and each job's
bills split into those its orchestrator's last save counted and those of records still open;
and `spotwise report`'s read of the records billed in its window and those still held, in one
statement (:meth:`StatusReads.report_rows`)."""

from __future__ import annotations

from collections.abc import Collection
from contextlib import AbstractContextManager

from sqlalchemy import and_, case, not_, or_
from sqlmodel import Session, col, func, select

from spotwise.store.models import TERMINAL_INSTANCE_STATES, InstanceRow, Job, Trial, TrialState


class StatusReads:
    """`spotwise status`'s reads (mixed into :class:`~spotwise.store.repo.Store`)."""

    def _scope(self, action: str) -> AbstractContextManager[Session]:  # Records's
        raise NotImplementedError

    def newest_instances(self, job_id: str, newest: int) -> tuple[list[InstanceRow], int]:
        """The job's ``newest`` latest launches (by ``requested_at``, then id) and every older
        one not ended (a state not terminal, or unknown), oldest first as :meth:`list_instances`
        orders them, and how many launches it has: three indexed reads, not every row."""
        job = select(InstanceRow).where(InstanceRow.job_id == job_id)
        held = col(InstanceRow.state).not_in(sorted(TERMINAL_INSTANCE_STATES))
        latest = job.order_by(col(InstanceRow.requested_at).desc(), col(InstanceRow.id).desc())
        count = select(func.count()).select_from(InstanceRow).where(InstanceRow.job_id == job_id)
        with self._scope("listing instances") as s:
            rows = {r.id: r for r in s.exec(latest.limit(max(newest, 0)))}
            rows.update((r.id, r) for r in s.exec(job.where(held)) if r.id not in rows)
            total = int(s.exec(count).one())
        return sorted(rows.values(), key=lambda r: (r.requested_at, r.id)), total

    def trial_counts(self, job_id: str) -> tuple[int, int]:
        """How many trials the job has, and how many of them completed."""
        done = func.sum(case((col(Trial.state) == TrialState.COMPLETED, 1), else_=0))
        stmt = select(func.count(), func.coalesce(done, 0)).where(Trial.job_id == job_id)
        with self._scope("counting trials") as s:
            total, completed = s.exec(stmt).one()
        return int(total), int(completed)

    def job_trial(self, job_id: str, trial_id: str) -> Trial | None:
        """The job's trial whose id is exactly ``trial_id`` (no prefix); None: it has none."""
        stmt = select(Trial).where(Trial.id == trial_id, Trial.job_id == job_id)
        with self._scope(f"reading trial {trial_id!r}") as s:
            return s.exec(stmt).first()

    def bill_sums(self, job_ids: Collection[str] | None = None) -> dict[str, tuple[float, float]]:
        """Per job (None: every job), the ``cost_usd`` of its records closed with their bill
        written by its ``heartbeat_at`` (its orchestrator's last save of its running totals: a
        later bill is not in that save; with none, every closed one), and of its records still
        open. One grouped read; a job with no record is left out."""
        closed = col(InstanceRow.state).in_(sorted(TERMINAL_INSTANCE_STATES))
        written = func.coalesce(col(InstanceRow.billed_at), col(InstanceRow.ended_at))
        saved = col(Job.heartbeat_at)
        by_save = and_(closed, or_(saved.is_(None), written.is_(None), written <= saved))
        cost = col(InstanceRow.cost_usd)
        stmt = (
            select(
                col(InstanceRow.job_id),
                func.sum(case((by_save, cost), else_=0.0)),
                func.sum(case((not_(closed), cost), else_=0.0)),
            )
            .join(Job, col(Job.id) == col(InstanceRow.job_id))
            .group_by(col(InstanceRow.job_id))
        )
        if job_ids is not None:
            stmt = stmt.where(col(InstanceRow.job_id).in_(sorted(set(job_ids))))
        with self._scope("summing the jobs' bills") as s:
            return {j: (float(a or 0.0), float(b or 0.0)) for j, a, b in s.exec(stmt)}

    def report_rows(self, since: float | None) -> tuple[list[InstanceRow], list[InstanceRow]]:
        """The closed records with a bill written after ``since`` (None: any; their
        ``billed_at``, NULL: ``ended_at``, is later, or they have parts, each windowed by the
        caller, :func:`~spotwise.store.bills.extra_bills`) and the records still open, each
        oldest first. ONE statement, so one snapshot: a record closed while the report reads
        is in one list or the other (review-as AS1: two reads, closed then open, missed a record
        closed between them; two SELECTs in one session are still two snapshots, pysqlite
        beginning no transaction for a read and PostgreSQL's READ COMMITTED taking one per
        statement)."""
        stmt = select(InstanceRow)
        if since is not None:
            closed = col(InstanceRow.state).in_(sorted(TERMINAL_INSTANCE_STATES))
            billed_at, ended_at = col(InstanceRow.billed_at), col(InstanceRow.ended_at)
            written = or_(
                billed_at > since,
                and_(billed_at.is_(None), ended_at > since),
                col(InstanceRow.extra_bills_json).is_not(None),
            )
            stmt = stmt.where(or_(not_(closed), written))
        stmt = stmt.order_by(col(InstanceRow.requested_at), col(InstanceRow.id))
        with self._scope("reading the report's instances") as s:
            rows = list(s.exec(stmt))
        ended = [r for r in rows if r.state in TERMINAL_INSTANCE_STATES]
        held = [r for r in rows if r.state not in TERMINAL_INSTANCE_STATES]
        return ended, held
