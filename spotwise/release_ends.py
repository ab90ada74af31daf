"""When a life `spotwise cancel` finds gone ended, as the job's store says, and the count of a
life its provider took (:mod:`spotwise.release`; split from it so that each file stays readable).

An instance gone from its provider's listing whose provider does not say when it ended (Azure
keeps nothing of a deleted VM) was billed up to the cancel, an upper bound, even where the store
holds its provider's notice and deadline, or the drain's request to delete it (review-bb F2):
:func:`gone_end` ends it there. A life the provider took is closed ``revoked`` and counted by a
``revoked`` event (:func:`note_revoked`), as its orchestrator counts one (review-bb F4).
"""

from __future__ import annotations

from typing import Any

from spotwise.planner.reconcile_ends import StoredEnd, stored_end


def note_revoked(store: Any, row: Any, end: float) -> None:
    """A ``revoked`` event for the life of record ``row`` its provider took (the job's
    revocation count, :func:`~spotwise.release._sum_job`), unless its orchestrator wrote
    one for it (or an earlier cancel did)."""
    for e in store.events(row.job_id, kind="revoked"):
        if row.id in (e.instance_id, e.detail.get("launch")):
            return
    store.add_event(
        row.job_id, "revoked", end, trial_id=row.trial_id, instance_id=row.id,
        zone=row.zone, launch=row.id, by="cancel",
    )  # fmt: skip


def gone_end(store: Any, said: list[Any], one: Any, rows: list[Any]) -> StoredEnd | None:
    """:func:`~spotwise.planner.reconcile_ends.stored_end` of settled record ``one`` (gone,
    its provider not saying when), from the job's events ``said`` and its life's last report."""
    launch = one.held.launch_id
    trial = next((r.trial_id for r in rows if r.id == launch), None)
    obs = store.observations(trial) if trial is not None else []
    seen = max((o.wall_time for o in obs if o.instance_id == launch), default=None)
    return stored_end(said, launch, one.instance_id, one.held.provider, seen)
