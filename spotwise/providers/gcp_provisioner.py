"""The GCP Provisioner: Spot VMs launched, watched and deleted through compute_v1.

* ``launch`` inserts one instance (``scheduling.provisioning_model = SPOT`` and an
  ``instance_termination_action``; ``STANDARD`` for on-demand) with our tags as labels, waits on
  the zone operation with its own ``ZoneOperationsClient`` and returns the instance (a stop
  signal ends the wait within a fraction of a second, as a refused launch whose instance the
  orchestrator deletes: :mod:`spotwise.providers.stopping`). The
  instance name and the insert's ``requestId`` (a UUID5 of ``client_token``) make a retried
  launch idempotent. The launch spec (the trial's argv/env, its artifacts folder and attempt;
  :func:`spotwise.providers.channel.launch_spec`) travels as JSON in the ``spotwise-launch``
  metadata item; the fixed startup script only starts :mod:`spotwise.providers.gcp_agent`,
  which reads it — nothing is interpolated into shell text. A launch whose checkpoint location
  an instance cannot reach (``gs://`` or a shared ``file://`` folder), or whose trial has no
  channel folder (option ``artifacts``, else that location; :mod:`spotwise.providers.channel`),
  is refused before anything is inserted.
* ``describe`` lists instances through a server-side label filter; exact tags come back from
  the ``spotwise-tags`` metadata item, the trial's artifacts folder from ``spotwise-launch``.
  Instances this object saw that are gone (a Spot VM is deleted on preemption) stay listed as
  REVOKED or TERMINATED. A listed VM in status ``TERMINATED`` (stopped from inside, or
  preempted with ``instanceTerminationAction: STOP``) is terminal but still ``exists``: its
  disk is billed until it is deleted. Each instance's ``exit_code`` is the one its agent wrote
  to the artifacts folder (:class:`~spotwise.providers.trialfiles.TrialFiles`): of the
  instances this object launched, and of those a describe filtered by ``spotwise:job`` returns
  (a restarted controller's own job), never of other jobs' VMs in the project.
* ``notices`` reads the agent's status in the artifacts folder (the agent polls the metadata
  server's ``instance/preempted``), plus two signals of its own: ``compute.instances.preempted``
  operations, and the ``spotwise/notice`` guest attribute the agent also writes — both only of
  the instances of this object's jobs (those it launched for, or a describe filtered by
  ``spotwise:job`` named), never of other jobs' VMs in the project. A guest read that fails
  is logged and tried again at the next pass; the other instances' notices still come. Each
  instance's interruption is reported once: a pass whose listing fails still hands out the
  agents' notices it read (it raises the failure only when it has none).
* ``progress`` returns the trial's new events from the artifacts folder. A stop request (the
  trial's local stop file) and the local control file are relayed there, as on AWS.

Reads (the listing, the preemption scan, each trial's files) happen at most once per
``poll_s`` (option, default ``$SPOTWISE_GCP_POLL_S`` or 2 s), so a fast orchestrator loop
cannot flood the APIs; our own launches and deletions refresh the listing at once.

Every call is bounded by ``api_deadline_s`` (:func:`spotwise.providers.gcp_errors.call_bounds`; the
``requestId`` makes the insert's retries safe). ``terminate`` and its deletes, sent again by
``describe`` when an accepted one failed: :mod:`spotwise.providers.gcp_deletes`. GCE keeps a
gone VM's preemption and delete operations: ``ended_unlisted`` says when it ended (``spotwise
cancel``, :func:`~spotwise.providers.base.ended_unlisted`). A ``wait`` on an operation
(the server may hold it 2 minutes) unanswered within the per-request timeout is followed by a
``get`` of the operation: an answer means the operation is only slow.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from spotwise.errors import CapacityError, ProviderError
from spotwise.providers import stopping
from spotwise.providers.base import (
    TAG_JOB,
    TAG_TRIAL,
    Instance,
    InstanceState,
    LaunchRequest,
    Notice,
    NoticeKind,
    Offer,
    is_ours,
)
from spotwise.providers.billing import rule_for
from spotwise.providers.channel import artifacts_uri, attempt_of
from spotwise.providers.gcp import NAME, GcpClients, GcpSettings, label_filter, label_key
from spotwise.providers.gcp_deletes import GcpDeletes
from spotwise.providers.gcp_errors import (
    CAPACITY_CODES,
    api_error,
    operation_error,
)
from spotwise.providers.gcp_instances import read_instance
from spotwise.providers.gcp_launch import (
    instance_body,
    instance_name,
    request_id,
)
from spotwise.providers.gcp_operations import GcpOperations, log
from spotwise.providers.gcp_prices import PriceTable
from spotwise.providers.trialfiles import Tracks

_CAPACITY = CAPACITY_CODES


def _has(inst: Instance, want: Mapping[str, str]) -> bool:
    return all(inst.tags.get(k) == v for k, v in want.items())


def _stopped(what: str, done: str) -> CapacityError:
    """A launch ended by a stop signal: refused (no failure of the trial); its instance, if
    the insert made one, is the failed launch's to delete (found by its launch tag)."""
    return CapacityError(
        f"gcp: {what}: {done}: the job is stopping (a signal); an instance the insert made is "
        "looked up by its spotwise:launch tag and deleted",
        hint="nothing to fix: the job was asked to stop",
    )


