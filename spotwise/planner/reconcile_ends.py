"""When the bill of an instance record that `spotwise cancel` settles ends
(:func:`~spotwise.planner.reconcile.reconcile_records`): split from
:mod:`spotwise.planner.reconcile` so that each file stays readable.

A listed instance that still holds a resource is terminated, but its compute may have stopped
long before: a GCE VM ``TERMINATED`` (preempted with ``STOP``, or powered off by its agent after
its trial) or an Azure VM deallocated (evicted with ``Deallocate``) bills only its disk since
then (:func:`stopped_end`). An instance the listing no longer shows ended when its provider
still says (:func:`~spotwise.providers.base.ended_unlisted`: GCE keeps the preemption and
delete operations), else at a time nobody says: it is billed up to the cancel, an upper bound
(:func:`upper_bound_note`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spotwise.errors import SpotwiseError
from spotwise.providers.base import Instance, InstanceState, ended_unlisted


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
