"""The ``Store``'s launch records: one ``InstanceRow`` per launch attempt, written before the cloud
is called (a crash between the two is reconciled by our tags), then updated as the instance
lives and is billed.

:class:`InstanceRecords` is a base class of :class:`~spotwise.store.repo.Store` (import
``Store``, not this), split from :mod:`spotwise.store.repo` so that each file stays readable.
Like every store method, each runs in its own session scope and returns detached rows.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from sqlmodel import Session, SQLModel, col, select

from spotwise.errors import NotFoundError
from spotwise.store.bills import stamp_bill
from spotwise.store.models import (
    INSTANCE_REQUESTED,
    TERMINAL_INSTANCE_STATES,
    InstanceRow,
    new_id,
    to_json,
)
from spotwise.store.rows import assign, instance_state, plain

RowT = TypeVar("RowT", bound=SQLModel)


class InstanceRecords:
    """Launch records (mixed into :class:`~spotwise.store.repo.Store`)."""

    def _scope(self, action: str) -> AbstractContextManager[Session]:  # Records's
        raise NotImplementedError

    def _update(
        self,
        model: type[RowT],
        key: str,
        what: str,
        fields: Mapping[str, Any],
        stamp: Callable[[Any, dict[str, Any]], None] | None = None,
    ) -> RowT:  # Store's
        raise NotImplementedError

    def record_launch(
        self,
        *,
        job_id: str,
        trial_id: str,
        provider: str,
        region: str,
        zone: str,
        instance_type: str,
        market: str,
        offer_key: str,
        price_per_hour: float,
        tags: Mapping[str, str] | None = None,
        requested_at: float | None = None,
        id: str | None = None,
        **fields: Any,
    ) -> InstanceRow:
        """Record a launch (state ``requested``) BEFORE calling the cloud; ``id`` is our launch
        id (the request's client token), generated when not given. Any other column may be
        given in ``fields``."""
        row = InstanceRow(
            id=id or new_id("l"),
            job_id=job_id,
            trial_id=trial_id,
            provider=provider,
            region=region,
            zone=zone,
            instance_type=instance_type,
            market=plain(market),
            offer_key=offer_key,
            price_per_hour=price_per_hour,
            state=INSTANCE_REQUESTED,
            tags_json=to_json(dict(tags or {})),
            requested_at=_time.time() if requested_at is None else requested_at,
        )
        if "state" in fields:
            fields["state"] = instance_state(fields["state"])
        assign(row, fields, "instance")
        with self._scope(f"recording launch {row.id!r}") as s:
            s.add(row)
        return row

    def update_instance(self, instance_id: str, **fields: Any) -> InstanceRow:
        """Set columns of a launch record; ``billed_at``: when the bill this update writes was
        written (a record closed with an end in the past: now), :func:`stamp_bill`."""
        if "state" in fields:
            fields["state"] = instance_state(fields["state"])
        if "tags" in fields:
            fields["tags_json"] = to_json(dict(fields.pop("tags")))
        return self._update(InstanceRow, instance_id, "instance", fields, stamp_bill)

    def get_instance(self, instance_id: str) -> InstanceRow:
        with self._scope(f"reading instance {instance_id!r}") as s:
            row = s.get(InstanceRow, instance_id)
            if row is None:
                raise NotFoundError(f"instance {instance_id!r} not found")
            return row

    def list_instances(
        self, job_id: str | None, active_only: bool = False, *, ended_since: float | None = None
    ) -> list[InstanceRow]:
        """The job's launches (every job's when ``job_id`` is None), oldest first;
        ``active_only``: state not terminal; ``ended_since``: ended after that time (strictly:
        report windows are half-open, ``(start, end]``: a life ending on a boundary is in one)."""
        with self._scope("listing instances") as s:
            stmt = select(InstanceRow)
            if job_id is not None:
                stmt = stmt.where(InstanceRow.job_id == job_id)
            if ended_since is not None:
                stmt = stmt.where(col(InstanceRow.ended_at) > ended_since)
            if active_only:
                stmt = stmt.where(col(InstanceRow.state).not_in(sorted(TERMINAL_INSTANCE_STATES)))
            stmt = stmt.order_by(col(InstanceRow.requested_at), col(InstanceRow.id))
            return list(s.exec(stmt))