class GcpProvisioner(GcpDeletes, GcpOperations):
    """Launch, watch and delete Spot (or on-demand) instances that carry our labels."""

    name = NAME

    def __init__(
        self,
        settings: GcpSettings,
        clients: GcpClients,
        prices: PriceTable,
        *,
        poll_interval_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.clients = clients
        self.prices = prices
        self.poll_interval_s = poll_interval_s  # between waits on a zone operation
        self.poll_s = float(settings.opt("poll_s") or os.environ.get("SPOTWISE_GCP_POLL_S") or 2)
        self.operation_timeout_s = settings.seconds("operation_timeout_s", 600.0)  # > 0, finite
        self.clock = clock
        self.tracks = Tracks(self.poll_s, clock)
        self._known: dict[str, Instance] = {}
        self._channels: dict[str, tuple[str, str]] = {}  # id → (artifacts, attempt)
        self._terminated: set[str] = set()
        self._deleting: dict[str, tuple[str, str, int]] = {}  # id → zone, delete op, attempt
        self._noticed: set[str] = set()
        self._jobs: set[str] = set()  # our jobs: launched for, or described by (``notices``)
        self._guest_failing: dict[str, list[float]] = {}
        self._cache: dict[tuple[tuple[str, str], ...], tuple[float, list[Instance]]] = {}
        self._last_scan = -1e18

    # ---- launch ---------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        if not is_ours(request.tags):
            raise ProviderError("gcp: refusing to launch an instance without spotwise tags")
        offer = request.offer
        if offer.provider != NAME:
            raise ProviderError(f"gcp: cannot launch a {offer.provider!r} offer")
        ckpt = request.env.get("SPOTWISE_CHECKPOINT_URI", "")
        job, trial = request.tags[TAG_JOB], request.tags[TAG_TRIAL]
        artifacts = artifacts_uri(NAME, self.settings.options, ckpt, job, trial)
        name = instance_name(request.client_token)
        self._jobs.add(job)
        instances = self.clients.get("InstancesClient")
        self._cache.clear()
        what = f"launching {offer.instance_type} in {offer.zone}"
        if stopping.requested():  # asked before anything is bought: nothing to delete
            raise _stopped(what, "not sent")
        try:
            op = instances.insert(
                request={
                    "project": self.settings.project,
                    "zone": offer.zone,
                    "instance_resource": instance_body(self.settings, name, request, artifacts),
                    "request_id": request_id(request.client_token),
                },
                **self.clients.bounds,
            )
            self._wait(offer.zone, op.name, what=what)
        except ProviderError:
            raise
        except Exception as e:
            if getattr(e, "code", None) != 409:  # 409: the same launch already created it
                raise self._launch_error(e, offer) from None
        inst = self._get(offer.zone, name)
        if inst is None:
            raise ProviderError(f"gcp: instance {offer.zone}/{name} vanished right after launch")
        self._known[inst.instance_id] = inst
        attempt = str(attempt_of(request.env))
        self.tracks.add(inst.instance_id, artifacts, attempt, request.env)
        return inst

    def _launch_error(self, e: Exception, offer: Offer) -> ProviderError:
        text = f"{getattr(e, 'message', '')} {e}"  # a 503 naming none was retried: passing
        if any(c in text for c in _CAPACITY):
            return CapacityError(
                f"gcp: no {offer.market.value} capacity for {offer.instance_type} in {offer.zone}"
            )
        return api_error(f"gcp: launching {offer.instance_type} in {offer.zone} failed", e)

    def _wait(self, zone: str, op_name: str, *, what: str) -> None:
        """Wait for the zone operation to end, at most ``operation_timeout_s``; a stop signal
        (:mod:`spotwise.providers.stopping`) ends the wait within
        :data:`~spotwise.providers.stopping.HEAR_EVERY_S` (:meth:`_op_answer`, :meth:`_pause`)."""
        deadline = self.clock() + self.operation_timeout_s
        where = {"project": self.settings.project, "zone": zone, "operation": op_name}
        while True:
            op = self._op_answer(where)
            if op is None:
                raise _stopped(what, f"stopped waiting for operation {op_name}")
            if getattr(op.status, "name", str(op.status)) == "DONE":
                break
            if self.clock() > deadline:
                raise ProviderError(
                    f"gcp: {what}: operation {op_name} still running at the deadline"
                )
            if self._pause(self.poll_interval_s):
                raise _stopped(what, f"stopped waiting for operation {op_name}")
        errors = list(op.error.errors) if op.error else []
        if errors:
            codes = " ".join(f"{x.code}: {x.message}" for x in errors)
            if any(x.code in _CAPACITY or "EXHAUSTED" in x.code for x in errors):
                raise CapacityError(f"gcp: {what}: {codes}")
            mapped = operation_error(f"gcp: {what} failed", errors)  # throttled, quota
            if mapped is not None:
                raise mapped
            raise ProviderError(f"gcp: {what} failed: {codes}")

    # ---- describe -------------------------------------------------------------------------
    def _get(self, zone: str, name: str) -> Instance | None:
        try:
            raw = self.clients.get("InstancesClient").get(
                project=self.settings.project, zone=zone, instance=name, **self.clients.bounds
            )
        except Exception as e:
            if getattr(e, "code", None) == 404:
                return None
            raise api_error(f"gcp: reading instance {zone}/{name} failed", e) from None
        return self._to_instance(raw)

    def _list(self, tags: Mapping[str, str]) -> dict[str, Instance]:
        try:
            pager = self.clients.get("InstancesClient").aggregated_list(
                request={"project": self.settings.project, "filter": label_filter(tags)},
                **self.clients.bounds,
            )
            raws = [i for _, scoped in pager for i in scoped.instances]
        except Exception as e:
            raise api_error("gcp: listing instances failed", e) from None
        out = {}
        for raw in raws:
            if raw.labels.get(label_key("spotwise:managed")) != "true":
                continue  # the server filter should have done this; never trust it alone
            inst = self._to_instance(raw)
            out[inst.instance_id] = inst
        return out

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        want = dict(tags or {})
        key = tuple(sorted(want.items()))
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.poll_s:
            return hit[1]
        live = self._list(want)
        if self._deleting:
            self._redelete(live)
        missing = [i for i, x in self._known.items() if i not in live and _has(x, want)]
        gone = [i for i in missing if not self._known[i].state.is_terminal()]
        stopped = [i for i, x in live.items() if x.state is InstanceState.TERMINATED]
        preempted = self._preempted() if (gone or stopped) else {}
        now = self.clock()
        for iid, inst in live.items():
            taken = iid in preempted or self.tracks.interrupted(iid)
            if iid in self._terminated:
                inst.state = InstanceState.TERMINATED
                inst.exists = False  # its deletion, asked by us, is under way
            elif inst.state is InstanceState.TERMINATED and taken:
                inst.state = InstanceState.REVOKED
            if inst.state.is_terminal() and inst.ended_at is None:
                inst.ended_at = preempted.get(iid, now)
            self._known[iid] = inst
        for iid in gone:
            inst = self._known[iid]
            taken = iid in preempted or self.tracks.interrupted(iid)
            revoked = taken and iid not in self._terminated
            inst.state = InstanceState.REVOKED if revoked else InstanceState.TERMINATED
            inst.ended_at = preempted.get(iid, now)
        for iid in missing:
            self._known[iid].exists = False
        out = [i for i in self._known.values() if _has(i, want)]
        own_job = TAG_JOB in want  # never follow (read the folders of) other jobs' VMs
        if own_job:
            self._jobs.add(want[TAG_JOB])
        for inst in out:
            if own_job:
                self._follow(inst.instance_id)
            self.tracks.observe(inst)
        self._cache[key] = (time.monotonic(), out)
        return out

    def _follow(self, iid: str) -> None:
        """Track an instance's trial from the launch spec in its metadata (after a restart);
        only for an instance the caller names or whose job it describes."""
        if iid not in self.tracks.by_id and iid in self._channels:
            self.tracks.add(iid, *self._channels[iid])

    def _to_instance(self, raw: Any) -> Instance:
        inst, channel = read_instance(raw, self.prices)  # :mod:`spotwise.providers.gcp_instances`
        if channel is not None:
            self._channels[inst.instance_id] = channel
        return inst

    # ---- notices / progress ----------------------------------------------------------------
    def notices(self) -> list[Notice]:
        out: list[Notice] = []
        for n in self.tracks.notices():  # what the agents wrote: the deadline they were given
            if n.kind is NoticeKind.INTERRUPTION:
                if n.instance_id in self._noticed:
                    continue
                self._noticed.add(n.instance_id)
            out.append(n)
        if time.monotonic() - self._last_scan < self.poll_s or not self._jobs:
            return out
        self._last_scan = time.monotonic()
        try:
            out += self._scan()
        except ProviderError as e:
            if not out:
                raise  # nothing to hand out: the orchestrator sees the failure (and pauses)
            # the agents' notices need no listing: not held behind a scan that keeps failing
            log.warning("%s (the agents' notices are handed out; scanned again next pass)", e)
        return out

    def _scan(self) -> list[Notice]:
        """Interruptions of our jobs' instances (only theirs: a read per running instance)
        from the preemption operations and the agents' guest attributes."""
        lead = rule_for(NAME).notice_lead_s
        ours = {i.instance_id: i for j in sorted(self._jobs) for i in self.describe({TAG_JOB: j})}
        out: list[Notice] = []
        for iid, at in self._preempted().items():
            if iid in ours and iid not in self._noticed:
                out.append(Notice(iid, NoticeKind.INTERRUPTION, at, at + lead))
                self._noticed.add(iid)
        up = [i for i, x in ours.items() if x.state is InstanceState.RUNNING]
        for iid, rec in self._guest_notices([i for i in up if i not in self._noticed]).items():
            at = float(rec.get("received_at") or self.clock())  # type: ignore[arg-type]
            deadline = float(rec.get("deadline") or at + lead)  # type: ignore[arg-type]
            out.append(Notice(iid, NoticeKind.INTERRUPTION, at, deadline))
            self._noticed.add(iid)
        return out

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        """The trial's events written to its artifacts folder since the last call."""
        self._follow(instance_id)
        return self.tracks.progress(instance_id)

    def agent_heard(self, instance_id: str) -> bool:
        """Whether its agent's status has been read (:mod:`spotwise.planner.no_word`)."""
        return self.tracks.heard(instance_id)
