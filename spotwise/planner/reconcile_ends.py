"""When the bill of an instance record that `spotwise cancel` settles ends
(:func:`~spotwise.planner.reconcile.reconcile_records`): split from
:mod:`spotwise.planner.reconcile` so that each file stays readable.

A listed instance that still holds a resource is terminated, but its compute may have stopped
long before: a GCE VM ``TERMINATED`` (preempted with ``STOP``, or powered off by its agent after
its trial) or an Azure VM deallocated (evicted with ``Deallocate``) bills only its disk since
then (:func:`stopped_end`). An instance the listing no longer shows ended when its provider
still says (:func:`~spotwise.providers.base.ended_unlisted`: GCE keeps the preemption and
delete operations), else when the job's own store says (:func:`stored_end`: the deadline of its
provider's notice, the drain's request to delete it), else at a time nobody says: it is billed
up to the cancel, an upper bound (:func:`upper_bound_note`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from spotwise.errors import SpotwiseError
from spotwise.providers.base import Instance, InstanceState, ended_unlisted

#: The event the drain writes just before it asks its provider to delete running instances
#: (``launches``: their launch ids; its time: the request's): a cancel ends there the record of
#: one found gone whose provider does not say when (the drain was killed before its bill).
TERMINATING = "terminating"


def stopped_end(inst: Instance, name: str) -> dict[str, Any]:
    """The :class:`~spotwise.planner.reconcile.Settled` fields of a listed instance that this
    cancel terminates: one already in a terminal state (stopped, deallocated, preempted with
    ``STOP``) ended when its provider says it stopped (``ended_at``), ``revoked`` when the
    provider took it. One whose provider gives no end is billed up to now: a running one, one
    stopped but still billed (an Azure VM stopped, not deallocated), or one taken by its
    provider at a time it does not say (a ``note`` says so)."""
    if not inst.state.is_terminal():
        return {}
    revoked = inst.state is InstanceState.REVOKED
    if inst.ended_at is None and revoked:
        why = f"{name} took {inst.instance_id} but does not say when: billed up to now"
        return {"revoked": revoked, "note": why}
    return {"ended_at": inst.ended_at, "revoked": revoked}


def unlisted_ends(
    prov: object, name: str, instance_ids: Sequence[str]
) -> tuple[dict[str, tuple[float, bool]], str]:
    """Of ``instance_ids`` (of records whose instance a listing that succeeded did not show),
    when each ended as its provider still says (:func:`ended_unlisted`), and "" or why the
    provider could not say (each is then billed up to now: :func:`upper_bound_note`)."""
    try:
        return ended_unlisted(prov, instance_ids), ""
    except SpotwiseError as e:
        return {}, str(e)


def upper_bound_note(name: str, instance_id: str, why: str = "") -> str:
    """What a record closed ``not found`` says of its bill: up to now, an upper bound."""
    return (
        f"{instance_id} is gone and {name} does not say when it ended: billed up to now, "
        "an upper bound" + (f" ({why})" if why else "")
    )


class StoredEnd(NamedTuple):
    """When a gone instance ended as the job's store says (:func:`stored_end`)."""

    at: float
    revoked: bool  # its provider took it (a notice's deadline), not the drain's delete
    note: str


def stored_end(
    events: Sequence[Any], launch_id: str, instance_id: str, name: str, seen: float | None
) -> StoredEnd | None:
    """When the instance of launch ``launch_id``, gone from a listing whose provider does not
    say when it ended (Azure keeps nothing of a deleted VM), ended as the job's ``events``
    say: the deadline of its provider's ``notice`` (the provider took it then: revoked), or
    the drain's :data:`TERMINATING` request naming it when that came first (we deleted it:
    not revoked); never before ``seen`` (its last report: it ran then). None: the store says
    nothing (it is billed up to now, an upper bound)."""
    deadlines = [
        float(e.detail["deadline"])
        for e in events
        if e.kind == "notice"
        and e.instance_id == launch_id
        and isinstance(e.detail.get("deadline"), int | float)
    ]
    asked = [
        float(e.time)
        for e in events
        if e.kind == TERMINATING and launch_id in (e.detail.get("launches") or ())
    ]
    notice = max(deadlines, default=None)
    drain = max(asked, default=None)
    if drain is not None and (notice is None or drain < notice):
        at, revoked = drain, False
        note = f"{instance_id} is gone and {name} does not say when it ended: billed up to the "
        note += "job's drain's request to delete it"
    elif notice is not None:
        at, revoked = notice, True
        note = f"{instance_id} is gone after {name}'s notice: billed up to the notice's "
        note += f"deadline, as a life {name} took"
    else:
        return None
    if seen is not None and seen > at:
        at = seen
        note += " (raised to its last report, later)"
    return StoredEnd(at, revoked, note)
