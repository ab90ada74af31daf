"""What GCE's zone operations and guest attributes say of our instances: when one was preempted
or deleted (kept after the instance is gone) and the notice its agent wrote, and the answer to a
wait on a zone operation that a stop signal cuts short (:meth:`GcpOperations._op_answer`). A
mixin of :class:`~spotwise.providers.gcp_provisioner.GcpProvisioner`, split from it so that each
file stays readable."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from spotwise.errors import ProviderError
from spotwise.providers import stopping
from spotwise.providers.gcp import GcpClients, GcpSettings
from spotwise.providers.gcp_errors import api_error, read_timed_out
from spotwise.providers.gcp_instances import operation_times
from spotwise.providers.gcp_launch import GUEST_NAMESPACE, json_dict

INSTANCE_ID = re.compile(r"^([a-z]+-[a-z]+\d+-[a-z])/([a-z][-a-z0-9]{0,62})$")  # zone/name
WARN_EVERY_S = 60.0  # a guest read that keeps failing is said again this often, with a count

log = logging.getLogger("spotwise.providers")


class GcpOperations:
    """Reads of the project's operations and an instance's guest attributes."""

    settings: GcpSettings
    clients: GcpClients
    clock: Callable[[], float]
    # instances whose last guest read failed → [failed reads, monotonic time of the last warning]
    _guest_failing: dict[str, list[float]]

    def _op_answer(self, where: Mapping[str, str]) -> Any:
        """The zone operation ``where`` names, from a ``wait`` (GCE holds it up to 2 minutes,
        until the operation ends; one unanswered within the per-request timeout is followed by
        a ``get``: an answer means the operation is only slow). None when a stop is asked
        meanwhile (:func:`spotwise.providers.stopping.requested`, looked at every
        :data:`~spotwise.providers.stopping.HEAR_EVERY_S`): the call runs in a daemon thread,
        left to end on its own (a read, bounded by ``api_deadline_s``)."""
        ops = self.clients.get("ZoneOperationsClient")
        box: list[tuple[bool, Any]] = []
        done = threading.Event()

        def answer() -> None:
            try:
                try:
                    op = ops.wait(**where, **self.clients.bounds)
                except Exception as e:
                    if not read_timed_out(e):
                        raise
                    op = ops.get(**where, **self.clients.bounds)  # answered: a slow operation
                box.append((True, op))
            except BaseException as e:  # handed to the caller, who may have stopped waiting
                box.append((False, e))
            finally:
                done.set()

        if stopping.requested():
            return None
        threading.Thread(target=answer, name="spotwise-gcp-op-wait", daemon=True).start()
        while not done.wait(stopping.HEAR_EVERY_S):
            if stopping.requested():
                return None
        ok, value = box[0]
        if not ok:
            raise value
        return value

    @staticmethod
    def _pause(seconds: float) -> bool:
        """Sleep ``seconds``, or less when a stop is asked meanwhile: whether one was."""
        end = time.monotonic() + seconds
        while not stopping.requested():
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, stopping.HEAR_EVERY_S))
        return True

    def _operations(self, kind: str, *, end: bool = False) -> dict[str, float]:
        """instance id → time of its latest zone operation of type ``kind`` (GCE keeps an
        instance's operations after the instance is gone): :func:`operation_times`."""
        try:
            pager = self.clients.get("GlobalOperationsClient").aggregated_list(
                request={"project": self.settings.project, "filter": f'operationType = "{kind}"'},
                **self.clients.bounds,
            )
            ops = [op for _, scoped in pager for op in scoped.operations]
        except Exception as e:
            raise api_error(f"gcp: listing {kind} operations failed", e) from None
        return operation_times(ops, self.clock(), end=end)

    def _preempted(self) -> dict[str, float]:
        """instance id → preemption time, from ``compute.instances.preempted`` operations."""
        return self._operations("compute.instances.preempted")

    def ended_unlisted(self, instance_ids: Sequence[str]) -> dict[str, tuple[float, bool]]:
        """Of ``instance_ids`` (ours, no longer listed), when each ended, from the operations
        GCE keeps: id → ``(its preemption's time, True)`` (a Spot VM deleted on preemption, or
        stopped by it and deleted since: its compute stopped then), else ``(its delete's end,
        False)``; an id with neither is left out (its operations expired, or it never was)."""
        want = [i for i in instance_ids if INSTANCE_ID.match(i)]
        taken = self._preempted() if want else {}
        rest = [i for i in want if i not in taken]
        deleted = self._operations("delete", end=True) if rest else {}
        out = {i: (taken[i], True) for i in want if i in taken}
        return out | {i: (deleted[i], False) for i in rest if i in deleted}

    def _guest_notice(self, iid: str) -> dict[str, object] | None:
        zone, name = iid.split("/", 1)
        try:
            attrs = self.clients.get("InstancesClient").get_guest_attributes(
                request={
                    "project": self.settings.project,
                    "zone": zone,
                    "instance": name,
                    "query_path": f"{GUEST_NAMESPACE}/",
                },
                **self.clients.bounds,
            )
        except Exception as e:
            if getattr(e, "code", None) in (400, 404):  # none written yet / attributes disabled
                return None
            raise api_error(f"gcp: reading guest attributes of {iid} failed", e) from None
        for entry in attrs.query_value.items:
            if entry.namespace == GUEST_NAMESPACE and entry.key == "notice":
                return json_dict(entry.value) or {}
        return None

    def _guest_notices(self, instance_ids: Iterable[str]) -> dict[str, dict[str, object]]:
        """instance id → the notice record its agent wrote to the guest attributes, of those
        that have one. A read that fails (a 403, a 429, a 5xx) is no notice of that instance
        this pass: logged once, then at most once every :data:`WARN_EVERY_S` with a count, and
        tried again at the next pass; the other instances are read all the same."""
        out: dict[str, dict[str, object]] = {}
        for iid in instance_ids:
            try:
                rec = self._guest_notice(iid)
            except ProviderError as e:
                self._guest_failed(iid, e)
                continue
            if self._guest_failing.pop(iid, None) is not None:
                log.info("the guest attributes of %s can be read again", iid)
            if rec is not None:
                out[iid] = rec
        return out

    def _guest_failed(self, iid: str, e: ProviderError) -> None:
        failed = self._guest_failing.get(iid)
        now = time.monotonic()
        if failed is None:
            self._guest_failing[iid] = [1, now]
            log.warning("%s (no notice from it this pass; read again at each poll)", e)
            return
        failed[0] += 1
        if now - failed[1] >= WARN_EVERY_S:
            failed[1] = now
            log.warning("%s (%d failed reads; read again at each poll)", e, failed[0])
