"""How the GCP Provisioner deletes our instances, and deletes again the ones whose delete failed.

``terminate`` refuses, before deleting anything, any id that is not one of our instances (not
``zone/name``, not found and never seen, or without spotwise labels): money safety. A ``delete``
fails at once instead of retrying: its caller (the orchestrator, ``spotwise cancel``) deletes
again. One GCE accepted whose operation failed is sent again by ``describe``
(:meth:`GcpDeletes._redelete`), at most :data:`REDELETES` times. A mixin of
:class:`~spotwise.providers.gcp_provisioner.GcpProvisioner`, split from it so that each file
stays readable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from spotwise.errors import ProviderError
from spotwise.providers.base import Instance, InstanceState, is_ours
from spotwise.providers.gcp import GcpClients, GcpSettings
from spotwise.providers.gcp_errors import api_error
from spotwise.providers.gcp_launch import request_id
from spotwise.providers.gcp_operations import INSTANCE_ID as _ID

REDELETES = 3  # deletes sent again for a VM whose accepted delete failed (:meth:`_redelete`)


class GcpDeletes:
    """Deletes of our instances, and of those whose accepted delete failed."""

    settings: GcpSettings
    clients: GcpClients
    clock: Callable[[], float]
    _known: dict[str, Instance]
    _terminated: set[str]
    _deleting: dict[str, tuple[str, str, int]]  # id → zone, delete op, attempt
    _cache: dict[tuple[tuple[str, str], ...], tuple[float, list[Instance]]]

    def _get(self, zone: str, name: str) -> Instance | None:  # the provisioner's
        raise NotImplementedError

    def terminate(self, instance_ids: Sequence[str]) -> None:
        targets: list[tuple[str, str, str]] = []
        refused: list[str] = []
        for iid in instance_ids:
            m = _ID.match(iid)
            if not m:
                refused.append(iid)
                continue
            zone, name = m.groups()
            inst = self._get(zone, name)
            if inst is None:
                if iid not in self._known:
                    refused.append(iid)
                continue  # ours and already gone
            if not is_ours(inst.tags):
                refused.append(iid)
                continue
            targets.append((iid, zone, name))
        if refused:
            raise ProviderError(
                f"gcp: refusing to terminate {refused}: not instances launched by spotwise "
                "(no spotwise labels) in this project"
            )
        now = self.clock()
        self._cache.clear()
        for iid, zone, name in targets:
            self._delete(iid, zone, name, 0)
            self._terminated.add(iid)
            known = self._known.get(iid)
            if known is not None:
                known.exists = False
                if not known.state.is_terminal():
                    known.state, known.ended_at = InstanceState.TERMINATED, now

    def _delete(self, iid: str, zone: str, name: str, attempt: int) -> None:
        """Send the delete (a ``requestId`` per ``attempt``), and keep its operation's name."""
        rid = request_id(iid, "delete" + (f"-{attempt}" if attempt else ""))
        where = {"project": self.settings.project, "zone": zone, "instance": name}
        try:  # retry=None: fails at once; the caller deletes again (module docstring)
            op = self.clients.get("InstancesClient").delete(
                request={**where, "request_id": rid},
                retry=None,
                timeout=self.clients.bounds["timeout"],
            )
            self._deleting[iid] = (zone, str(op.name), attempt)
        except Exception as e:
            if getattr(e, "code", None) != 404:
                raise api_error(f"gcp: deleting {iid} failed", e) from None

    def _redelete(self, live: dict[str, Instance]) -> None:
        """A VM listed running after the delete GCE accepted for it failed (its operation ended
        in an error) is deleted again, at most :data:`REDELETES` times; then ``describe``
        shows it as listed (running, still there) instead of as being deleted."""
        for iid, (zone, op_name, n) in list(self._deleting.items()):
            inst = live.get(iid)
            if inst is None or inst.state not in (InstanceState.RUNNING, InstanceState.PENDING):
                continue  # gone, or its deletion under way (or not in this listing's filter)
            where = {"project": self.settings.project, "zone": zone, "operation": op_name}
            try:
                op = self.clients.get("ZoneOperationsClient").get(**where, **self.clients.bounds)
            except Exception:
                continue  # asked again at the next listing
            if getattr(op.status, "name", str(op.status)) != "DONE" or not op.error.errors:
                continue
            if n < REDELETES and is_ours(inst.tags):
                with contextlib.suppress(ProviderError):
                    self._delete(iid, zone, iid.split("/", 1)[1], n + 1)
            else:
                self._terminated.discard(iid)
                del self._deleting[iid]
