"""Fakes the orchestrator tests share: the local provisioner behaving like a cloud.

Import it as ``orch_fakes`` (pytest puts this folder on ``sys.path``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from spotwise.errors import ProviderError, QuotaError, ThrottledError, TransientError
from spotwise.planner import orchestrator
from spotwise.providers.base import TAG_LAUNCH, Instance, InstanceState, LaunchRequest, Notice

LISTING_500 = "gcp: listing instances: 500 Internal error. Please try again."
THROTTLED = "gcp: launching: the API is throttling requests (429 Too Many Requests)"
UNAVAILABLE = "gcp: launching: 503 Service Unavailable"


class Cloudlike:
    """The local provisioner, behaving like a cloud in the ways a test asks for."""

    def __init__(
        self,
        inner: Any,
        *,
        fail_first_launch: bool = False,
        stop_when_exited: bool = False,
        fail_terminate: bool = False,
        fail_launch_listings: int = 0,
        throttle_launches: int = 0,
        fail_job_listings: int = 0,
        quota_regions: tuple[str, ...] = (),
        unavailable_launches: int = 0,
        throttle_after_create: int = 0,
        hide_launches: int = 0,
        listing_lag_s: float = 0.0,
        unavailable_after_create: int = 0,
        dead_after_create: int = 0,
    ) -> None:
        # launch calls whose create is accepted, then the instance ends before it runs (spot
        # capacity lost, Azure provisioning Failed) and the answer is lost (a 503): the same
        # request again returns that instance as the cloud now describes it, ended
        self.dead_after_create = dead_after_create
        self.dead: set[str] = set()
        # launch calls that create the instance (or find the one their request made), then fail
        # with a 503: the answer was lost (a timed-out try of the SDK's retries)
        self.unavailable_after_create = unavailable_after_create
        self.created_then_lost: list[str] = []  # their instance ids, once each
        # like the real provisioners, idempotent on the request's client token (the launch
        # id): a call with a token a create already used returns that instance, makes none
        self.by_token: dict[str, Instance] = {}
        self.adopted: list[str] = []  # instance ids a repeated token returned
        self.calls: list[tuple[float, str]] = []  # (wall time, client token) of every call
        self.unavailable_launches = unavailable_launches  # launches refused with a 503
        # launches whose instance is created, then the call fails as throttled (a timed-out
        # try of the SDK's retries, the next tries throttled)
        self.throttle_after_create = throttle_after_create
        # listings by launch tag that miss the launch's instance (an eventually consistent API)
        self.hide_launches = hide_launches
        self.LISTING_LAG_S = listing_lag_s
        self.created_then_throttled: list[str] = []  # their instance ids
        self.quota_regions = quota_regions  # regions whose quota refuses every launch
        self.inner = inner
        self.throttle_launches = throttle_launches  # launches refused for the request rate
        self.fail_job_listings = fail_job_listings  # listings of the job's instances that fail
        self.throttled_at: list[float] = []  # wall times of the refused launches
        self.quota_refused: list[str] = []  # zones of the launches a quota refused
        self.listing_failed_at: list[float] = []  # wall times of the failed job listings
        # how many listings of one launch's instances (a failed launch's cleanup) fail
        self.fail_launch_listings = fail_launch_listings
        self.name = inner.name
        self.fail_first_launch = fail_first_launch
        self.stop_when_exited = stop_when_exited
        self.fail_terminate = fail_terminate
        self.log: list[tuple[str, Any]] = []
        self.launches: list[tuple[str, str]] = []  # (instance id, SPOTWISE_ATTEMPT)
        self.terminated: list[str] = []

    def launch(self, request: LaunchRequest) -> Instance:
        self.calls.append((time.monotonic(), request.client_token))
        if self.throttle_launches > 0:
            self.throttle_launches -= 1
            self.throttled_at.append(time.monotonic())
            raise ThrottledError(THROTTLED)
        if self.unavailable_launches > 0:
            self.unavailable_launches -= 1
            raise TransientError(UNAVAILABLE)
        if request.offer.region in self.quota_regions:
            self.quota_refused.append(request.offer.zone)
            raise QuotaError(f"gcp: quota PREEMPTIBLE_CPUS exceeded in {request.offer.region}")
        made = self.by_token.get(request.client_token)
        if made is not None and made.instance_id in self.dead:
            return replace(made, state=InstanceState.TERMINATED, exists=False)
        if made is not None:  # the same request again: the instance its first create made
            inst = made
            self.adopted.append(inst.instance_id)
        else:
            left = [i.instance_id for i in self.inner.describe() if i.holds_resource()]
            self.log.append(("still there at launch", left))
            inst = self.by_token[request.client_token] = self.inner.launch(request)
            self.launches.append((inst.instance_id, request.env["SPOTWISE_ATTEMPT"]))
        if self.dead_after_create > 0 and made is None:
            self.dead_after_create -= 1
            self.dead.add(inst.instance_id)
            self.inner.terminate([inst.instance_id])  # it never runs the trial
            raise TransientError(UNAVAILABLE)
        if self.throttle_after_create > 0:
            self.throttle_after_create -= 1
            if made is None:
                self.created_then_throttled.append(inst.instance_id)
            raise ThrottledError(THROTTLED)
        if self.unavailable_after_create > 0:
            self.unavailable_after_create -= 1
            if made is None:
                self.created_then_lost.append(inst.instance_id)
            raise TransientError(UNAVAILABLE)
        if self.fail_first_launch and made is None and len(self.launches) == 1:
            # the cloud created the VM, then waiting on it failed
            raise ProviderError("gcp: launching: operation op-1 still running at the deadline")
        return inst

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        if tags and TAG_LAUNCH in tags and self.fail_launch_listings > 0:
            self.fail_launch_listings -= 1
            raise ProviderError(LISTING_500)
        if tags and TAG_LAUNCH in tags and self.hide_launches > 0:
            self.hide_launches -= 1
            return []
        if tags and TAG_LAUNCH not in tags and self.fail_job_listings > 0:
            self.fail_job_listings -= 1
            self.listing_failed_at.append(time.monotonic())
            raise ProviderError(LISTING_500)
        out = []
        for inst in self.inner.describe(tags):
            ended = inst.exit_code is not None and inst.instance_id not in self.terminated
            if self.stop_when_exited and ended:
                # the trial ended and its VM powered off: stopped, still there, billed
                now = self.inner.clock.now()
                inst = replace(inst, state=InstanceState.TERMINATED, ended_at=now, exists=True)
            out.append(inst)
        return out

    def terminate(self, instance_ids: Sequence[str]) -> None:
        self.log.append(("terminate", list(instance_ids)))
        if self.fail_terminate:
            raise ProviderError("gcp: deleting: 403 the caller does not have permission")
        self.terminated += instance_ids
        self.inner.terminate(instance_ids)

    def notices(self) -> list[Notice]:
        return list(self.inner.notices())

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        return list(self.inner.progress(instance_id))


def cloudlike_backends(monkeypatch: pytest.MonkeyPatch, **behaviour: Any) -> list[Cloudlike]:
    """Wrap the provisioner of every market the orchestrator opens in a :class:`Cloudlike`
    with ``behaviour``; returns the list each wrapper is added to as its market is opened."""
    seen: list[Cloudlike] = []
    real = orchestrator.open_backend

    def open_backend(*args: Any, **kwargs: Any) -> Any:
        backend = real(*args, **kwargs)
        backend.provisioner = Cloudlike(backend.provisioner, **behaviour)
        seen.append(backend.provisioner)
        return backend

    monkeypatch.setattr(orchestrator, "open_backend", open_backend)
    return seen
